"""Every rank's Python stack, read from outside, and where in the user's code each rank was.

:func:`dump_stacks` uses ``py-spy dump`` when it is installed (it reads a process from outside, even
one stuck in C code), else ``faulthandler``, which every rank registers on SIGUSR1 at start
(:mod:`smlaunch.rank.boot`). :func:`where` names the innermost frame of the user's code in a dump's
main thread (``train.py:42 in train_step``). Used by the stall watchdog
(:mod:`smlaunch.runtime.supervision.watchdog`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from smlaunch.contract.artifact_tree import read_regular
from smlaunch.runtime.supervision.hooks import RankInfo, RankRegistry

STACK_DUMPERS = ("auto", "py-spy", "faulthandler")
PY_SPY_TIMEOUT_SECONDS = 20.0
FAULTHANDLER_WAIT_SECONDS = 5.0
STACK_MAX_BYTES = 4 << 20
"""Of what faulthandler wrote for one rank, what is read (a dump of every thread: a few KiB)."""


def _py_spy() -> str | None:
    return shutil.which("py-spy")


def _dump_py_spy(py_spy: str, pid: int) -> str | None:
    try:
        done = subprocess.run(
            [py_spy, "dump", "--full-filenames", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=PY_SPY_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return done.stdout


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _dump_faulthandler(registry: RankRegistry, pids: Sequence[int]) -> dict[int, str]:
    """SIGUSR1 to every registered rank, then read what faulthandler wrote (bounded wait)."""
    sizes: dict[int, int] = {}
    for pid in pids:
        sizes[pid] = _size(registry.stack_file(pid))
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + FAULTHANDLER_WAIT_SECONDS
    last: dict[int, int] = {}
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = {p: _size(registry.stack_file(p)) for p in pids}
        if all(now[p] > sizes[p] for p in pids) and now == last:
            break
        last = now
    out: dict[int, str] = {}
    for pid in pids:
        try:  # the rank can replace its stack file: a FIFO or a link there is not read
            stack = registry.stack_file(pid)
            text = read_regular(stack.parent, stack.name, STACK_MAX_BYTES, sizes[pid]).decode(
                errors="replace"
            )
        except OSError:
            text = ""
        if text.strip():
            out[pid] = text
    return out


def dump_stacks(
    registry: RankRegistry, ranks: Sequence[RankInfo], method: str = "auto"
) -> tuple[str, dict[int, str]]:
    """The Python stacks of ``ranks`` by pid, and the tool that produced them.

    ``method``: ``py-spy``, ``faulthandler``, or ``auto`` (py-spy when installed, faulthandler for
    any rank py-spy could not read).
    """
    stacks: dict[int, str] = {}
    used = "faulthandler"
    py_spy = _py_spy() if method in ("auto", "py-spy") else None
    if py_spy is not None:
        used = "py-spy"
        results: dict[int, str | None] = {}
        threads = [
            threading.Thread(target=lambda p=r.pid: results.__setitem__(p, _dump_py_spy(py_spy, p)))
            for r in ranks
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PY_SPY_TIMEOUT_SECONDS + 5)
        stacks = {pid: text for pid, text in results.items() if text}
    missing = [r.pid for r in ranks if r.pid not in stacks]
    if missing and method != "py-spy":
        stacks.update(_dump_faulthandler(registry, missing))
        if py_spy is not None and len(missing) < len(ranks):
            used = "py-spy, faulthandler"
        elif py_spy is not None:
            used = "faulthandler"
    return used, stacks


_PY_SPY_FRAME = re.compile(r"^\s+(?P<func>.+?) \((?P<file>.+):(?P<line>\d+)\)\s*$")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_THREAD_HEAD = re.compile(r"^(Thread |Current thread |Process )")


def _threads(text: str) -> list[list[tuple[str, int, str]]]:
    """Frames per thread, innermost first, from a py-spy or faulthandler dump."""
    threads: list[list[tuple[str, int, str]]] = []
    current: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        if _THREAD_HEAD.match(line):
            current = []
            threads.append(current)
            continue
        match = _PY_SPY_FRAME.match(line) or _FAULTHANDLER_FRAME.match(line)
        if match and current is not None:
            current.append((match["file"], int(match["line"]), match["func"]))
    return [t for t in threads if t]


def _is_user_file(name: str, root: Path) -> bool:
    if name.startswith("<"):
        return False
    if os.path.isabs(name):
        return Path(name).is_relative_to(root)
    return (root / name).is_file()  # faulthandler keeps the script path as it was given


def where(stack_text: str, code_dir: str | Path | None = None) -> str:
    """Where a rank was: the innermost frame of the user's code in its main thread.

    The main thread is the one running a module body (``<module>``); the user's code is what lives
    under ``code_dir`` (any frame when none does). Returns ``file:line in function``.
    """
    threads = _threads(stack_text)
    if not threads:
        return "no Python stack available"
    main = next((t for t in threads if any(f[2] == "<module>" for f in t)), threads[0])
    root = Path(code_dir).resolve() if code_dir else None
    chosen = main[0]
    if root is not None:
        for frame in main:
            if _is_user_file(frame[0], root):
                chosen = frame
                break
    file, line, func = chosen
    if root is not None and os.path.isabs(file) and Path(file).is_relative_to(root):
        file = os.path.relpath(file, root)
    innermost = main[0]
    suffix = ""
    if innermost != chosen:
        suffix = f" (inside {innermost[2]} at {Path(innermost[0]).name}:{innermost[1]})"
    return f"{file}:{line} in {func}{suffix}"


# --- the watchdog --------------------------------------------------------------------------------
