"""``smp.DistributedOptimizer``: the user's optimizer over the full model's parameters (``docs/smp.md``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from smlaunch.rank.smp.config import SMPValidationError
from smlaunch.rank.smp.microbatch import map_tensors
from smlaunch.rank.smp.model import PARTIAL_KEY
from smlaunch.rank.smp.state import STATE


def _delegated(name: str) -> property:
    """An attribute that is the wrapped optimizer's own (read and written through)."""
    return property(
        lambda self: getattr(self.optimizer, name), lambda self, value: setattr(self.optimizer, name, value)
    )


class DistributedOptimizer(torch.optim.Optimizer):
    """smp.DistributedOptimizer: the user's optimizer over the full model's parameters.

    A real ``torch.optim.Optimizer`` (``isinstance`` holds, every ``torch.optim.lr_scheduler``
    works): its ``defaults``, ``param_groups`` and ``state`` *are* the wrapped optimizer's (shared,
    not copied, so a scheduler's learning rates reach it, before and after ``load_state_dict``);
    ``step``, ``zero_grad`` and ``add_param_group`` are the wrapped optimizer's; step hooks
    registered on this object run around ``step``. Parameters that are not local to this rank
    never get gradients, so torch optimizers skip them; ``state_dict`` gathers the per-parameter
    state of every pipeline rank (collective). ``static_loss_scale``/``dynamic_loss_scale`` are
    smp's fp16 arguments, which take effect only with ``fp16`` (refused at ``smp.init``).
    """

    defaults = _delegated("defaults")
    param_groups = _delegated("param_groups")
    state = _delegated("state")

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        static_loss_scale: float = 1.0,
        dynamic_loss_scale: bool = False,
        **dynamic_loss_args: Any,
    ) -> None:
        STATE.require()
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise SMPValidationError(
                f"smp.DistributedOptimizer needs a torch.optim.Optimizer, got {type(optimizer).__name__}; "
                "wrap e.g. torch.optim.AdamW(model.parameters())."
            )
        self.optimizer = optimizer
        # What torch.optim.Optimizer.__init__ sets up, without building param_groups of our own.
        for hooks in (
            "_optimizer_step_pre_hooks",
            "_optimizer_step_post_hooks",
            "_optimizer_state_dict_pre_hooks",
            "_optimizer_state_dict_post_hooks",
            "_optimizer_load_state_dict_pre_hooks",
            "_optimizer_load_state_dict_post_hooks",
        ):
            setattr(self, hooks, OrderedDict())
        self._patch_step_function()
        STATE.optimizer = self

    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.optimizer!r})"

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        return self.optimizer.step() if closure is None else self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def local_state_dict(self) -> dict[str, Any]:
        sd = self.optimizer.state_dict()
        sd[PARTIAL_KEY] = True
        return sd

    def state_dict(self) -> dict[str, Any]:
        sd = self.optimizer.state_dict()
        model = STATE.model
        if STATE.pp == 1 or model is None or not model.partitioned:
            return sd
        pieces: list[Any] = [None] * STATE.group_size("P")
        local = {"state": {k: map_tensors(v, lambda t: t.detach().cpu()) for k, v in sd["state"].items()}}
        dist.all_gather_object(pieces, local, group=STATE.process_group("P"))
        merged: dict[Any, Any] = {}
        for piece in pieces:
            merged.update(piece["state"])
        return {"state": dict(sorted(merged.items())), "param_groups": sd["param_groups"]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        sd = dict(state_dict)
        sd.pop(PARTIAL_KEY, None)
        self.optimizer.load_state_dict(sd)
