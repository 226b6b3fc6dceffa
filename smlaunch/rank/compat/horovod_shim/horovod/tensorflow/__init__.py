"""Refused on import: Horovod for TensorFlow/Keras needs the real Horovod (its TensorFlow ops are
compiled against TensorFlow), as SageMaker's TensorFlow training images have it."""

raise ImportError(
    "horovod.tensorflow / horovod.keras (smlaunch): Horovod for TensorFlow needs the real Horovod, in a "
    "container image that has it (SageMaker's TensorFlow training images do: run the job on SageMaker "
    "or in such an image); on this machine use tf.distribute.MultiWorkerMirroredStrategy with "
    "distribution={'multi_worker_mirrored_strategy': {'enabled': True}}"
)
