"""``smp.DistributedModel`` on torch.distributed.pipelining: partitioning, stages, local views.

The model wraps the user's full module. At the first ``@smp.step`` call with ``pp > 1`` it partitions
the model (an ``nn.Sequential``, or a module whose forward chains its children) into ``pp * v``
contiguous stages, stage ``s`` on pipeline rank ``s % pp``, and builds, per input shape, a
``PipelineStage`` with STATIC metadata from a probe pass in ``eval()`` mode (so no extra training
forward ever runs and BatchNorm statistics stay right) that carries the real ``requires_grad`` of every
boundary tensor. Inside a step, ``model(x)`` and ``model.backward(loss)`` behave as the step's mode
says (:class:`_StepContext`, set by :mod:`smlaunch.rank.smp.step`): call the module directly (pp == 1),
capture the inputs (first stage), or replay the pipeline's output (last stage). Gradients are
all-reduced over the data-parallel group (bucketed, averaged), never with DDP (DDP breaks with several
stages per rank). How a whole step runs: :mod:`smlaunch.rank.smp.step` (``docs/smp.md``).
The module is one concept, the ``DistributedModel`` class and the stage module it builds.
"""

from __future__ import annotations

import contextlib
import enum
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.hooks import RemovableHandle

from smlaunch.rank.smp import partition as partitioning
from smlaunch.rank.smp.config import SMPUnsupportedError, SMPValidationError
from smlaunch.rank.smp.state import STATE

PARTIAL_KEY = "_smp_is_partial"


class _Mode(enum.Enum):
    DIRECT = "direct"
    CAPTURE = "capture"
    REPLAY = "replay"


class _Captured(Exception):
    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__("model inputs captured")
        self.args = args
        self.kwargs = kwargs


@dataclass
class _StepContext:
    mode: _Mode
    scale: float
    output: Any = None
    recorded_loss: torch.Tensor | None = None
    model_calls: int = 0
    backward_calls: int = 0


def _surrogate(tensors: Any, grad_tensors: Any) -> torch.Tensor:
    """A scalar whose gradient equals ``backward(tensors, grad_tensors)``."""
    ts = list(tensors) if isinstance(tensors, list | tuple) else [tensors]
    if grad_tensors is None:
        gs: list[Any] = [None] * len(ts)
    else:
        gs = list(grad_tensors) if isinstance(grad_tensors, list | tuple) else [grad_tensors]
    total: torch.Tensor | None = None
    for t, g in zip(ts, gs, strict=True):
        if g is None:
            if t.numel() != 1:
                raise SMPValidationError("model.backward: grad_tensors are required for non-scalar outputs.")
            term = t.sum()
        else:
            term = (t * g.detach()).sum()
        total = term if total is None else total + term
    assert total is not None
    return total


class _StageModule(nn.Sequential):
    """A contiguous slice of the user's block chain (same child objects, same names).

    Boundary values follow ``nn.Sequential`` semantics: a block returning a tuple hands the tuple to the
    next block; the pipeline sends it as several tensors and this forward packs them again.
    """

    def forward(self, *args: Any) -> Any:  # type: ignore[override]
        x: Any = args[0] if len(args) == 1 else tuple(args)
        for block in self:
            x = block(x)
        return x


@dataclass
class _Pipeline:
    """The stages and schedule built for one input-shape key."""

    stages: list[Any]
    schedule: Any
    loss_fn: list[Callable[[Any, torch.Tensor], torch.Tensor]] = field(default_factory=list)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


class DistributedModel(nn.Module):
    """smp.DistributedModel: wraps the full model; partitions at the first ``@smp.step`` call."""

    def __init__(
        self,
        module: nn.Module,
        trace_device: str = "gpu",
        trace_execution_times: bool = False,
        overlapping_allreduce: bool = True,
        backward_passes_per_step: int = 1,
        average_grads_across_microbatches: bool = True,
        bucket_cap_mb: int = 25,
        trace_memory_usage: bool = False,
        broadcast_buffers: bool = True,
        gradient_as_bucket_view: bool = False,
    ) -> None:
        st = STATE.require()
        if st.model is not None:
            raise SMPValidationError("Only one smp.DistributedModel can exist per process.")
        if backward_passes_per_step < 1:
            raise SMPValidationError("backward_passes_per_step must be >= 1.")
        super().__init__()
        self.module = module
        self.average_grads_across_microbatches = average_grads_across_microbatches
        self.backward_passes_per_step = backward_passes_per_step
        self.bucket_cap_mb = bucket_cap_mb
        self.broadcast_buffers = broadcast_buffers
        self.partitioned = False
        self._post_partition_hooks: OrderedDict[int, Callable[[DistributedModel, Any], None]] = OrderedDict()
        self._stage_modules: dict[int, _StageModule] = {}
        self._local_block_names: set[str] = set()
        self._pipelines: dict[Any, _Pipeline] = {}
        self._partial_loaded: set[str] | None = None
        self._backward_count = 0
        st.model = self
        if st.pp == 1:
            self._partition()

    # -- partitioning -------------------------------------------------------------------------

    @property
    def num_stages(self) -> int:
        return STATE.pp * STATE.virtual_stages

    def local_stage_ids(self) -> list[int]:
        st = STATE.require()
        pp_rank = st.coords()["P"]
        return [s for s in range(self.num_stages) if s % st.pp == pp_rank]

    def _partition(self, example: tuple[torch.Tensor, ...] | None = None) -> None:
        st = STATE.require()
        cfg = st.config.values  # type: ignore[union-attr]
        if st.pp == 1:
            self.module.to(st.device)
            self._local_block_names = {n for n, _ in self.module.named_children()}
        else:
            if example is not None:
                where = next((p.device for p in self.module.parameters()), torch.device("cpu"))
                example = tuple(t.to(where) for t in example)
            blocks = partitioning.blocks_of(self.module, example)
            num = self.num_stages
            if cfg["auto_partition"]:
                ids = partitioning.auto_partition(blocks, num)
            else:
                if st.virtual_stages > 1:
                    raise SMPValidationError(
                        "Manual partitioning (auto_partition=False) cannot be combined with "
                        "SMP_TORCH_VIRTUAL_STAGES > 1; use auto_partition=True."
                    )
                ids = partitioning.manual_partition(blocks, st.pp, cfg["default_partition"])
            owner: dict[int, int] = {}
            for (name, block), sid in zip(blocks, ids, strict=True):
                for p in block.parameters():
                    if owner.setdefault(id(p), sid) != sid:
                        raise SMPValidationError(
                            f"A parameter of block {name!r} is shared with a block on another pipeline stage "
                            "(tied weights). Tied weights across partitions are not supported; keep the tied "
                            "modules in one partition."
                        )
            local = set(self.local_stage_ids())
            if st.device.type != "cpu":  # blocks of other stages stay in host memory, never on this GPU
                for (_, block), sid in zip(blocks, ids, strict=True):
                    if sid not in local:
                        block.to("cpu")
            for sid in sorted(local):
                members = OrderedDict((n, b) for (n, b), i in zip(blocks, ids, strict=True) if i == sid)
                stage = _StageModule(members)
                stage.to(st.device)
                self._stage_modules[sid] = stage
                self._local_block_names.update(members)
            self.stage_assignment = {name: sid for (name, _), sid in zip(blocks, ids, strict=True)}
        if st.group_size("DT") > 1:
            self._broadcast_from_dp0(list(self._local_tensors(buffers=True)))
        self.partitioned = True
        self._check_partial_load()
        for hook in list(self._post_partition_hooks.values()):
            hook(self, STATE.optimizer)

    def _broadcast_from_dp0(self, tensors: Sequence[torch.Tensor]) -> None:
        src = STATE.global_rank(0, "DT")
        group = STATE.process_group("DT")
        for t in tensors:
            dist.broadcast(t.data, src=src, group=group)

    def _local_tensors(self, buffers: bool) -> Iterator[torch.Tensor]:
        seen: set[int] = set()
        for name, child in self.module.named_children():
            if name not in self._local_block_names:
                continue
            items = list(child.parameters()) + (list(child.buffers()) if buffers else [])
            for t in items:
                if id(t) not in seen:
                    seen.add(id(t))
                    yield t
        if STATE.pp == 1:  # parameters registered directly on the root module
            for t in list(self.module.parameters(recurse=False)) + (
                list(self.module.buffers(recurse=False)) if buffers else []
            ):
                if id(t) not in seen:
                    seen.add(id(t))
                    yield t

    def register_post_partition_hook(self, hook: Callable[[DistributedModel, Any], None]) -> RemovableHandle:
        handle = RemovableHandle(self._post_partition_hooks)
        self._post_partition_hooks[handle.id] = hook
        if self.partitioned:
            hook(self, STATE.optimizer)
        return handle

    # -- the smp call surface -----------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ctx: _StepContext | None = STATE.step_context
        if ctx is None:
            if STATE.pp > 1:
                raise SMPValidationError(
                    "A DistributedModel with pipeline_parallel_degree > 1 can only be called inside an "
                    "@smp.step function."
                )
            return self.module(*args, **kwargs)
        ctx.model_calls += 1
        if ctx.model_calls > 1 and STATE.pp > 1:
            raise SMPValidationError(
                "The DistributedModel was called more than once in one microbatch of an @smp.step function; "
                "a pipeline runs the model exactly once per microbatch."
            )
        if ctx.mode is _Mode.DIRECT:
            return self.module(*args, **kwargs)
        if ctx.mode is _Mode.CAPTURE:
            raise _Captured(args, kwargs)
        return ctx.output

    def backward(self, tensors: Any, grad_tensors: Any = None) -> None:
        """smp's replacement of ``loss.backward()`` (inside ``@smp.step`` only)."""
        ctx: _StepContext | None = STATE.step_context
        if ctx is None:
            raise SMPValidationError("model.backward() can only be called inside an @smp.step function.")
        ctx.backward_calls += 1
        loss = _surrogate(tensors, grad_tensors) * ctx.scale
        if ctx.mode is _Mode.DIRECT:
            loss.backward()
        else:
            ctx.recorded_loss = loss if ctx.recorded_loss is None else ctx.recorded_loss + loss

    # -- local views --------------------------------------------------------------------------

    def _is_local_key(self, key: str) -> bool:
        if STATE.pp == 1:
            return True
        return key.split(".", 1)[0] in self._local_block_names

    def local_named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        self._require_partition()
        return ((n, p) for n, p in self.module.named_parameters() if self._is_local_key(n))

    def local_parameters(self) -> Iterator[nn.Parameter]:
        return (p for _, p in self.local_named_parameters())

    def local_named_buffers(self) -> Iterator[tuple[str, torch.Tensor]]:
        self._require_partition()
        return ((n, b) for n, b in self.module.named_buffers() if self._is_local_key(n))

    def local_buffers(self) -> Iterator[torch.Tensor]:
        return (b for _, b in self.local_named_buffers())

    def local_named_modules(self) -> Iterator[tuple[str, nn.Module]]:
        self._require_partition()
        return ((n, m) for n, m in self.module.named_modules() if n and self._is_local_key(n))

    def local_modules(self) -> Iterator[nn.Module]:
        return (m for _, m in self.local_named_modules())

    def _require_partition(self) -> None:
        if not self.partitioned:
            raise SMPValidationError(
                "The model is partitioned at the first @smp.step call; call this after it."
            )

    # -- state dicts --------------------------------------------------------------------------

    def local_state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """This rank's part of the state dict, marked with ``_smp_is_partial``."""
        self._require_partition()
        full = self.module.state_dict(*args, **kwargs)
        out: dict[str, Any] = OrderedDict((k, v) for k, v in full.items() if self._is_local_key(k))
        out[PARTIAL_KEY] = True
        return out

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """The full state dict (original FQNs), gathered over the pipeline group (collective)."""
        full_keys = list(self.module.state_dict().keys())
        if STATE.pp == 1 or not self.partitioned:
            return OrderedDict((k, v.detach().cpu()) for k, v in self.module.state_dict().items())
        local = {k: v.detach().cpu() for k, v in self.local_state_dict().items() if k != PARTIAL_KEY}
        pieces: list[Any] = [None] * STATE.group_size("P")
        dist.all_gather_object(pieces, local, group=STATE.process_group("P"))
        merged: dict[str, Any] = {}
        for piece in pieces:
            merged.update(piece)
        return OrderedDict((k, merged[k]) for k in full_keys if k in merged)

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> Any:  # type: ignore[override]
        """Load a full or partial (``_smp_is_partial``) state dict.

        Every rank holds the whole module until the partition, so both forms load immediately into the
        same parameter objects; a partial dict's coverage of this rank's stages is verified at the
        partition (a checkpoint from a different partitioning is rejected).
        """
        sd = dict(state_dict)
        partial = bool(sd.pop(PARTIAL_KEY, False))
        if not partial:
            return self.module.load_state_dict(sd, strict=strict)
        result = self.module.load_state_dict(sd, strict=False)
        if result.unexpected_keys:
            raise SMPValidationError(f"Partial state dict has unknown keys: {result.unexpected_keys[:5]}")
        self._partial_loaded = (self._partial_loaded or set()) | set(sd)
        if self.partitioned:
            self._check_partial_load()
        return result

    def _check_partial_load(self) -> None:
        if self._partial_loaded is None:
            return
        local = {k for k in self.module.state_dict() if self._is_local_key(k)}
        missing = sorted(local - self._partial_loaded)
        if missing:
            raise SMPValidationError(
                f"The partial checkpoint does not hold this rank's parameters ({missing[:5]} ...): it was "
                "written with a different partitioning. Resume with the same pipeline_parallel_degree and "
                "partitioning, or save and load a full checkpoint (partial=False)."
            )
        self._partial_loaded = None

    # -- data-parallel gradient reduction ---------------------------------------------------

    def _reduce_gradients(self) -> None:
        if STATE.group_size("DT") == 1:
            return
        self._backward_count += 1
        if self._backward_count % self.backward_passes_per_step:
            return
        grads = [p.grad for p in self._local_tensors(buffers=False) if p.grad is not None]
        group = STATE.process_group("DT")
        world = STATE.group_size("DT")
        cap = max(1, int(self.bucket_cap_mb * 1024 * 1024))
        bucket: list[torch.Tensor] = []
        size = 0

        def flush() -> None:
            if not bucket:
                return
            flat = torch.cat([g.reshape(-1) for g in bucket])
            dist.all_reduce(flat, group=group)
            flat.div_(world)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            bucket.clear()

        for g in grads:
            if bucket and (g.dtype != bucket[0].dtype or size + g.numel() * g.element_size() > cap):
                flush()
                size = 0
            bucket.append(g)
            size += g.numel() * g.element_size()
        flush()

    def _sync_buffers(self) -> None:
        """DDP's ``broadcast_buffers``: every replica starts the step with dp rank 0's buffers."""
        if self.broadcast_buffers and STATE.group_size("DT") > 1:
            self._broadcast_from_dp0(list(self.local_buffers()))

    # -- pipeline construction ----------------------------------------------------------------

    def _pipeline_for(self, key: Any, example: tuple[torch.Tensor, ...] | None, num_mb: int) -> _Pipeline:
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
        )

        st = STATE.require()
        pp, num = st.pp, self.num_stages
        group = st.process_group("P")
        stages: list[Any] = []  # PipelineStage, as _Pipeline.stages
        for sid in range(num):
            if sid % pp != st.coords()["P"]:
                continue
            if sid == 0:
                assert example is not None
                inputs = tuple(t.detach().to(st.device) for t in example)
                flags = tuple(False for _ in inputs)
            else:
                box: list[Any] = [None]
                dist.recv_object_list(box, src=st.global_rank((sid - 1) % pp, "P"), group=group)
                cpu_inputs, flags = box[0]
                inputs = tuple(t.to(st.device) for t in cpu_inputs)
            inputs = tuple(t.requires_grad_(f) for t, f in zip(inputs, flags, strict=True))
            stage_module = self._stage_modules[sid]
            modes = {m: m.training for m in stage_module.modules()}
            stage_module.eval()
            try:
                with torch.enable_grad():
                    outputs = _as_tuple(stage_module(*inputs))
            finally:
                for m, mode in modes.items():
                    m.training = mode
            if not all(isinstance(o, torch.Tensor) for o in outputs):
                raise SMPValidationError(
                    f"Pipeline stage {sid} returned a non-tensor value; stage boundaries must be tensors "
                    "(or tuples of tensors)."
                )
            out_flags = tuple(bool(o.requires_grad) for o in outputs)
            if sid < num - 1:
                payload = (tuple(o.detach().cpu() for o in outputs), out_flags)
                dist.send_object_list([payload], dst=st.global_rank((sid + 1) % pp, "P"), group=group)
            stages.append(
                PipelineStage(
                    stage_module,
                    sid,
                    num,
                    st.device,
                    input_args=tuple(
                        t.detach().requires_grad_(f) for t, f in zip(inputs, flags, strict=True)
                    ),
                    output_args=tuple(
                        o.detach().requires_grad_(f) for o, f in zip(outputs, out_flags, strict=True)
                    ),
                    group=group,
                )
            )
        holder = _Pipeline(stages=stages, schedule=None)

        def trampoline(output: Any, target: torch.Tensor) -> torch.Tensor:
            return holder.loss_fn[0](output, target)

        pipeline = st.config.values["pipeline"]  # type: ignore[union-attr]
        schedule: ScheduleInterleaved1F1B | ScheduleGPipe | Schedule1F1B
        if st.virtual_stages > 1:
            rounds = max(1, num_mb // pp)
            if num_mb % rounds:
                raise SMPValidationError(
                    f"microbatches={num_mb} with {pp} pipeline ranks and virtual stages: the number of "
                    f"microbatches must be a multiple of max(1, microbatches // pp) = {rounds}."
                )
            schedule = ScheduleInterleaved1F1B(stages, num_mb, loss_fn=trampoline, scale_grads=False)
        elif pipeline == "simple" or num_mb < pp:
            schedule = ScheduleGPipe(stages[0], num_mb, loss_fn=trampoline, scale_grads=False)
        else:
            schedule = Schedule1F1B(stages[0], num_mb, loss_fn=trampoline, scale_grads=False)
        holder.schedule = schedule
        self._pipelines[key] = holder
        return holder

    # smp's tensor-parallel introspection: no parameter is distributed here (tensor_parallel_degree == 1)
    @property
    def distributed_modules(self) -> list[nn.Module]:
        return []

    def is_distributed_parameter(self, param: torch.Tensor) -> bool:
        return False

    def is_distributed_buffer(self, buffer: torch.Tensor) -> bool:
        return False

    def is_scaled_batch_parameter(self, param: torch.Tensor) -> bool:
        return False

    def is_scaled_batch_buffer(self, buffer: torch.Tensor) -> bool:
        return False

    def default_reducer_named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        return self.local_named_parameters()

    def scaled_batch_reducer_named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        return iter(())

    def join(self, *args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[None]:
        """DDP's uneven-inputs context: accepted; every replica must run the same number of steps."""
        return contextlib.nullcontext()

    def register_comm_hook(self, state: Any, hook: Callable[..., Any]) -> None:
        raise SMPUnsupportedError(
            "DistributedModel.register_comm_hook",
            hook,
            "gradients are averaged with a bucketed all-reduce after each step; remove the hook",
        )

    def cpu(self) -> DistributedModel:  # smp: gather to CPU; here: move the local stages
        self.module.cpu()
        return self
