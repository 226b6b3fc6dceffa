"""The ``distribution`` argument as typed data: parsed, checked, and turned into wire keys.

Owns: the pydantic models of every strategy smlaunch runs (``smdistributed.dataparallel``,
``smdistributed.modelparallel`` + ``mpi``, ``mpi``, ``torch_distributed``, ``pytorchddp``), the
rules that make a combination impossible, and :meth:`Distribution.to_hyperparameters`, which gives
the keys SageMaker SDK v2 adds to ``HyperParameters`` (same names, values and order as
``PyTorch._pytorch_distribution_configuration`` / ``Framework._distribution_configuration``).
It does no I/O except loading a model-parallel config file the user names by path. One concept
(the ``distribution`` argument), kept in one module past 500 lines so every strategy's rules and
wire keys are read side by side.

Unknown keys are rejected at every level (``extra="forbid"``) with the key named and the nearest
valid key suggested; types are strict (``"yes"`` is not a bool). ``modelparallel.parameters`` is
an open dict (SMP has dozens of options) checked with the SDK's ``validate_mp_config`` rules.

Deliberate differences from the SDK (2.257.x):

| topic                              | SDK v2                  | smlaunch                                  |
|------------------------------------|-------------------------|-------------------------------------------|
| ``pytorchddp``                     | rewritten to smddp      | ``sagemaker_pytorch_ddp_enabled`` (D. §4) |
| unknown keys, typos                | ignored                 | rejected, nearest key suggested           |
| ``processes_per_host`` > GPUs      | not checked             | rejected on GPU types                     |
| smddp without GPUs                 | not checked             | rejected                                  |
| mp partitions not dividing ranks   | not checked             | rejected (x ``tensor_parallel_degree``)   |
| ``validate_mp_config``             | at ``fit()``            | at construction                           |
| mpi + torch_distributed / smddp    | one silently wins       | rejected                                  |
| torch_distributed + pytorchddp     | one silently wins       | rejected                                  |
| modelparallel without mpi/torch    | one process runs        | rejected                                  |
| torch_distributed on CPU types     | rejected                | rejected on SageMaker, allowed locally    |
| smddp/smp on ``ml.p5.48xlarge``    | rejected at fit (#4988) | allowed                                   |
| parameter_server, MWMS (PyTorch)   | TF strategies, ignored  | rejected (``TensorFlow`` accepts them)    |
| torch_distributed (TensorFlow)     | ignored                 | rejected                                  |
| MWMS / PS + mpi                    | one silently wins       | rejected                                  |
| pytorchxla                         | XLA strategy            | rejected: not supported                   |
| ``instance_groups``                | heterogeneous clusters  | rejected: not supported                   |
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from smlaunch import contract
from smlaunch.contract.hyperparameters import truthy
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.catalog import InstanceType

_FIELD = "distribution"
_UNSUPPORTED = {
    "pytorchxla": "PyTorch/XLA needs SageMaker Training Compiler",
    "instance_groups": "heterogeneous clusters (instance groups) are not supported yet",
}
_FRAMEWORK_ONLY = {
    "pytorch": {
        "parameter_server": "parameter servers are a TensorFlow strategy",
        "multi_worker_mirrored_strategy": "MultiWorkerMirroredStrategy is TensorFlow only",
    },
    "tensorflow": {
        "torch_distributed": "torch_distributed launches PyTorch ranks",
        "pytorchddp": "pytorchddp launches PyTorch ranks",
    },
}
_PER_ACCELERATOR = frozenset(
    {Strategy.TORCH_DISTRIBUTED, Strategy.PYTORCHDDP, Strategy.SMDDP, Strategy.MODELPARALLEL}
)
"""Strategies that start one rank per GPU (or Trainium core) by default."""
_ONE_PER_HOST = frozenset({Strategy.NONE, Strategy.PARAMETER_SERVER, Strategy.MULTI_WORKER_MIRRORED_STRATEGY})
"""Strategies that start one process per host."""
_STRATEGIES = {
    "pytorch": "torch_distributed, pytorchddp, smdistributed or mpi",
    "tensorflow": "multi_worker_mirrored_strategy, parameter_server, mpi or smdistributed",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Enabled(_Strict):
    """``{"enabled": bool}``: ``torch_distributed`` and ``pytorchddp``."""

    enabled: bool = False


class MpiOptions(_Strict):
    enabled: bool = False
    processes_per_host: int | None = Field(default=None, ge=1)
    custom_mpi_options: str = ""


class DataParallelOptions(_Strict):
    enabled: bool = False
    custom_mpi_options: str = ""


class ModelParallelOptions(_Strict):
    enabled: bool = False
    parameters: dict[str, Any] | str = Field(default_factory=dict)
    """The SMP config dict, or the path of a JSON file holding it (as the SDK accepts)."""


class SmDistributedOptions(_Strict):
    dataparallel: DataParallelOptions | None = None
    modelparallel: ModelParallelOptions | None = None


class Distribution(_Strict):
    """One job's distribution. Build with :meth:`parse`; check against a topology with :meth:`check`."""

    smdistributed: SmDistributedOptions | None = None
    mpi: MpiOptions | None = None
    torch_distributed: Enabled | None = None
    pytorchddp: Enabled | None = None
    parameter_server: Enabled | None = None
    multi_worker_mirrored_strategy: Enabled | None = None

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, framework: str | None = None) -> Distribution:
        """Parse the user's dict; every problem is a :class:`ConfigurationError` naming the key.
        ``framework`` (``pytorch``, ``tensorflow``; None: any) decides which strategies exist."""
        if value is None:
            return cls()
        if isinstance(value, Distribution):
            return value
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                _FIELD, value, "must be a dict", "pass e.g. {'torch_distributed': {'enabled': True}}"
            )
        for key, why in {**_UNSUPPORTED, **_FRAMEWORK_ONLY.get(framework or "", {})}.items():
            if key in value:
                raise ConfigurationError(
                    f"{_FIELD}.{key}",
                    value[key],
                    f"not supported by smlaunch ({why})",
                    f"use {_STRATEGIES.get(framework or '', 'another strategy')}",
                )
        try:
            parsed = cls.model_validate(dict(value))
        except ValidationError as exc:
            raise _as_configuration_error(exc, value) from None
        parsed._check_structure()
        return parsed

    def _check_structure(self) -> None:
        """Combinations that are impossible whatever the instance type."""
        sm = self.smdistributed
        if self.pytorchddp is not None and sm is not None:
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                "pytorchddp and smdistributed cannot be used together",
                "keep one of them",
            )
        if self.pytorchddp is not None and self.torch_distributed is not None:
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                "pytorchddp and torch_distributed both launch torchrun-style DDP",
                "keep one of them (torch_distributed is the current name)",
            )
        if sm is not None and sm.dataparallel is not None and sm.modelparallel is not None:
            raise ConfigurationError(
                f"{_FIELD}.smdistributed",
                sm.model_dump(exclude_none=True),
                "cannot use more than one smdistributed strategy",
                "keep either 'dataparallel' or 'modelparallel'",
            )
        mpi_on = self.mpi is not None and self.mpi.enabled
        torch_on = self.torch_distributed is not None and self.torch_distributed.enabled
        ddp_on = self.pytorchddp is not None and self.pytorchddp.enabled
        if mpi_on and (torch_on or ddp_on):
            other = "torch_distributed" if torch_on else "pytorchddp"
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                f"mpi and {other} are two launchers and cannot coexist",
                f"drop 'mpi' to run torchrun-style DDP, or drop '{other}' to run under mpirun",
            )
        if mpi_on and self.smddp_enabled:
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                "smdistributed.dataparallel starts its own MPI processes and cannot coexist with mpi",
                "drop 'mpi'",
            )
        ps_on = self.parameter_server is not None and self.parameter_server.enabled
        mwms = self.multi_worker_mirrored_strategy
        mwms_on = mwms is not None and mwms.enabled
        if mwms_on and (sm is not None or self.parameter_server is not None):
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                "multi_worker_mirrored_strategy cannot be combined with "
                "smdistributed or parameter_server (as SageMaker's SDK)",
                "keep one strategy",
            )
        if (ps_on or mwms_on) and mpi_on:
            other = "parameter_server" if ps_on else "multi_worker_mirrored_strategy"
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                f"mpi and {other} are two launchers and cannot coexist",
                f"drop 'mpi' to run {other}, or drop '{other}' to run under mpirun (Horovod)",
            )
        if ps_on and sm is not None:
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                "parameter_server and smdistributed cannot be used together",
                "keep one of them",
            )
        if self.modelparallel_enabled:
            if not (mpi_on or torch_on):
                raise ConfigurationError(
                    f"{_FIELD}.mpi",
                    None,
                    "smdistributed.modelparallel needs MPI to start its ranks",
                    "add 'mpi': {'enabled': True, 'processes_per_host': <GPUs per instance>}",
                )
            _validate_mp_parameters(self.mp_parameters)

    # --- queries -------------------------------------------------------------------------------

    @property
    def smddp_enabled(self) -> bool:
        sm = self.smdistributed
        return bool(sm and sm.dataparallel and sm.dataparallel.enabled)

    @property
    def modelparallel_enabled(self) -> bool:
        sm = self.smdistributed
        return bool(sm and sm.modelparallel and sm.modelparallel.enabled)

    @property
    def mp_parameters(self) -> dict[str, Any]:
        """The model-parallel config dict (loaded from its file when given as a path)."""
        sm = self.smdistributed
        if not (sm and sm.modelparallel):
            return {}
        return _load_mp_parameters(sm.modelparallel.parameters)

    @property
    def strategy(self) -> Strategy:
        """The strategy this distribution selects (what ``Capabilities.distributions`` lists)."""
        if self.modelparallel_enabled:
            return Strategy.MODELPARALLEL
        if self.mpi is not None and self.mpi.enabled:
            return Strategy.MPI
        if self.pytorchddp is not None and self.pytorchddp.enabled:
            return Strategy.PYTORCHDDP
        if self.torch_distributed is not None and self.torch_distributed.enabled:
            return Strategy.TORCH_DISTRIBUTED
        if self.smddp_enabled:
            return Strategy.SMDDP
        if self.parameter_server is not None and self.parameter_server.enabled:
            return Strategy.PARAMETER_SERVER
        if self.multi_worker_mirrored_strategy is not None and self.multi_worker_mirrored_strategy.enabled:
            return Strategy.MULTI_WORKER_MIRRORED_STRATEGY
        return Strategy.NONE

    def processes_per_host(self, instance: InstanceType, emulated: int | None = None) -> int | None:
        """Ranks per host, when fixed by the distribution or the instance type (else ``None``).

        ``emulated``: ``LocalSession(processes_per_host=N)``, which replaces the GPU count for the
        per-GPU launchers (not an explicit ``mpi.processes_per_host``), as the local hosts do."""
        if self.mpi is not None and self.mpi.enabled and self.mpi.processes_per_host:
            return self.mpi.processes_per_host
        if self.strategy in _PER_ACCELERATOR:
            if emulated is not None:
                return emulated
            return instance.accelerator_ranks
        if self.strategy in _ONE_PER_HOST:
            return 1
        return None

    def to_dict(self) -> dict[str, Any]:
        """The user-facing dict (what ``distribution=`` would be), unset parts left out."""
        return self.model_dump(exclude_none=True)

    # --- topology checks -----------------------------------------------------------------------

    def check(
        self,
        instance: InstanceType,
        instance_count: int,
        *,
        local: bool,
        emulated_processes_per_host: int | None = None,
    ) -> None:
        """Rules that depend on the instance type and count. ``local``: the job runs on this
        machine (emulated), where torchrun-style DDP on CPU types works with gloo;
        ``emulated_processes_per_host``: the ranks per host a ``LocalSession`` sets instead of the
        GPU count (model-parallel partitions must divide the processes that really run)."""
        if self.mpi is not None and self.mpi.processes_per_host and instance.gpus:
            if self.mpi.processes_per_host > instance.gpus:
                raise ConfigurationError(
                    f"{_FIELD}.mpi.processes_per_host",
                    self.mpi.processes_per_host,
                    f"{instance.name} has {instance.gpus} GPU(s); one process per GPU at most",
                    f"use processes_per_host <= {instance.gpus}",
                )
        if instance.is_neuron and self.strategy not in (Strategy.NONE, Strategy.TORCH_DISTRIBUTED):
            # fw_utils.validate_distribution_for_instance_type: Trainium runs torch_distributed only.
            raise ConfigurationError(
                _FIELD,
                self.to_dict(),
                f"{instance.name} is a Trainium type: it runs torch_distributed only",
                "pass distribution={'torch_distributed': {'enabled': True}}",
            )
        if self.smddp_enabled and instance.accelerator in ("none", "neuron"):
            raise ConfigurationError(
                f"{_FIELD}.smdistributed.dataparallel",
                {"enabled": True},
                f"smdistributed.dataparallel needs GPUs and {instance.name} has none",
                "use a GPU type such as ml.p4d.24xlarge or ml.p3.16xlarge, or torch_distributed",
            )
        for name in ("torch_distributed", "pytorchddp"):
            option = getattr(self, name)
            if option is not None and option.enabled and instance.accelerator == "none" and not local:
                raise ConfigurationError(
                    f"{_FIELD}.{name}",
                    {"enabled": True},
                    f"{name} on SageMaker is supported only for GPU instance types (and Trainium), "
                    f"not {instance.name}",
                    "use a GPU type (ml.p*, ml.g*) or a Trainium type (ml.trn*), or run it locally "
                    "with LocalSession",
                )
        if self.modelparallel_enabled:
            params = self.mp_parameters
            emulated = emulated_processes_per_host if local else None
            ppn = self.processes_per_host(instance, emulated)
            if ppn is not None:
                processes = ppn * instance_count
                pipeline = params.get("pipeline_parallel_degree", params.get("partitions", 1))
                tensor = params.get("tensor_parallel_degree", 1)
                degree = pipeline * tensor if isinstance(pipeline, int) and isinstance(tensor, int) else 1
                if degree > 0 and processes % degree:
                    raise ConfigurationError(
                        f"{_FIELD}.smdistributed.modelparallel.parameters.partitions",
                        pipeline,
                        f"{degree} model partitions (pipeline x tensor degree) do not divide the "
                        f"{processes} processes ({ppn} per host x {instance_count} hosts)",
                        "choose partitions that divide processes_per_host * instance_count"
                        + (
                            f" (LocalSession(processes_per_host={ppn}) sets {ppn} per host here)"
                            if emulated is not None and ppn != self.processes_per_host(instance)
                            else ""
                        ),
                    )

    # --- wire -----------------------------------------------------------------------------------

    def to_hyperparameters(self, instance_type: str) -> dict[str, Any]:
        """The distribution keys SDK v2 adds, raw (not yet JSON-encoded), in the SDK's order."""
        if self.pytorchddp is not None:
            if self.pytorchddp.enabled:
                return {contract.HP_PYTORCH_DDP_ENABLED: True, contract.HP_INSTANCE_TYPE: instance_type}
            return self._generic(instance_type)
        if self.torch_distributed is not None and self.torch_distributed.enabled:
            config = self._generic(instance_type) if self.smdistributed is not None else {}
            config[contract.HP_TORCH_DISTRIBUTED_ENABLED] = True
            config[contract.HP_INSTANCE_TYPE] = instance_type
            return config
        return self._generic(instance_type)

    def _generic(self, instance_type: str) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if self.parameter_server is not None:
            config[contract.HP_PARAMETER_SERVER_ENABLED] = self.parameter_server.enabled
        if self.mpi is not None:
            config[contract.HP_MPI_ENABLED] = self.mpi.enabled
            if self.mpi.processes_per_host:
                config[contract.HP_MPI_PROCESSES_PER_HOST] = self.mpi.processes_per_host
            config[contract.HP_MPI_CUSTOM_OPTIONS] = self.mpi.custom_mpi_options
        if self.smdistributed is not None:
            if self.modelparallel_enabled and self.mp_parameters:
                config[contract.HP_MP_PARAMETERS] = self.mp_parameters
            config[contract.HP_SMDDP_ENABLED] = self.smddp_enabled
            config[contract.HP_INSTANCE_TYPE] = instance_type
            if self.smddp_enabled:
                dataparallel = self.smdistributed.dataparallel
                assert dataparallel is not None
                config[contract.HP_SMDDP_CUSTOM_MPI_OPTIONS] = dataparallel.custom_mpi_options
        if self.multi_worker_mirrored_strategy is not None:
            config[contract.HP_MWMS_ENABLED] = self.multi_worker_mirrored_strategy.enabled
        return config

    @classmethod
    def from_hyperparameters(cls, hyperparameters: Mapping[str, Any]) -> Distribution:
        """Rebuild the distribution from decoded hyperparameters (``attach``; the SDK loses it). Flags
        read as the runtime reads them (``"True"``, as the generic ``Estimator`` sends ``True``, is on;
        ``"False"`` is off)."""
        hps = hyperparameters
        result: dict[str, Any] = {}
        if contract.HP_PYTORCH_DDP_ENABLED in hps:
            result["pytorchddp"] = {"enabled": truthy(hps[contract.HP_PYTORCH_DDP_ENABLED])}
        if contract.HP_TORCH_DISTRIBUTED_ENABLED in hps:
            result["torch_distributed"] = {"enabled": truthy(hps[contract.HP_TORCH_DISTRIBUTED_ENABLED])}
        if contract.HP_PARAMETER_SERVER_ENABLED in hps:
            result["parameter_server"] = {"enabled": truthy(hps[contract.HP_PARAMETER_SERVER_ENABLED])}
        if contract.HP_MWMS_ENABLED in hps:
            result["multi_worker_mirrored_strategy"] = {"enabled": truthy(hps[contract.HP_MWMS_ENABLED])}
        if contract.HP_MPI_ENABLED in hps:
            mpi: dict[str, Any] = {"enabled": truthy(hps[contract.HP_MPI_ENABLED])}
            if hps.get(contract.HP_MPI_PROCESSES_PER_HOST):
                mpi["processes_per_host"] = int(hps[contract.HP_MPI_PROCESSES_PER_HOST])
            if hps.get(contract.HP_MPI_CUSTOM_OPTIONS):
                mpi["custom_mpi_options"] = str(hps[contract.HP_MPI_CUSTOM_OPTIONS])
            result["mpi"] = mpi
        if contract.HP_SMDDP_ENABLED in hps:
            if contract.HP_MP_PARAMETERS in hps:
                result["smdistributed"] = {
                    "modelparallel": {"enabled": True, "parameters": dict(hps[contract.HP_MP_PARAMETERS])}
                }
            else:
                dataparallel: dict[str, Any] = {"enabled": truthy(hps[contract.HP_SMDDP_ENABLED])}
                if hps.get(contract.HP_SMDDP_CUSTOM_MPI_OPTIONS):
                    dataparallel["custom_mpi_options"] = str(hps[contract.HP_SMDDP_CUSTOM_MPI_OPTIONS])
                result["smdistributed"] = {"dataparallel": dataparallel}
        return cls.model_validate(result)


DISTRIBUTION_KEYS = frozenset(
    {
        contract.HP_PYTORCH_DDP_ENABLED,
        contract.HP_TORCH_DISTRIBUTED_ENABLED,
        contract.HP_MPI_ENABLED,
        contract.HP_MPI_PROCESSES_PER_HOST,
        contract.HP_MPI_CUSTOM_OPTIONS,
        contract.HP_MP_PARAMETERS,
        contract.HP_SMDDP_ENABLED,
        contract.HP_SMDDP_CUSTOM_MPI_OPTIONS,
        contract.HP_INSTANCE_TYPE,
        contract.HP_PARAMETER_SERVER_ENABLED,
        contract.HP_MWMS_ENABLED,
    }
)
"""Hyperparameter keys that belong to the distribution (removed from user hps by ``attach``)."""


# --- helpers ------------------------------------------------------------------------------------

_VALID_KEYS: dict[tuple[str, ...], list[str]] = {
    (): list(Distribution.model_fields),
    ("smdistributed",): list(SmDistributedOptions.model_fields),
    ("smdistributed", "dataparallel"): list(DataParallelOptions.model_fields),
    ("smdistributed", "modelparallel"): list(ModelParallelOptions.model_fields),
    ("mpi",): list(MpiOptions.model_fields),
    ("torch_distributed",): list(Enabled.model_fields),
    ("pytorchddp",): list(Enabled.model_fields),
    ("parameter_server",): list(Enabled.model_fields),
    ("multi_worker_mirrored_strategy",): list(Enabled.model_fields),
}

_EXAMPLES = {
    "bool_type": "pass True or False",
    "int_type": "pass an integer",
    "string_type": "pass a string",
    "greater_than_equal": "pass an integer >= 1",
    "model_type": "pass a dict such as {'enabled': True}",
    "dict_type": "pass a dict",
}


def _as_configuration_error(exc: ValidationError, value: Any) -> ConfigurationError:
    error = exc.errors()[0]
    loc = tuple(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    # Union members add their type name to the location; drop those segments.
    loc = tuple(part for part in loc if part not in ("dict[str,any]", "str"))
    field = ".".join((_FIELD, *loc))
    if error["type"] == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        valid = _VALID_KEYS.get(parent, [])
        near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        fix = f"did you mean {near[0]!r}? " if near else ""
        return ConfigurationError(
            field, error["input"], "unknown key", f"{fix}valid keys here: {', '.join(valid)}"
        )
    fix = _EXAMPLES.get(error["type"], "see the SageMaker distribution documentation")
    return ConfigurationError(field, error.get("input"), error["msg"].lower(), fix)


def _load_mp_parameters(parameters: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(parameters, dict):
        return parameters
    field = f"{_FIELD}.smdistributed.modelparallel.parameters"
    path = Path(parameters)
    if not path.is_file():
        raise ConfigurationError(
            field,
            parameters,
            "no such model-parallel config file",
            "pass a dict of SMP parameters or the path of an existing JSON file",
        )
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            field, parameters, f"cannot parse as JSON ({exc})", "fix the file's JSON"
        ) from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(field, parameters, "the file must hold a JSON object", "fix the file")
    return loaded


def _validate_mp_parameters(config: dict[str, Any]) -> None:
    """SDK v2's ``fw_utils.validate_mp_config``, raised as :class:`ConfigurationError`."""
    base = f"{_FIELD}.smdistributed.modelparallel.parameters"

    def fail(key: str, problem: str, fix: str) -> None:
        raise ConfigurationError(f"{base}.{key}", config.get(key), problem, fix)

    for key, values in (
        ("pipeline", ["simple", "interleaved", "_only_forward"]),
        ("placement_strategy", ["spread", "cluster"]),
        ("optimize", ["speed", "memory"]),
    ):
        if key in config and config[key] not in values:
            fail(key, f"must be one of {values}", f"use one of {values}")
    for key in (
        "microbatches",
        "partitions",
        "active_microbatches",
        "pipeline_parallel_degree",
        "tensor_parallel_degree",
    ):
        if key in config and (
            not isinstance(config[key], int) or isinstance(config[key], bool) or config[key] < 1
        ):
            fail(key, "must be a positive integer", "pass an integer >= 1")
    for key in ("auto_partition", "contiguous", "load_partition", "horovod", "ddp", "deterministic_server"):
        if key in config and config[key] not in (True, False):
            fail(key, "must be True or False", "pass a bool")
    if "partition_file" in config and not isinstance(config["partition_file"], str):
        fail("partition_file", "must be a str", "pass a path string")
    if "default_partition" in config and (
        not isinstance(config["default_partition"], int)
        or isinstance(config["default_partition"], bool)
        or config["default_partition"] < 0
    ):
        fail("default_partition", "must be a partition index (an integer >= 0)", "pass e.g. 0")
    if "memory_weight" in config and (
        not isinstance(config["memory_weight"], (int, float)) or isinstance(config["memory_weight"], bool)
    ):
        fail("memory_weight", "must be a number between 0.0 and 1.0", "pass a fraction, e.g. 0.8")
    if "ddp_dist_backend" in config and not isinstance(config["ddp_dist_backend"], str):
        fail("ddp_dist_backend", "must be a string", "pass 'auto', 'nccl' or 'gloo'")
    if config.get("auto_partition") is False and "default_partition" not in config:
        fail(
            "default_partition",
            "must be supplied if auto_partition is False",
            "add 'default_partition': 0 or set auto_partition True",
        )
    if "default_partition" in config and config["default_partition"] >= config.get("partitions", 1):
        fail(
            "default_partition",
            "must be less than the number of partitions",
            "use a partition index below 'partitions'",
        )
    if "memory_weight" in config and not 0.0 <= config["memory_weight"] <= 1.0:
        fail("memory_weight", "must be between 0.0 and 1.0", "pass a fraction")
    for key in ("ddp_port", "ddp_dist_backend"):
        if key in config and "ddp" not in config:
            fail(key, "needs 'ddp' to be set as well", "add 'ddp': True")
    if "ddp_port" in config and (not isinstance(config["ddp_port"], int) or config["ddp_port"] < 0):
        fail("ddp_port", "invalid port number", "pass a port number")
    if config.get("horovod", False) and config.get("ddp", False):
        fail("ddp", "'ddp' and 'horovod' cannot be simultaneously enabled", "keep one of them")
