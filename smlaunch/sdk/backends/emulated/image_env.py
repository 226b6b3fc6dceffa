"""What a SageMaker framework image gives every job that a run without that image must be given.

Local processes run a job of ``tensorflow-training:2.14.1-cpu-py310`` on this machine's interpreter,
not in that image. Where the image's stack differs from a current install in a way that public
examples depend on, the hosts get the variables that restore the image's behaviour:

- **Keras 2 for TensorFlow images before 2.16.** TensorFlow bundled Keras 2 as ``tf.keras`` up to
  2.15, and SageMaker's TensorFlow training images up to 2.15 ship it so (their core packages pin
  ``tensorflow`` 2.x and nothing else for Keras); from 2.16 ``tf.keras`` is Keras 3, in TensorFlow
  and in the 2.16 images alike (no ``tf-keras`` default, no ``TF_USE_LEGACY_KERAS``). Examples
  written for the older images call ``model.save(<directory>)`` for a SavedModel, which Keras 3
  refuses (``Invalid filepath extension for saving``), and run Keras ``fit()`` under
  ``MultiWorkerMirroredStrategy``, which Keras 3 on TensorFlow does not support. TensorFlow >= 2.16
  serves the ``tf-keras`` package (Keras 2) as ``tf.keras`` when ``TF_USE_LEGACY_KERAS=1``, so such
  a job gets that variable when ``tf-keras`` is installed. Without ``tf-keras`` nothing is set: the
  variable would make ``tf.keras`` fail to import at all.

``environment=`` wins over these values (as it wins over an image's ``ENV`` on SageMaker).
"""

from __future__ import annotations

import importlib.util
import re

from smlaunch import contract
from smlaunch.contract.framework_env import training_module_of_image

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
KERAS_3_SINCE = (2, 16)
"""The first TensorFlow version whose images (and ``tf.keras``) are Keras 3."""


def image_environment(image: str | None) -> dict[str, str]:
    """The variables that make a job of SageMaker framework image ``image`` see what that image
    provides (see the module docstring); empty for any other image."""
    version = tensorflow_image_version(image)
    if version is None or version >= KERAS_3_SINCE or not installed("tf_keras"):
        return {}
    return {LEGACY_KERAS_ENV: "1"}


def tensorflow_image_version(image: str | None) -> tuple[int, int] | None:
    """``(major, minor)`` of a SageMaker TensorFlow training image from its tag
    (``tensorflow-training:2.14.1-cpu-py310`` -> ``(2, 14)``), else None."""
    if not image or training_module_of_image(image) != contract.TENSORFLOW_TRAINING_MODULE:
        return None
    name = image.rsplit("/", 1)[-1].split("@", 1)[0]
    match = re.match(r"[^:]+:(\d+)\.(\d+)", name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def installed(module: str) -> bool:
    """Whether this interpreter (the one the hosts run) can import ``module``."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
