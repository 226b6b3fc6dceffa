"""``EstimatorArgs``: an estimator's checked constructor arguments, the one value request building reads.

The estimator checks every argument at construction (:mod:`.validation`, the session's
``config.yaml`` defaults, the distribution against the topology) and keeps the result here; its
SDK-compatible attributes (``est.instance_type``, ``est.output_path``...) read and replace this value.
:func:`smlaunch.sdk.request.build.build` is a function of it (and the session), as TorchX's
``AppDef`` -> request, and :mod:`.describe` is its inverse for ``attach``.

Frozen: a change (an attribute set after construction, ``set_hyperparameters``, a new
``distribution``) replaces the value (``dataclasses.replace``); the dicts and lists it holds are
never changed in place. Defaults are the constructor's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from smlaunch.sdk.request.catalog import InstanceType
from smlaunch.sdk.request.distribution import Distribution

if TYPE_CHECKING:
    from smlaunch.sdk.debugger import TensorBoardOutputConfig


@dataclass(frozen=True)
class EstimatorArgs:
    """The checked arguments of ``Estimator``/``PyTorch``/``TensorFlow``: SDK v2's names, after the
    session's defaults were applied (``role``, KMS keys, VPC, ``environment``, ``tags``...)."""

    instance: InstanceType
    """The catalog's entry for ``instance_type`` (topology, processor, Neuron)."""
    instance_type: str
    """The name sent as ``ResourceConfig.InstanceType`` (``instance.name`` as constructed)."""
    instance_count: int
    is_local: bool
    """Whether the session runs jobs on this machine (or Slurm): no SageMaker service checks."""
    framework: str | None = None
    """``pytorch``, ``tensorflow``, or None for the generic ``Estimator`` (any image)."""
    framework_version: str | None = None
    py_version: str | None = None
    model_dir: str | bool | None = False
    """TensorFlow's ``model_dir`` (None: its default; False: not passed, as for every other framework)."""
    role: str | None = None
    image_uri: str | None = None
    entry_point: str | None = None
    source_dir: str | None = None
    dependencies: list[str] = field(default_factory=list)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    """The user's hyperparameters, raw (:func:`smlaunch.sdk.request.build.hyperparameters_wire`
    encodes them as the SDK does)."""
    distribution: Distribution = field(default_factory=Distribution)
    output_path: str | None = None
    code_location: str | None = None
    base_job_name: str | None = None
    max_run: int = 24 * 60 * 60
    volume_size: int = 30
    volume_kms_key: str | None = None
    input_mode: str = "File"
    environment: dict[str, str] | None = None
    metric_definitions: list[dict[str, str]] | None = None
    tags: list[dict[str, str]] | None = None
    use_spot_instances: bool = False
    max_wait: int | None = None
    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str | None = None
    subnets: list[str] | None = None
    security_group_ids: list[str] | None = None
    enable_network_isolation: bool = False
    encrypt_inter_container_traffic: bool = False
    max_retry_attempts: int | None = None
    disable_output_compression: bool = False
    output_kms_key: str | None = None
    container_log_level: int = logging.INFO
    enable_sagemaker_metrics: bool | None = None
    disable_profiler: bool = False
    debugger_hook_config: bool | None = None
    tensorboard_output_config: TensorBoardOutputConfig | None = None
    keep_alive_period_in_seconds: int | None = None
