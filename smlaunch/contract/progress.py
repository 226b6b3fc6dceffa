"""Progress of a transfer: a bar where someone watches, or a small file another process draws.

Used by :class:`smlaunch.contract.transfer.engine.TransferEngine` (every transfer of at least
:data:`PROGRESS_MIN_BYTES`), by the SDK's code packaging, and by the local backend, whose agent
publishes its channel downloads with :class:`ProgressFile` while the notebook following the job
draws them with :class:`ProgressBar`. Part of the shared layer (see :mod:`smlaunch.contract`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024

PROGRESS_MIN_BYTES = 64 * MiB
"""Transfers (and code archives) smaller than this show no progress bar and no summary line."""
PROGRESS_FILE_SECONDS = 0.25


def interactive_output() -> bool:
    """True where someone watches the output: stderr is a terminal, or this process is a Jupyter
    kernel (``ipykernel`` is loaded). Progress bars and their summary lines appear only then."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


class ProgressBar:
    """A byte counter drawn with ``tqdm.auto`` (a widget in Jupyter, text in a terminal), or one
    self-overwriting stderr line without tqdm. Disabled, it does nothing."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._total = total
        self._label = label
        self._bar: Any = None
        self._last = 0.0
        self._enabled = enabled
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=label,
            file=sys.stderr,
            leave=False,
        )

    def __call__(self, nbytes: int) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._done += nbytes
            if self._bar is not None:
                self._bar.update(nbytes)
                return
            now = time.monotonic()
            if now - self._last >= 0.5 or self._done >= self._total:
                self._last = now
                pct = 100.0 * self._done / self._total if self._total else 100.0
                sys.stderr.write(
                    f"\r{self._label}: {self._done / MiB:.1f}/{self._total / MiB:.1f} MiB ({pct:.0f}%)"
                )
                sys.stderr.flush()

    def close(self) -> None:
        """Remove the bar."""
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def report(self, summary: str) -> None:
        """Print the one-line summary that replaces a closed bar."""
        if self._enabled:
            sys.stderr.write(summary + "\n")
            sys.stderr.flush()


class ProgressFile:
    """A transfer's progress published as a small JSON file for another process to draw: the local
    backend's agent downloads channels, and the notebook following the job shows the bar.

    ``{"id": ..., "label": ..., "total": bytes, "done": bytes, "closed": bool, "summary": str}``,
    rewritten atomically at most every :data:`PROGRESS_FILE_SECONDS` and when the transfer ends.
    """

    def __init__(self, path: Path, total: int, label: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            "id": f"{os.getpid()}-{time.time_ns()}",
            "label": label,
            "total": total,
            "done": 0,
            "closed": False,
            "summary": "",
        }
        self._last = 0.0
        self._write()

    def _write(self) -> None:
        tmp = self._path.with_name(f".{self._path.name}.{threading.get_ident()}")
        tmp.write_text(json.dumps(self._state))
        os.replace(tmp, self._path)

    def __call__(self, nbytes: int) -> None:
        with self._lock:
            self._state["done"] += nbytes
            now = time.monotonic()
            if now - self._last >= PROGRESS_FILE_SECONDS:
                self._last = now
                self._write()

    def close(self) -> None:
        with self._lock:
            self._write()

    def report(self, summary: str) -> None:
        with self._lock:
            self._state.update(closed=True, summary=summary)
            self._write()
