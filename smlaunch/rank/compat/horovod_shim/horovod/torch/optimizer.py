"""``hvd.DistributedOptimizer``: the user's optimizer, with gradients averaged across ranks.

As Horovod does, the result is an instance of a subclass of the optimizer's own class built over
the same ``param_groups`` (so ``isinstance(opt, torch.optim.Adam)`` holds and LR schedulers work).
A hook on each parameter starts the gradient's all-reduce as soon as backward has accumulated it
(``backward_passes_per_step`` times), overlapping communication with the rest of backward;
``step()`` first waits for them (``synchronize()``), unless inside ``skip_synchronize()``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from horovod.torch import mpi_ops
from horovod.torch.compression import Compression


class _DistributedOptimizer:
    """The methods mixed into the user's optimizer class (see :func:`DistributedOptimizer`)."""

    def _horovod_setup(
        self,
        named_parameters: Any,
        compression: Any,
        backward_passes_per_step: int,
        op: str,
        gradient_predivide_factor: float,
        sparse_as_dense: bool,
    ) -> None:
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        params = [p for group in self.param_groups for p in group["params"]]  # type: ignore[attr-defined]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
                raise ValueError(
                    "named_parameters should be a sequence of tuples (name, parameter), "
                    "usually produced by model.named_parameters()."
                )
            names = [name for name, _ in named]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(
                    f"Parameter names in named_parameters must be unique. Found duplicates: "
                    f"{', '.join(duplicates)}"
                )
            named_ids = {id(p) for _, p in named}
            if any(id(p) not in named_ids for p in params):
                raise ValueError(
                    "named_parameters was specified, but one or more model parameters were "
                    "not named. Python object ids: "
                    + ", ".join(str(id(p)) for p in params if id(p) not in named_ids)
                )
            self._parameter_names = {id(p): name for name, p in named}
        else:
            self._parameter_names = {id(p): f"allreduce.noname.{i}" for i, p in enumerate(params)}
        self._requires_update = [p for p in params if p.requires_grad]
        self._handles: dict[int, tuple[torch.Tensor, Any]] = {}
        self._allreduce_delay = {id(p): backward_passes_per_step for p in self._requires_update}
        self._synchronized = False
        self._should_synchronize = True
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self._requires_update]

    def _on_grad(self, p: torch.Tensor) -> None:
        if id(p) in self._handles and self._allreduce_delay[id(p)] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before call to step(). "
                "Increase backward_passes_per_step to accumulate gradients locally."
            )
        self._allreduce_delay[id(p)] -= 1
        if self._allreduce_delay[id(p)] == 0:
            self._handles[id(p)] = (p, self._allreduce_grad_async(p))

    def _allreduce_grad_async(self, p: torch.Tensor) -> Any:
        if p.grad is None:
            # Another rank may have computed this gradient (a dynamic forward): send zeros.
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            if not self._sparse_as_dense:
                raise NotImplementedError(
                    "horovod.torch (smlaunch): sparse gradients need "
                    "DistributedOptimizer(..., sparse_as_dense=True)"
                )
            p.grad = p.grad.to_dense()
        if self.op == mpi_ops.Average:
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        return mpi_ops._allreduce_start(p.grad, self.op, prescale, postscale, self._compression, p.grad)

    def synchronize(self) -> None:
        """Wait for every gradient's all-reduce (starting those whose hook did not run, e.g. unused
        parameters), leaving the averaged gradients in ``p.grad``."""
        for p in self._requires_update:
            if id(p) not in self._handles:
                self._handles[id(p)] = (p, self._allreduce_grad_async(p))
        for _, handle in self._handles.values():
            handle.wait()
        self._handles.clear()
        for key in self._allreduce_delay:
            self._allreduce_delay[key] = self.backward_passes_per_step
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Within this block ``step()`` does not synchronize: for a ``synchronize()`` the script
        already called (e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        """Average the gradients across ranks (unless ``skip_synchronize()``), then step."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                    "your code.",
                    stacklevel=2,
                )
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)  # type: ignore[misc]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients; refused between ``backward()`` and ``step()``/``synchronize()``."""
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                "optimizer.synchronize(). This is prohibited as it can cause a race condition."
            )
        return super(self.__class__, self).zero_grad(set_to_none)  # type: ignore[misc]


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Any = None,
    compression: Any = Compression.none,
    backward_passes_per_step: int = 1,
    op: str = mpi_ops.Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: Any = None,
) -> torch.optim.Optimizer:
    """Wrap ``optimizer`` so that ``step()`` uses gradients averaged (``op``) across all ranks.

    ``compression``: what gradients travel as (``hvd.Compression.fp16`` halves the bytes);
    ``backward_passes_per_step``: backward passes accumulated locally before the all-reduce;
    ``gradient_predivide_factor``: divide by it before the sum and by ``size / factor`` after
    (``op=Average`` only). ``num_groups`` / ``groups`` (Horovod's fusion hints) do not change the
    numbers and are accepted as such. ``op=hvd.Adasum`` is refused.
    """
    mpi_ops._require_init()
    op = mpi_ops._check_op(op, None)
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r}: must be an integer >= 1")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"DistributedOptimizer: {type(optimizer).__name__} is not a torch.optim.Optimizer")
    base = type(optimizer)
    methods = {k: v for k, v in vars(_DistributedOptimizer).items() if k not in ("__dict__", "__weakref__")}
    cls: Any = type(base.__name__, (base,), methods)  # base + _DistributedOptimizer, built at run time
    wrapped = cls.__new__(cls)
    # The wrapped instance shares the user's param_groups (and their options) and state, as
    # Horovod's does; the original object is not used afterwards.
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._horovod_setup(
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        sparse_as_dense,
    )
    wrapped._patch_step_function()  # what Optimizer.__init__ does: step hooks and profiling
    return wrapped
