"""smlaunch's stand-in for AWS's ``smdistributed`` package (see :mod:`smlaunch.rank.compat`).

Only importable when ``smlaunch/rank/compat`` is on ``PYTHONPATH``, which the runtime arranges when the real
library is absent. ``smdistributed.dataparallel`` maps to torch.distributed (gloo on CPU, NCCL on GPU);
``smdistributed.modelparallel`` maps to smlaunch's model-parallel engine.
"""
