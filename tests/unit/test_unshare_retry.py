"""``enter_namespace`` asks ``unshare(2)`` again while it answers EINVAL (a passing refusal CI has
seen in a single-threaded forked child), and raises any other error, or an EINVAL that lasts, naming
the call. Driven through a stand-in C library: nothing here changes this process's namespaces."""

from __future__ import annotations

import ctypes
import errno
from typing import Any

import pytest

from smlaunch.contract import mounts


class ScriptedLibc:
    """``unshare`` fails with each errno of ``refusals`` in turn, then succeeds; ``mount`` succeeds."""

    def __init__(self, *refusals: int) -> None:
        self.refusals = list(refusals)
        self.calls: list[str] = []

    def unshare(self, flags: int) -> int:
        self.calls.append(f"unshare {flags:#x}")
        if self.refusals:
            ctypes.set_errno(self.refusals.pop(0))
            return -1
        return 0

    def mount(self, *arguments: Any) -> int:
        self.calls.append("mount")
        return 0


@pytest.fixture(autouse=True)
def _as_root_without_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Root's path (no uid maps to write) and the waits recorded instead of slept."""
    monkeypatch.setattr(mounts.os, "geteuid", lambda: 0)
    waits: list[float] = []
    monkeypatch.setattr(mounts.time, "sleep", waits.append)
    return waits


def test_a_passing_einval_is_asked_again_and_the_namespace_made(
    _as_root_without_waiting: list[float],
) -> None:
    libc = ScriptedLibc(errno.EINVAL, errno.EINVAL)
    mounts.enter_namespace(libc)  # type: ignore[arg-type]
    assert libc.calls == [f"unshare {mounts.CLONE_NEWNS:#x}"] * 3 + ["mount"]
    assert _as_root_without_waiting == [0.01, 0.02]


def test_an_einval_that_lasts_is_raised_after_every_try(_as_root_without_waiting: list[float]) -> None:
    libc = ScriptedLibc(*[errno.EINVAL] * mounts.UNSHARE_TRIES)
    with pytest.raises(OSError, match="unshare: Invalid argument") as raised:
        mounts.enter_namespace(libc)  # type: ignore[arg-type]
    assert raised.value.errno == errno.EINVAL
    assert len(libc.calls) == mounts.UNSHARE_TRIES and "mount" not in libc.calls
    assert sum(_as_root_without_waiting) < 6


def test_any_other_refusal_is_raised_at_once(_as_root_without_waiting: list[float]) -> None:
    libc = ScriptedLibc(errno.EPERM)
    with pytest.raises(OSError, match="unshare: Operation not permitted"):
        mounts.enter_namespace(libc)  # type: ignore[arg-type]
    assert len(libc.calls) == 1 and _as_root_without_waiting == []
