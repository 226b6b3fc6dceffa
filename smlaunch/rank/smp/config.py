"""The smp v1 configuration: schema, defaults, merge order and validation.

This module owns what ``smp.init(config)`` accepts. It is pure (no torch, no processes), so every
rule is unit-testable. Semantics follow the SageMaker model-parallel v1 documentation
(``smd_model_parallel_general.rst``; summarised in ``docs/smp.md``):

* the user's dict is merged with ``SM_HP_MP_PARAMETERS`` and **the environment wins**;
* ``partitions`` is an alias of ``pipeline_parallel_degree`` (conflicting values are an error);
* unknown keys raise ``Unrecognized config parameter``;
* world size must be a multiple of ``pp * tp`` and hybrid data parallelism requires ``ddp: True``.

Parameters whose semantics this engine cannot honour (tensor parallelism, Horovod, fp16/bf16 apex
semantics, sharded data parallelism, optimizer-state sharding, activation offloading, delayed
parameter initialisation) raise :class:`SMPUnsupportedError` naming the parameter and the
alternative, at ``init`` time, before any process group work starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MP_PARAMETERS_ENV = "SM_HP_MP_PARAMETERS"
MANUAL_INIT_ENV = "SMP_MANUAL_INIT"
# smlaunch extension (kept out of the strict key schema): Megatron-style virtual stages per rank
# for ``pipeline: interleaved``. 1 (the default) is smp's own behaviour.
VIRTUAL_STAGES_ENV = "SMP_TORCH_VIRTUAL_STAGES"

PLACEMENT_LETTERS = "DPT"
PLACEMENT_ALIASES = {"cluster": "DPT", "spread": "TPD"}


class SMPValidationError(ValueError):
    """A configuration or argument smp rejects (smp raises its own validation errors here)."""


class SMPUnsupportedAPIError(SMPValidationError):
    """A name of smp v1's API whose semantics this engine does not implement; says what to use."""

    def __init__(self, name: str, alternative: str) -> None:
        self.name = name
        self.alternative = alternative
        super().__init__(
            f"{name} is not supported by smlaunch's smdistributed.modelparallel "
            f"(torch.distributed.pipelining engine, no tensor parallelism). Alternative: {alternative}"
        )


class SMPUnsupportedError(SMPValidationError):
    """A valid smp parameter whose semantics this engine does not implement."""

    def __init__(self, parameter: str, value: Any, alternative: str) -> None:
        self.parameter = parameter
        self.value = value
        self.alternative = alternative
        super().__init__(
            f"{parameter}={value!r} is not supported by smlaunch's smdistributed.modelparallel "
            f"(torch.distributed.pipelining engine). Alternative: {alternative}"
        )


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, int | float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class _Key:
    check: Callable[[Any], bool]
    expected: str
    default: Any


def _choice(*values: Any) -> Callable[[Any], bool]:
    return lambda v: v in values


def _placement(v: Any) -> bool:
    return isinstance(v, str) and (
        v in PLACEMENT_ALIASES or (len(v) == 3 and sorted(v) == sorted(PLACEMENT_LETTERS))
    )


def _int_at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: _is_int(v) and v >= n


_OPTIONAL_INT = lambda v: v is None or _is_int(v)  # noqa: E731

# Every key smp v1 (1.15, config.yaml of 1.12) accepts, with its default. Internal keys are
# accepted because real scripts and smp's own tests pass them.
SCHEMA: dict[str, _Key] = {
    "pipeline_parallel_degree": _Key(_int_at_least(1), "an integer >= 1", 1),
    "microbatches": _Key(_int_at_least(1), "an integer >= 1", 1),
    "pipeline": _Key(
        _choice("interleaved", "simple", "_only_forward"), "'interleaved' or 'simple'", "interleaved"
    ),
    "placement_strategy": _Key(
        _placement, "'cluster', 'spread' or a permutation of 'D', 'P', 'T'", "cluster"
    ),
    "optimize": _Key(_choice("speed", "memory"), "'speed' or 'memory'", "speed"),
    "auto_partition": _Key(_is_bool, "a boolean", True),
    "default_partition": _Key(_OPTIONAL_INT, "an integer", None),
    "memory_weight": _Key(lambda v: _is_number(v) and 0.0 <= v <= 1.0, "a number in [0, 1]", 0.8),
    "ddp": _Key(_is_bool, "a boolean", False),
    "ddp_port": _Key(_OPTIONAL_INT, "an integer", None),
    "ddp_dist_backend": _Key(_choice("nccl", "auto", "gloo"), "'nccl', 'auto' or 'gloo'", "auto"),
    "horovod": _Key(_is_bool, "a boolean", False),
    "active_microbatches": _Key(_OPTIONAL_INT, "an integer", None),
    "deterministic_server": _Key(_is_bool, "a boolean", False),
    "contiguous": _Key(_is_bool, "a boolean", True),
    "offload_activations": _Key(_is_bool, "a boolean", False),
    "activation_loading_horizon": _Key(_int_at_least(1), "an integer >= 1", 4),
    "tensor_parallel_degree": _Key(_int_at_least(1), "an integer >= 1", 1),
    "fp16": _Key(_is_bool, "a boolean", False),
    "bf16": _Key(_is_bool, "a boolean", False),
    "fp16_params": _Key(_is_bool, "a boolean", False),
    "shard_optimizer_state": _Key(_is_bool, "a boolean", False),
    "prescaled_batch": _Key(_is_bool, "a boolean", False),
    "skip_tracing": _Key(_is_bool, "a boolean", False),
    "delayed_parameter_initialization": _Key(_is_bool, "a boolean", False),
    "tensor_parallel_seed": _Key(_is_int, "an integer", 0),
    "sharded_data_parallel_degree": _Key(_int_at_least(1), "an integer >= 1", 1),
    "sdp_reduce_bucket_size": _Key(_is_number, "a number", int(5e8)),
    "sdp_param_persistence_threshold": _Key(_is_number, "a number", int(1e6)),
    "sdp_max_live_parameters": _Key(_is_number, "a number", int(1e9)),
    "sdp_hierarchical_allgather": _Key(_is_bool, "a boolean", True),
    "sdp_gradient_clipping": _Key(_is_number, "a number", 1.0),
    # internal keys of smp 1.12 (accepted, no effect here)
    "fast_mode": _Key(_is_bool, "a boolean", False),
    "static_mode": _Key(_is_bool, "a boolean", False),
    "load_partition": _Key(_is_bool, "a boolean", False),
    "partition_file": _Key(lambda v: v is None or isinstance(v, str), "a path", None),
    "herring": _Key(_is_bool, "a boolean", False),
    "checkpoint_attentions": _Key(_is_bool, "a boolean", False),
    "_match_weights": _Key(_is_bool, "a boolean", False),
    "_fp32_grad_accumulation": _Key(_is_bool, "a boolean", False),
    "_shard_offloaded_activations": _Key(_is_bool, "a boolean", False),
    "task_level_activation_loading_horizon": _Key(_int_at_least(1), "an integer >= 1", 4),
    "_sharded_data_parallelism_config": _Key(lambda v: True, "anything", None),
}
ALIASES = {"partitions": "pipeline_parallel_degree"}

# Parameters that must keep their default here, with the alternative named in the error.
UNSUPPORTED: dict[str, str] = {
    "tensor_parallel_degree": "use pipeline_parallel_degree (and ddp) only; tensor parallelism "
    "(smp.nn.Distributed*) is not reproduced. For TP use "
    "torch.distributed.tensor.parallel directly",
    "horovod": "use 'ddp': True for data parallelism across pipeline replicas",
    "fp16": "keep fp16=False; cast the model yourself (model.half()/model.to(torch.bfloat16)) before "
    "smp.DistributedModel, or train in fp32",
    "bf16": "keep bf16=False; cast the model with model.to(torch.bfloat16) before smp.DistributedModel",
    "fp16_params": "keep fp16_params=False; cast the model yourself before smp.DistributedModel",
    "shard_optimizer_state": "keep it False; use torch.distributed.fsdp (fully_shard) outside smp for "
    "optimizer-state sharding",
    "sharded_data_parallel_degree": "keep it 1; use torch.distributed.fsdp.fully_shard (smp v2 style) for "
    "sharded data parallelism",
    "offload_activations": "keep it False; use torch.autograd.graph.save_on_cpu in your modules",
    "prescaled_batch": "keep it False (it only applies to tensor-parallel LM heads)",
    "delayed_parameter_initialization": "keep it False; create the model normally before "
    "smp.DistributedModel",
}

# Accepted parameters with no effect in this engine, and why (documented in the fidelity table).
NO_OP: dict[str, str] = {
    "optimize": "only selects smp's tensor-parallel transformer implementation",
    "memory_weight": "auto-partition balances parameter counts; memory is not traced",
    "active_microbatches": "1F1B already keeps at most pp microbatches in flight",
    "deterministic_server": "torch.distributed.pipelining schedules are deterministic",
    "ddp_port": "the process group uses MASTER_ADDR/MASTER_PORT of the job",
    "contiguous": "TensorFlow only",
    "activation_loading_horizon": "activation offloading is not supported",
    "skip_tracing": "no tracing step is run",
    "tensor_parallel_seed": "tensor parallelism is not supported",
}


@dataclass(frozen=True)
class ModelParallelConfig:
    """A validated smp configuration. ``values`` holds every key of :data:`SCHEMA`."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        raise AttributeError(name)

    @property
    def pp(self) -> int:
        return int(self.values["pipeline_parallel_degree"])

    @property
    def tp(self) -> int:
        return int(self.values["tensor_parallel_degree"])

    def ignored(self) -> list[tuple[str, str]]:
        """Parameters set away from their default that have no effect here, with the reason."""
        return [(k, why) for k, why in NO_OP.items() if self.values[k] != SCHEMA[k].default]

    @property
    def placement(self) -> str:
        """The strategy as three letters, left to right from slowest to fastest varying."""
        s = self.values["placement_strategy"]
        return PLACEMENT_ALIASES.get(s, s)


def parse_env_parameters(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``SM_HP_MP_PARAMETERS`` JSON object, or ``{}`` when unset or empty."""
    text = environ.get(MP_PARAMETERS_ENV, "")
    if not text.strip():
        return {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SMPValidationError(f"{MP_PARAMETERS_ENV} is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise SMPValidationError(f"{MP_PARAMETERS_ENV} must hold a JSON object, got {text!r}")
    return parsed


def _canonical(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        if name not in SCHEMA:
            raise SMPValidationError(f"Unrecognized config parameter {key} (in {source}).")
        if name in out and out[name] != value:
            raise SMPValidationError(
                f"Conflicting values for 'partitions' and 'pipeline_parallel_degree' in {source}: "
                f"{out[name]!r} vs {value!r}. Set only one of them."
            )
        out[name] = value
    return out


def resolve_config(user: Mapping[str, Any] | None, environ: Mapping[str, str]) -> ModelParallelConfig:
    """Merge the user's dict with ``SM_HP_MP_PARAMETERS`` (environment wins) and validate.

    Does not look at the world size: see :func:`check_world_size`.
    """
    merged = _canonical(user or {}, "smp.init config")
    merged.update(_canonical(parse_env_parameters(environ), MP_PARAMETERS_ENV))
    values = {k: spec.default for k, spec in SCHEMA.items()}
    values.update(merged)
    for key, value in merged.items():
        spec = SCHEMA[key]
        if not spec.check(value):
            raise SMPValidationError(f"Config parameter {key} must be {spec.expected}, got {value!r}.")
    for key, alternative in UNSUPPORTED.items():
        if values[key] != SCHEMA[key].default:
            raise SMPUnsupportedError(key, values[key], alternative)
    if values["ddp"] and values["horovod"]:
        raise SMPValidationError("ddp and horovod cannot both be enabled.")
    pp = values["pipeline_parallel_degree"]
    if not values["auto_partition"] and values["default_partition"] is None:
        raise SMPValidationError("default_partition must be given when auto_partition is False.")
    dflt = values["default_partition"]
    if dflt is not None and not 0 <= dflt < pp:
        raise SMPValidationError(
            f"default_partition must be in [0, pipeline_parallel_degree) = [0, {pp}), got {dflt}."
        )
    if values["active_microbatches"] is not None and values["active_microbatches"] < 1:
        raise SMPValidationError("active_microbatches must be >= 1.")
    if values["pipeline"] == "_only_forward":
        raise SMPUnsupportedError("pipeline", "_only_forward", "use 'simple' or 'interleaved'")
    return ModelParallelConfig(values)


def check_world_size(config: ModelParallelConfig, world_size: int) -> int:
    """smp's worker-count rules; returns the replica (rdp) count."""
    mp = config.pp * config.tp
    if world_size % mp != 0:
        raise SMPValidationError(
            f"The number of processes ({world_size}) must be a multiple of pipeline_parallel_degree * "
            f"tensor_parallel_degree ({config.pp} * {config.tp} = {mp})."
        )
    rdp = world_size // mp
    if rdp > 1 and not config.values["ddp"]:
        raise SMPValidationError(
            f"The number of processes ({world_size}) is larger than pipeline_parallel_degree * "
            f"tensor_parallel_degree ({mp}), which requires data parallelism: set 'ddp': True."
        )
    return rdp


def virtual_stages(environ: Mapping[str, str]) -> int:
    """The smlaunch extension ``SMP_TORCH_VIRTUAL_STAGES`` (model chunks per rank), default 1."""
    text = environ.get(VIRTUAL_STAGES_ENV, "").strip()
    if not text:
        return 1
    if not text.isdigit() or int(text) < 1:
        raise SMPValidationError(f"{VIRTUAL_STAGES_ENV}={text!r}: must be an integer >= 1.")
    return int(text)
