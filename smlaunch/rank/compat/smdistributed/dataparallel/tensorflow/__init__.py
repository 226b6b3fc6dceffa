"""Refused on import: ``smdistributed.dataparallel.tensorflow`` is AWS's library compiled against
TensorFlow (and AWS dropped TensorFlow from it); smlaunch's shim covers PyTorch only."""

raise ImportError(
    "smdistributed.dataparallel.tensorflow (smlaunch): SageMaker's data parallel library for TensorFlow "
    "needs the real library, in a SageMaker TensorFlow image that has it (TensorFlow 2.3 to 2.x); on this "
    "machine use tf.distribute.MultiWorkerMirroredStrategy with "
    "distribution={'multi_worker_mirrored_strategy': {'enabled': True}}"
)
