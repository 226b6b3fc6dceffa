"""The model-parallel engine behind the ``smdistributed.modelparallel.torch`` shim.

smp v1's API rebuilt on ``torch.distributed.pipelining``: configuration (:mod:`.config`), rank layout
as a DeviceMesh (:mod:`.layout`), partitioning (:mod:`.partition`), ``DistributedModel``
(:mod:`.model`), ``DistributedOptimizer`` (:mod:`.optimizer`), ``@smp.step`` (:mod:`.step`),
checkpoints (:mod:`.checkpoint`) and the public namespace (:mod:`.api`). Importing this package has no
side effects; ``api.init`` starts everything.
"""
