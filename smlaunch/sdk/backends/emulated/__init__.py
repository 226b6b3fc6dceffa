"""The local backend: a job's hosts on this machine, as processes or containers.

``backend`` (submit / describe / stop through a job directory), ``agent`` (the detached per-job
process that owns the job's state machine), ``executors/`` (how hosts start: processes or Docker
containers), ``layout`` (each host's ``/opt/ml`` tree), ``state`` (the job directory's files),
``data`` (channels), ``checkpoints`` (checkpoint sync), ``spot`` (managed spot attempts),
``metrics``, ``artifacts`` (``model.tar.gz`` / ``output.tar.gz``). Nothing is imported here:
importing the package starts nothing.
"""
