"""``@smp.step`` on torch.distributed.pipelining: how an unchanged smp step function runs.

``docs/smp.md``; the model's side (partitioning, stages): :mod:`smlaunch.rank.smp.model`.

* **pp == 1**: the body runs once per microbatch; ``model(x)`` calls the module, ``model.backward(loss)``
  back-propagates ``loss / m`` (smp averages gradients across microbatches).
* **pp > 1**: at the first step the model (an ``nn.Sequential``, or a module whose forward chains its
  children) is partitioned into ``pp * v`` contiguous stages, stage ``s`` on pipeline rank ``s % pp``.
  Per input shape a ``PipelineStage`` with STATIC metadata is built, from a probe pass in ``eval()``
  mode (so no extra training forward ever runs and BatchNorm statistics stay right) that carries the
  real ``requires_grad`` of every boundary tensor.
  Then, each step:

  1. *capture* (first stage): the body runs per microbatch until ``model(...)``, which raises and
     records the model's inputs (the input-shape key goes to the pipeline group in one broadcast);
  2. the schedule (GPipe for ``simple``, 1F1B for ``interleaved``, Interleaved1F1B with virtual stages)
     runs; its ``loss_fn`` is a *replay* of the body on the last stage: ``model(...)`` returns the
     pipeline output of that microbatch, ``model.backward(loss)`` records ``loss / m`` as the loss the
     schedule back-propagates;
  3. gradients are all-reduced over the data-parallel group (bucketed, averaged), never with DDP (DDP
     breaks with several stages per rank, §3.4.9);
  4. the per-microbatch return values are broadcast from the last stage to the pipeline group (one
     collective for up to 64 KiB), so every rank gets the same ``StepOutput`` objects, as with smp.

Eval steps (the step function never calls ``model.backward``, or grad mode is off) use
``schedule.eval``. A per-shape cache of (stages, schedule), keyed by the captured shape broadcast from
pipeline rank 0, lets a smaller last batch work.
"""

from __future__ import annotations

import pickle
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from smlaunch.rank.smp.config import SMPValidationError
from smlaunch.rank.smp.microbatch import detach_tree, map_tensors, split_arguments, to_step_outputs
from smlaunch.rank.smp.model import DistributedModel, _Captured, _Mode, _StepContext
from smlaunch.rank.smp.state import STATE


def _calls_backward(code: types.CodeType) -> bool:
    if "backward" in code.co_names:
        return True
    return any(isinstance(c, types.CodeType) and _calls_backward(c) for c in code.co_consts)


def _run_direct(
    func: Callable[..., Any], mbs: list[tuple[tuple[Any, ...], dict[str, Any]]], scale: float
) -> list[Any]:
    results = []
    for args, kwargs in mbs:
        STATE.step_context = _StepContext(_Mode.DIRECT, scale)
        try:
            results.append(func(*args, **kwargs))
        finally:
            STATE.step_context = None
    return results


Microbatches = list[tuple[tuple[Any, ...], dict[str, Any]]]


def _capture(func: Callable[..., Any], mbs: Microbatches) -> list[tuple[torch.Tensor, ...]]:
    captured = []
    for args, kwargs in mbs:
        STATE.step_context = _StepContext(_Mode.CAPTURE, 1.0)
        try:
            func(*args, **kwargs)
        except _Captured as c:
            if c.kwargs or not all(isinstance(a, torch.Tensor) for a in c.args):
                raise SMPValidationError(
                    "With pipeline_parallel_degree > 1 the model must be called with tensor positional "
                    "arguments only (model(x)); keyword or non-tensor arguments cannot cross a pipeline."
                ) from None
            captured.append(tuple(c.args))
        else:
            raise SMPValidationError("The @smp.step function did not call the DistributedModel.")
        finally:
            STATE.step_context = None
    shapes = {tuple((tuple(t.shape), t.dtype) for t in c) for c in captured}
    if len(shapes) > 1:
        raise SMPValidationError(
            f"All microbatches must have the same input shapes; got {sorted(map(str, shapes))}."
        )
    return captured


_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]
_KEY_SLOTS = 64


def _broadcast_shape_key(
    captured: list[tuple[torch.Tensor, ...]] | None, num_mb: int, src: int, group: Any
) -> tuple[Any, ...]:
    """The input-shape key of this step, from pipeline rank 0, in one small tensor broadcast.

    Layout: ``[length, num_mb, nargs, (dtype, ndim, *dims) per arg]``; keys that do not fit (or use
    an unlisted dtype) fall back to an object broadcast, flagged by ``length = -1``.
    """
    buf = torch.zeros(_KEY_SLOTS, dtype=torch.int64)
    key: tuple[Any, ...] | None = None
    if captured is not None:
        first = captured[0]
        fields = [num_mb, len(first)]
        known = True
        for t in first:
            known = known and t.dtype in _DTYPES
            fields += [_DTYPES.index(t.dtype) if t.dtype in _DTYPES else -1, t.dim(), *t.shape]
        key = tuple(int(f) for f in fields)
        if known and len(key) < _KEY_SLOTS:
            buf[0] = len(key)
            buf[1 : len(key) + 1] = torch.tensor(key, dtype=torch.int64)
        else:
            key = (*key, tuple(str(t.dtype) for t in first))
            buf[0] = -1
    device = STATE.device
    buf = buf.to(device)
    dist.broadcast(buf, src=src, group=group)
    length = int(buf[0])
    if length >= 0:
        return tuple(int(v) for v in buf[1 : length + 1].tolist())
    box: list[Any] = [key]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


_INLINE_BYTES = 1 << 16


def _broadcast_object(obj: Any, src: int, group: Any) -> Any:
    """``broadcast_object_list`` in one collective for payloads up to 64 KiB (the step results).

    The first 8 bytes of a fixed-size buffer carry the pickled length; a larger payload follows in a
    second broadcast. Every step pays one small collective instead of two.
    """
    buf = torch.zeros(_INLINE_BYTES, dtype=torch.uint8)
    data = b""
    if STATE.rank == src:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        buf[:8] = torch.frombuffer(bytearray(len(data).to_bytes(8, "little")), dtype=torch.uint8)
        if len(data) <= _INLINE_BYTES - 8:
            buf[8 : 8 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    buf = buf.to(STATE.device)
    dist.broadcast(buf, src=src, group=group)
    head = buf[:8].cpu()
    length = int.from_bytes(bytes(head.tolist()), "little")
    if length <= _INLINE_BYTES - 8:
        body = buf[8 : 8 + length].cpu()
    else:
        big = torch.zeros(length, dtype=torch.uint8)
        if STATE.rank == src:
            big = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        big = big.to(STATE.device)
        dist.broadcast(big, src=src, group=group)
        body = big.cpu()
    if STATE.rank == src:
        return obj
    return pickle.loads(body.numpy().tobytes())


def _run_pipeline(
    func: Callable[..., Any],
    mbs: list[tuple[tuple[Any, ...], dict[str, Any]]],
    train: bool,
    scale: float,
    detach_outputs: bool,
) -> list[Any]:
    st = STATE.require()
    model: DistributedModel = st.model
    num_mb = len(mbs)
    pp_rank = st.coords()["P"]
    is_first, is_last = pp_rank == 0, pp_rank == st.pp - 1
    group = st.process_group("P")
    captured = _capture(func, mbs) if is_first else None
    if not model.partitioned:
        example = None
        if not isinstance(model.module, nn.Sequential):  # every rank probes the chain with one input
            box: list[Any] = [tuple(t.detach().cpu() for t in captured[0]) if captured else None]
            dist.broadcast_object_list(box, src=st.global_rank(0, "P"), group=group)
            example = box[0]
        model._partition(example)
    if train:
        model._sync_buffers()
    key = _broadcast_shape_key(captured, num_mb, st.global_rank(0, "P"), group)
    pipe = model._pipeline_for(key, captured[0] if captured else None, num_mb)
    results: list[Any] = [None] * num_mb

    def replay(output: Any, target: torch.Tensor) -> torch.Tensor:
        i = int(target.reshape(-1)[0])
        args, kwargs = mbs[i]
        ctx = _StepContext(_Mode.REPLAY, scale, output=output)
        STATE.step_context = ctx
        try:
            results[i] = func(*args, **kwargs)
        finally:
            STATE.step_context = None
        if train and ctx.recorded_loss is not None:
            return ctx.recorded_loss
        return torch.zeros((), device=st.device)

    pipe.loss_fn[:] = [replay]
    target = torch.arange(num_mb, device=st.device) if is_last else None
    run = pipe.schedule.step if train else pipe.schedule.eval
    if is_first:
        assert captured is not None
        inputs = [torch.cat([c[j] for c in captured]).to(st.device) for j in range(len(captured[0]))]
        run(*inputs, target=target)
    else:
        run(target=target)
    if train:
        model._reduce_gradients()
    payload = None
    if is_last:
        payload = [map_tensors(detach_tree(r, True), lambda t: t.cpu()) for r in results]
    received = _broadcast_object(payload, st.global_rank(st.pp - 1, "P"), group)
    if is_last:
        return [detach_tree(r, detach_outputs) for r in results]
    return [map_tensors(r, lambda t: t.to(st.device)) for r in received]


class StepFunction:
    """The callable that ``@smp.step`` returns."""

    def __init__(
        self,
        func: Callable[..., Any],
        non_split_inputs: Sequence[str] | None = None,
        input_split_axes: dict[str, int] | None = None,
        detach_outputs: bool = True,
    ) -> None:
        self.func = func
        self.non_split_inputs = non_split_inputs
        self.input_split_axes = input_split_axes
        self.detach_outputs = detach_outputs
        self._has_backward = _calls_backward(func.__code__)
        self.__name__ = getattr(func, "__name__", "step")
        self.__doc__ = func.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        st = STATE.require()
        model: DistributedModel | None = st.model
        if model is None:
            raise SMPValidationError(
                "Create smp.DistributedModel(model) before calling an @smp.step function."
            )
        if st.step_context is not None:
            raise SMPValidationError("@smp.step functions cannot be nested.")
        num_mb = int(st.config.values["microbatches"])  # type: ignore[union-attr]
        mbs = split_arguments(self.func, args, kwargs, num_mb, self.non_split_inputs, self.input_split_axes)
        train = torch.is_grad_enabled() and self._has_backward
        scale = 1.0 / num_mb if model.average_grads_across_microbatches else 1.0
        if st.pp == 1:
            if train:
                model._sync_buffers()
            results = _run_direct(self.func, mbs, scale)
            if train:
                model._reduce_gradients()
            results = [detach_tree(r, self.detach_outputs) for r in results]
        else:
            results = _run_pipeline(self.func, mbs, train, scale, self.detach_outputs)
        return to_step_outputs(results)


def step(
    func: Callable[..., Any] | None = None,
    *,
    non_split_inputs: Sequence[str] | None = None,
    input_split_axes: dict[str, int] | None = None,
    detach_outputs: bool = True,
) -> Any:
    """smp.step, usable bare (``@smp.step``) or with arguments (``@smp.step(non_split_inputs=[...])``)."""
    if func is None:
        return lambda f: StepFunction(f, non_split_inputs, input_split_axes, detach_outputs)
    return StepFunction(func, non_split_inputs, input_split_axes, detach_outputs)
