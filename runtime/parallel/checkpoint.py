"""smp's save/load and checkpoint folders.

* ``save(obj, f, partial=True)`` writes ``f"{f}_{pp_rank}_{tp_rank}.pt"`` on every rank (smp 1.12
  naming); ``partial=False`` writes ``f`` on global rank 0 only. ``load`` reads the same names.
* ``save_checkpoint(path, tag, partial=True, ...)`` writes
  ``path/{tag}_partial/{model,optimizer}_{pp}_{tp}_{rdp}.pt`` on the ``rdp_rank == 0`` ranks,
  ``user_content.pt`` there on rank 0, and ``path/newest`` holding the tag; ``partial=False`` writes the
  full model state dict (original FQNs, loadable by a plain ``torch.load`` + ``load_state_dict``) at
  ``path/{tag}`` and the user content at ``path/user_content_{tag}.pt``.
* ``resume_from_checkpoint`` loads them back (into the full module, before or after the partition).

Contents depend on the partitioning, so partial checkpoints are only portable between runs with the same
pipeline layout; :func:`merge_partial_checkpoint` turns one into a full state dict in a single process.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runtime.parallel.config import SMPValidationError
from runtime.parallel.engine import PARTIAL_KEY
from runtime.parallel.state import STATE

NEWEST_FILE = "newest"
USER_CONTENT_FILE = "user_content.pt"


def _rank_suffix() -> str:
    c = STATE.coords()
    return f"{c['P']}_{c['T']}"


def save(obj: Any, f: str | os.PathLike[str], partial: bool = True, pickle_module: Any = pickle,
         pickle_protocol: int = 2) -> None:
    """smp.save."""
    STATE.require()
    if partial:
        torch.save(obj, f"{os.fspath(f)}_{_rank_suffix()}.pt", pickle_module=pickle_module,
                   pickle_protocol=pickle_protocol)
    elif STATE.rank == 0:
        torch.save(obj, f, pickle_module=pickle_module, pickle_protocol=pickle_protocol)


def load(f: str | os.PathLike[str], map_location: Any = None, pickle_module: Any = pickle,
         partial: bool = True, **pickle_load_args: Any) -> Any:
    """smp.load (also reads the older ``f"{f}_{mp_rank}"`` naming)."""
    STATE.require()
    path = os.fspath(f)
    if partial:
        candidates = [f"{path}_{_rank_suffix()}.pt", f"{path}_{STATE.group_rank('PT')}"]
        path = next((c for c in candidates if os.path.exists(c)), candidates[0])
    return torch.load(path, map_location=map_location, pickle_module=pickle_module, weights_only=False,
                      **pickle_load_args)


def _partial_name(kind: str) -> str:
    c = STATE.coords()
    return f"{kind}_{c['P']}_{c['T']}_{c['D']}.pt"


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(path: str | os.PathLike[str], tag: str, partial: bool = True, model: Any = None,
                    optimizer: Any = None, user_content: Any = None, translate_if_full: bool = True,
                    num_kept_partial_checkpoints: int | None = None) -> None:
    """smp.save_checkpoint; call it on every rank (the full form gathers over the pipeline)."""
    STATE.require()
    root = Path(path)
    if partial:
        folder = root / f"{tag}_partial"
        if STATE.coords()["D"] == 0:
            folder.mkdir(parents=True, exist_ok=True)
            if model is not None:
                torch.save(model.local_state_dict(), folder / _partial_name("model"))
            if optimizer is not None:
                torch.save(optimizer.local_state_dict(), folder / _partial_name("optimizer"))
            if STATE.rank == 0:
                torch.save(user_content, folder / USER_CONTENT_FILE)
        _barrier()
        if STATE.rank == 0:
            (root / NEWEST_FILE).write_text(tag)
            if num_kept_partial_checkpoints is not None:
                kept = sorted(root.glob("*_partial"), key=lambda p: p.stat().st_mtime)
                for old in kept[:-num_kept_partial_checkpoints] if num_kept_partial_checkpoints > 0 else []:
                    shutil.rmtree(old, ignore_errors=True)
    else:
        state = model.state_dict() if model is not None else None
        if STATE.rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            if state is not None:
                torch.save(state, root / tag)
            torch.save(user_content, root / f"user_content_{tag}.pt")
            (root / NEWEST_FILE).write_text(tag)
    _barrier()


def resume_from_checkpoint(path: str | os.PathLike[str], tag: str | None = None, partial: bool = True,
                           strict: bool = True, load_optimizer: bool = True,
                           load_sharded_optimizer_state: bool = True, translate_function: Any = None) -> Any:
    """smp.resume_from_checkpoint: load into the DistributedModel/Optimizer; returns user_content."""
    STATE.require()
    root = Path(path)
    if tag is None:
        newest = root / NEWEST_FILE
        if not newest.exists():
            raise SMPValidationError(f"No tag given and {newest} does not exist.")
        tag = newest.read_text().strip()
    model, optimizer = STATE.model, STATE.optimizer
    if partial:
        folder = root / f"{tag}_partial"
        model_file = folder / _partial_name("model").replace(f"_{STATE.coords()['D']}.pt", "_0.pt")
        if not model_file.exists():
            raise SMPValidationError(
                f"Partial checkpoint file {model_file} does not exist: resume with the pipeline layout the "
                "checkpoint was written with, or use a full checkpoint (partial=False)."
            )
        if model is not None:
            model.load_state_dict(torch.load(model_file, map_location="cpu", weights_only=False))
        opt_file = folder / model_file.name.replace("model_", "optimizer_", 1)
        if load_optimizer and optimizer is not None and opt_file.exists():
            optimizer.load_state_dict(torch.load(opt_file, map_location="cpu", weights_only=False))
        content_file = folder / USER_CONTENT_FILE
        return torch.load(content_file, weights_only=False) if content_file.exists() else None
    state = torch.load(root / tag, map_location="cpu", weights_only=False)
    if translate_function is not None:
        state = translate_function(state)
    if model is not None:
        model.load_state_dict(state, strict=strict)
    content = root / f"user_content_{tag}.pt"
    return torch.load(content, weights_only=False) if content.exists() else None


def merge_partial_checkpoint(path: str | os.PathLike[str], tag: str | None = None) -> dict[str, Any]:
    """The full model state dict of a partial checkpoint, in one process (no smp.init needed)."""
    root = Path(path)
    if tag is None:
        tag = (root / NEWEST_FILE).read_text().strip()
    merged: dict[str, Any] = {}
    files = sorted((root / f"{tag}_partial").glob("model_*_*_0.pt"))
    if not files:
        raise SMPValidationError(f"No partial model files under {root / f'{tag}_partial'}")
    for f in files:
        part = torch.load(f, map_location="cpu", weights_only=False)
        part.pop(PARTIAL_KEY, None)
        merged.update(part)
    return merged
