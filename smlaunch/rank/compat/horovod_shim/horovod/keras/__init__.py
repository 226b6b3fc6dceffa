"""Refused on import, as :mod:`horovod.tensorflow` (Keras on TensorFlow needs the real Horovod)."""

import horovod.tensorflow  # noqa: F401  (raises ImportError saying why)
