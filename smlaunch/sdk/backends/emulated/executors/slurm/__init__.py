"""The Slurm executor: each host an ``srun`` step on a node of the job's allocation.
:mod:`.executor` (in the agent), :mod:`.host` (the step's own process on the node).
"""
