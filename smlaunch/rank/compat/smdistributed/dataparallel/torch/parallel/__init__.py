"""``smdistributed.dataparallel.torch.parallel``: holds ``distributed.DistributedDataParallel``."""
