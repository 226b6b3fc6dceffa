"""smlaunch's ``smdistributed.modelparallel`` (smp v1): only the PyTorch API exists, in ``.torch``."""
