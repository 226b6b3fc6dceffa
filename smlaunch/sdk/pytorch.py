"""``PyTorch``: SageMaker SDK v2's ``sagemaker.pytorch.PyTorch`` estimator, on any backend.

A :class:`~smlaunch.sdk.estimator.Framework` whose image is the PyTorch Deep Learning Container
(:mod:`smlaunch.sdk.request.image_uris`), with the limits that image puts on the distribution. The
constructor,
``plan``/``fit`` and ``attach`` are :class:`~smlaunch.sdk.estimator.Estimator`'s.
"""

from __future__ import annotations

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.estimator import Framework
from smlaunch.sdk.request import image_uris


class PyTorch(Framework):
    """SageMaker SDK v2's ``sagemaker.pytorch.PyTorch``: script mode on the PyTorch DLC."""

    _framework = "pytorch"
    _display_name = "PyTorch"
    _metrics_since = (1, 3)
    _version_example = "framework_version='2.1.0', py_version='py310'"

    def _check_framework_distribution(self) -> None:
        """The DLC's own limits (SDK rules 17, 18, 20, 21): only when a DLC runs the job."""
        if self.is_local or self.image_uri is not None:
            return
        version, py = str(self.framework_version), str(self.py_version)
        if self.instance.is_neuron:
            raise ConfigurationError(
                "image_uri",
                None,
                f"{self.instance_type} runs the Neuron Deep Learning Containers, which smlaunch's "
                "PyTorch image table (CPU and GPU images) does not cover",
                "pass image_uri='763104351884.dkr.ecr.<region>.amazonaws.com/pytorch-training-neuronx:<tag>'",
            )
        dist = self.args.distribution
        if dist.smddp_enabled:
            if version not in image_uris.SMDDP_FRAMEWORK_VERSIONS:
                raise ConfigurationError(
                    "framework_version",
                    version,
                    "smdistributed.dataparallel is not in this PyTorch image",
                    f"use one of {', '.join(image_uris.SMDDP_FRAMEWORK_VERSIONS)}",
                )
        torch_on = dist.torch_distributed is not None and dist.torch_distributed.enabled
        if torch_on and version not in image_uris.TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS:
            raise ConfigurationError(
                "framework_version",
                version,
                f"torch_distributed is not supported by the PyTorch {version} image",
                f"use one of {', '.join(image_uris.TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS)}",
            )
        if (dist.smddp_enabled or torch_on) and "py3" not in py:
            raise ConfigurationError(
                "py_version", py, "distributed training needs Python 3", "pass a py3x py_version"
            )
        if torch_on and dist.modelparallel_enabled:
            raise ConfigurationError(
                "distribution",
                dist.to_dict(),
                "SMP v2 (torch_distributed + smdistributed.modelparallel) needs the "
                "smdistributed-modelparallel image, which smlaunch's image table does not cover",
                "pass image_uri='658645717510.dkr.ecr.<region>.amazonaws.com/"
                "smdistributed-modelparallel:<tag>'",
            )
