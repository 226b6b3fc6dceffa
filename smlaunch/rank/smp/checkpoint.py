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

Checkpoints come back from ``checkpoint_s3_uri``, which other people may be able to write, so every load
here uses ``torch.load(weights_only=True)``: tensors and plain data only, plus :func:`safe_globals`
(``argparse.Namespace`` and numpy scalars, dtypes and arrays, which users put in ``user_content``). A
file holding anything else is refused with :class:`UnsafeCheckpointError` before any of its code can
run. Trusted files with other types: allow them with ``torch.serialization.add_safe_globals([...])``,
or opt in to full pickle with the ``unsafe_checkpoint_load`` setting (``SMLAUNCH_UNSAFE_CHECKPOINT_LOAD=1``
on the hosts; or ``smp.load(..., weights_only=False)``), which warns: a pickle runs whatever code it
names.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from smlaunch import contract
from smlaunch.rank.smp.config import SMPValidationError
from smlaunch.rank.smp.model import PARTIAL_KEY
from smlaunch.rank.smp.state import STATE

NEWEST_FILE = "newest"
USER_CONTENT_FILE = "user_content.pt"


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds a type that is not allowed to load: unpickling it could run code."""


def safe_globals() -> list[Any]:
    """What smp checkpoints may hold beyond torch's defaults (tensors, containers, numbers, strings):
    ``argparse.Namespace`` and, when numpy is installed, numpy scalars, dtypes and arrays (not object
    arrays' contents beyond what the same restricted unpickler allows)."""
    allowed: list[Any] = [argparse.Namespace]
    try:
        import numpy as np
    except ImportError:
        return allowed
    codes = np.typecodes["All"].replace("O", "")
    allowed += [np.ndarray, np.dtype, np.arange(1).__reduce__()[0], np.float64(0).__reduce__()[0]]
    allowed += sorted({type(np.dtype(code)) for code in codes}, key=lambda t: t.__name__)
    return allowed


def _unsafe_opt_in(requested: bool) -> bool:
    unsafe = requested or os.environ.get(contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD, "") == "1"
    if unsafe:
        warnings.warn(
            "smp checkpoints are loaded with full pickle (SMLAUNCH_UNSAFE_CHECKPOINT_LOAD=1 or "
            "weights_only=False): a checkpoint file can run any code in this job; use this only for "
            "checkpoints you trust",
            UserWarning,
            stacklevel=3,
        )
    return unsafe


def _load(
    path: str | os.PathLike[str],
    map_location: Any = None,
    *,
    unsafe: bool = False,
    pickle_module: Any = pickle,
    **pickle_load_args: Any,
) -> Any:
    """``torch.load`` with ``weights_only=True`` and :func:`safe_globals`, unless opted out."""
    if _unsafe_opt_in(unsafe or pickle_module is not pickle):
        return torch.load(
            path,
            map_location=map_location,
            pickle_module=pickle_module,
            weights_only=False,
            **pickle_load_args,
        )
    allowing = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5; 2.4: process-wide
    if allowing is None:
        torch.serialization.add_safe_globals(safe_globals())
    try:
        with allowing(safe_globals()) if allowing is not None else contextlib.nullcontext():
            return torch.load(path, map_location=map_location, weights_only=True, **pickle_load_args)
    except pickle.UnpicklingError as error:
        blocked = next(
            (line.strip() for line in str(error).splitlines() if "GLOBAL" in line),
            str(error).splitlines()[0] if str(error) else "",
        )
        raise UnsafeCheckpointError(
            f"refusing to load checkpoint {os.fspath(path)}: it holds a type that is not a tensor or "
            f"plain data, and unpickling it could run code ({blocked}). If you trust this file, allow "
            "the type with torch.serialization.add_safe_globals([...]), or load with full pickle: "
            "LocalSession(unsafe_checkpoint_load=True), or "
            f"{contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD}=1 in the estimator's environment=."
        ) from error


def _rank_suffix() -> str:
    c = STATE.coords()
    return f"{c['P']}_{c['T']}"


def save(
    obj: Any,
    f: str | os.PathLike[str],
    partial: bool = True,
    pickle_module: Any = pickle,
    pickle_protocol: int = 2,
) -> None:
    """smp.save."""
    STATE.require()
    if partial:
        torch.save(
            obj,
            f"{os.fspath(f)}_{_rank_suffix()}.pt",
            pickle_module=pickle_module,
            pickle_protocol=pickle_protocol,
        )
    elif STATE.rank == 0:
        torch.save(obj, f, pickle_module=pickle_module, pickle_protocol=pickle_protocol)


def load(
    f: str | os.PathLike[str],
    map_location: Any = None,
    pickle_module: Any = pickle,
    partial: bool = True,
    **pickle_load_args: Any,
) -> Any:
    """smp.load (also reads the older ``f"{f}_{mp_rank}"`` naming).

    Loads with ``weights_only=True`` (see the module docstring); ``weights_only=False`` or another
    ``pickle_module`` opts in to full pickle, with a warning."""
    STATE.require()
    path = os.fspath(f)
    if partial:
        candidates = [f"{path}_{_rank_suffix()}.pt", f"{path}_{STATE.group_rank('PT')}"]
        path = next((c for c in candidates if os.path.exists(c)), candidates[0])
    unsafe = pickle_load_args.pop("weights_only", True) is False
    return _load(path, map_location, unsafe=unsafe, pickle_module=pickle_module, **pickle_load_args)


def _partial_name(kind: str) -> str:
    c = STATE.coords()
    return f"{kind}_{c['P']}_{c['T']}_{c['D']}.pt"


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_checkpoint(
    path: str | os.PathLike[str],
    tag: str,
    partial: bool = True,
    model: Any = None,
    optimizer: Any = None,
    user_content: Any = None,
    translate_if_full: bool = True,
    num_kept_partial_checkpoints: int | None = None,
) -> None:
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


def resume_from_checkpoint(
    path: str | os.PathLike[str],
    tag: str | None = None,
    partial: bool = True,
    strict: bool = True,
    load_optimizer: bool = True,
    load_sharded_optimizer_state: bool = True,
    translate_function: Any = None,
) -> Any:
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
            model.load_state_dict(_load(model_file, map_location="cpu"))
        opt_file = folder / model_file.name.replace("model_", "optimizer_", 1)
        if load_optimizer and optimizer is not None and opt_file.exists():
            optimizer.load_state_dict(_load(opt_file, map_location="cpu"))
        content_file = folder / USER_CONTENT_FILE
        return _load(content_file) if content_file.exists() else None
    state = _load(root / tag, map_location="cpu")
    if translate_function is not None:
        state = translate_function(state)
    if model is not None:
        model.load_state_dict(state, strict=strict)
    content = root / f"user_content_{tag}.pt"
    return _load(content) if content.exists() else None


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
        part = _load(f, map_location="cpu")
        part.pop(PARTIAL_KEY, None)
        merged.update(part)
    return merged
