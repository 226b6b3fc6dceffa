"""MPI in one folder: :mod:`.launcher` (the plan for ``mpirun``), :mod:`.local` (hosts of an emulated
job), :mod:`.output` (rank output), :mod:`.roles` (master and workers), :mod:`.rank` (the wrapper
each rank runs under).
"""
