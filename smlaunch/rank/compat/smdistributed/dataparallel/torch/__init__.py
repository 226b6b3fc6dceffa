"""``smdistributed.dataparallel.torch``: ``distributed``, ``parallel.distributed`` and ``torch_smddp``."""
