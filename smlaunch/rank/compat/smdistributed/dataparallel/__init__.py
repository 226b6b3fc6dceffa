"""``smdistributed.dataparallel`` on plain torch.distributed (smlaunch compat).

Scripts written for SageMaker's distributed data parallel library run unchanged: the collective
calls, ``DistributedDataParallel`` and the ``"smddp"`` process-group backend map to torch's own,
with NCCL on GPU machines and gloo on CPU. There is no AWS-specific all-reduce here: the numbers a
script computes are the same, the speed is torch's.
"""

__version__ = "1.8.0+smlaunch"
