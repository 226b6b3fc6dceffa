"""The Docker executor: each host a container. :mod:`.executor`, :mod:`.containers` (the engine),
:mod:`.ssh` (MPI between containers), :mod:`.credentials` (what a container may see).
"""
