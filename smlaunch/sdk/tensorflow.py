"""``TensorFlow``: SageMaker SDK v2's ``sagemaker.tensorflow.TensorFlow``, on any backend.

The request equals what ``sagemaker.tensorflow.TensorFlow(...).fit(...)`` (SDK 2.257.x) sends for
the same arguments (``tests/unit/test_tensorflow_oracle.py``): the DLC image
(``tensorflow-training:<version>-<cpu|gpu>-<py>``), metrics time series from TensorFlow 1.15, the
distribution keys (``parameter_server``, ``multi_worker_mirrored_strategy``, ``mpi``,
``smdistributed``) and ``model_dir``, passed to the script as ``--model_dir``:

- not given: ``/opt/ml/model`` with ``mpi``, else ``<output_path>/<job name>/model``;
- ``model_dir=False``: not passed;
- a string: passed as given.

What runs where: ``multi_worker_mirrored_strategy`` and ``parameter_server`` get the ``TF_CONFIG``
SageMaker's TensorFlow toolkit writes (see :mod:`smlaunch.runtime.frameworks.tf_config`; parameter servers
are started
by :mod:`smlaunch.runtime.frameworks.tf_ps`); ``mpi`` runs ranks under
``mpirun``, where ``horovod.tensorflow`` needs the real Horovod: locally a script importing it is
refused at ``fit()``, naming the image that has it.

Deliberate differences from the SDK:

| topic                               | SDK v2                       | smlaunch                           |
|-------------------------------------|------------------------------|------------------------------------|
| default ``model_dir`` of a 2nd fit  | the 1st job's (kept)         | this job's                         |
| MWMS below TensorFlow 2.9           | refused at ``fit()``         | refused at construction            |
| ``torch_distributed``/``pytorchddp``| ignored                      | refused                            |
| ``compiler_config``                 | Training Compiler            | not supported                      |
| Horovod TF script, local backend    | runs in local Docker mode    | refused at ``fit()`` (no Horovod)  |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smlaunch.sdk import keywords
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.estimator import Framework, _Arg
from smlaunch.sdk.request.image_uris import version_tuple

_HOROVOD_TF = re.compile(r"^\s*(?:import|from)\s+horovod\.(?:tensorflow|keras)\b", re.MULTILINE)
MWMS_MIN_VERSION = (2, 9, 0)


def _padded(version: Any) -> tuple[int, ...]:
    """``"1.10"`` -> ``(1, 10, 0)``: comparable with three-part versions, as ``packaging`` compares."""
    return (*version_tuple(str(version)), 0, 0, 0)[:3]


class TensorFlow(Framework):
    """SageMaker SDK v2's ``sagemaker.tensorflow.TensorFlow``: script mode on the TensorFlow DLC.

    ``model_dir``: where the script should export checkpoints and models (``--model_dir``; see the
    module docstring for the default); ``False`` leaves the argument out.
    """

    _framework = "tensorflow"
    _display_name = "TensorFlow"
    _metrics_since = (1, 15)
    _version_example = "framework_version='2.16', py_version='py310'"

    model_dir: _Arg[str | bool | None] = _Arg()

    @keywords.sdk_keywords(keywords.TENSORFLOW_RENAMED, keywords.TENSORFLOW_REMOVED)
    def __init__(
        self,
        py_version: str | None = None,
        framework_version: str | None = None,
        model_dir: str | bool | None = None,
        image_uri: str | None = None,
        distribution: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """SDK v2's arguments, in its order (``entry_point``, ``source_dir``, ``hyperparameters`` and
        the rest as keywords, as :class:`~smlaunch.sdk.estimator.Framework` takes them)."""
        if "compiler_config" in kwargs:
            raise ConfigurationError(
                "compiler_config",
                kwargs["compiler_config"],
                "SageMaker Training Compiler is not supported by smlaunch",
                "leave compiler_config out",
            )
        if model_dir is not None and model_dir is not False and not isinstance(model_dir, str):
            raise ConfigurationError(
                "model_dir",
                model_dir,
                "must be a path or URI string, or False",
                "pass e.g. 's3://my-bucket/models', or False to leave it out",
            )
        version = _padded(framework_version) if framework_version is not None else None
        if py_version == "py2" and version is not None and version > (2, 1, 1):
            raise ConfigurationError(
                "py_version",
                py_version,
                "Python 2 images exist up to TensorFlow 2.1.1 only",
                "pass a Python 3 py_version such as 'py310'",
            )
        if image_uri is None and version is not None and version <= (1, 10, 0):
            raise ConfigurationError(
                "framework_version",
                framework_version,
                "TensorFlow 1.10 and older support only legacy mode, not script mode",
                "use TensorFlow 1.11 or newer",
            )
        super().__init__(
            framework_version=framework_version,
            py_version=py_version,
            image_uri=image_uri,
            distribution=distribution,
            **kwargs,
        )
        self.model_dir = model_dir  # read by the request only (never by the checks above)

    def _check_framework_distribution(self) -> None:
        dist = self.args.distribution
        mwms = dist.multi_worker_mirrored_strategy
        if mwms is not None and mwms.enabled and self.framework_version is not None:
            if _padded(self.framework_version) < MWMS_MIN_VERSION:
                raise ConfigurationError(
                    "framework_version",
                    self.framework_version,
                    "multi_worker_mirrored_strategy needs TensorFlow 2.9 or newer",
                    "use framework_version='2.9' or newer",
                )

    def fit(
        self,
        inputs: Any = None,
        wait: bool = True,
        logs: bool | str = True,
        job_name: str | None = None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> None:
        """As :meth:`Estimator.fit`; on this machine (no Horovod) a Horovod-for-TensorFlow script
        is refused before anything is staged."""
        self._refuse_local_horovod_tensorflow()
        super().fit(inputs, wait=wait, logs=logs, job_name=job_name, experiment_config=experiment_config)

    def _refuse_local_horovod_tensorflow(self) -> None:
        if not self.is_local or self.image_uri is not None or self.entry_point is None:
            return
        if self.source_dir is not None and "://" in self.source_dir:
            return
        script = Path(self.source_dir) / self.entry_point if self.source_dir else Path(self.entry_point)
        try:
            text = script.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        if _HOROVOD_TF.search(text):
            raise ConfigurationError(
                "entry_point",
                self.entry_point,
                "imports horovod.tensorflow / horovod.keras: Horovod for TensorFlow needs the real "
                "Horovod, in a container image that has it",
                "run it on SageMaker (the TensorFlow training images have Horovod) or pass image_uri= an "
                "image with Horovod; on this machine use distribution="
                "{'multi_worker_mirrored_strategy': {'enabled': True}}",
            )
