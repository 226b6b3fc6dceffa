"""Hang detection: when a job stalls, dump every rank's Python stack, then end the job saying where
each rank was.

A distributed job that hangs (one rank stuck in a collective its peers never reach, a deadlocked
data loader) burns its whole ``max_run`` and tells the user nothing. The watchdog ends it early and
explains it. It fires when, on this host, **no process has exited, the job has not finished, and no
rank has written a line of output for the stall timeout** (``SMLAUNCH_STALL_TIMEOUT_SECONDS``; off
unless set, because a legitimately quiet script must not be killed by default). The stall is
counted only once **every rank of the host is under way**: it printed its first line, or reached its
first collective (``init_process_group``; :mod:`runtime.rankboot` marks it). Time a rank spends
starting (``import torch`` on a busy machine can take longer than any stall timeout) is never a
stall; a rank that neither prints nor reaches a collective is never considered stalled. Then it:

1. dumps the Python stack of every rank of the host: with ``py-spy dump`` when it is installed
   (it reads a process from outside, even one stuck in C code), else through ``faulthandler``,
   which every rank registers on SIGUSR1 at start (:mod:`runtime.rankboot`);
2. writes the dumps to ``output/data/smlaunch-stacks-<host>.txt`` (so they land in the job's
   ``output.tar.gz``) and to the log;
3. ends the job like a failing rank would (SIGTERM to every rank, SIGKILL after the fail-fast
   grace), with exit code :data:`STALL_EXIT_CODE` and a failure reason that names, per rank, the
   innermost frame of the user's code in its main thread (``rank 1: train.py:42 in train_step``).

The mechanics are hooks the :class:`~runtime.supervisor.Supervisor` calls (:class:`SupervisorHook`):
``prepare`` each process spec before it starts, ``on_start`` once all started, ``on_output`` for every
line, ``on_exit`` for every exit, ``poll`` about once a second (a returned failure ends the job), and
``close`` at the end. :class:`RankRegistry` is the hook that lets the supervisor see ranks it did not
spawn (``mpirun``'s children): it puts ``runtime/_rankboot`` on each rank's ``PYTHONPATH`` and gives
it a private directory where each rank registers ``<pid>.json``. :mod:`runtime.fault_injector` uses it too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runtime import contract
from runtime.rankboot import BOOT_DIR as _BOOT_DIR
from runtime.rankboot import LIVE_SUFFIX, RANK_DIR_ENV
from runtime.supervisor import RankFailure

if TYPE_CHECKING:
    from runtime.launchers.base import ProcessSpec

STALL_EXIT_CODE = 124
"""Exit code of a host whose job the watchdog ended (as ``timeout(1)`` reports a timeout)."""

STACK_DUMPERS = ("auto", "py-spy", "faulthandler")
BOOT_DIR = Path(_BOOT_DIR)
PY_SPY_TIMEOUT_SECONDS = 20.0
FAULTHANDLER_WAIT_SECONDS = 5.0

Log = Callable[[str], None]


@dataclass(frozen=True)
class StartedProcess:
    """A process the supervisor started (its process group id is its pid)."""

    label: str
    rank: int | None
    pid: int


class SupervisorHook:
    """Something the supervisor calls while it runs a plan. Every method is optional (no-op here).

    Hooks run on the supervisor's threads: ``on_output`` on output reader threads (must be cheap
    and thread-safe), the others on the supervisor loop.
    """

    def prepare(self, spec: ProcessSpec) -> ProcessSpec:
        """The spec to start instead of ``spec`` (e.g. with more environment)."""
        return spec

    def on_start(self, processes: Sequence[StartedProcess]) -> None:
        """Every process of the plan has been started."""

    def on_output(self, label: str) -> None:
        """A process printed a line (``label`` after any ``split_line``: ``rank 3``)."""

    def on_exit(self, label: str, exit_code: int) -> None:
        """A process started by the supervisor exited."""

    def poll(self) -> RankFailure | None:
        """Called about once a second; a returned failure ends the job as the root cause."""
        return None

    def close(self) -> None:
        """The run is over (also after errors)."""


@dataclass(frozen=True)
class RankInfo:
    """A rank as it registered itself (see :mod:`runtime.rankboot`)."""

    pid: int
    rank: int | None
    host: str | None
    time: float

    @property
    def name(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{who} ({self.host}, pid {self.pid})" if self.host else f"{who} (pid {self.pid})"


def _alive(pid: int) -> bool:
    try:
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


class RankRegistry(SupervisorHook):
    """A private directory where this host's ranks register; puts the rank bootstrap on their path."""

    def __init__(self, parent: str | Path | None = None, host: str | None = None) -> None:
        self._parent = parent
        self._dir: Path | None = None
        self.host = host
        self._spawned: dict[int, int | None] = {}

    def on_start(self, processes: Sequence[StartedProcess]) -> None:
        # A process the supervisor spawned is known by pid even when it sets no RANK (one plain
        # process per host): its registration gets the spec's rank and this host.
        self._spawned = {p.pid: p.rank for p in processes}

    @property
    def dir(self) -> Path:
        """Created on first use (a host that starts no process leaves nothing behind)."""
        if self._dir is None:
            try:
                self._dir = Path(tempfile.mkdtemp(prefix=".smlaunch-ranks-", dir=self._parent))
            except OSError:  # an unwritable parent: the system's temp dir will do
                self._dir = Path(tempfile.mkdtemp(prefix="smlaunch-ranks-"))
        return self._dir

    def prepare(self, spec: ProcessSpec) -> ProcessSpec:
        env = dict(spec.env)
        env[RANK_DIR_ENV] = str(self.dir)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), path] if path else [str(BOOT_DIR)])
        return replace(spec, env=env)

    def ranks(self) -> list[RankInfo]:
        """Live registered ranks, one per (host, rank): the first process that registered it (a rank's
        own Python subprocesses register too, later)."""
        found: dict[tuple[str | None, int | None, int], RankInfo] = {}
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                info = RankInfo(int(data["pid"]), data.get("rank"), data.get("host"), float(data["time"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if info.rank is None and info.pid in self._spawned:
                info = replace(info, rank=self._spawned[info.pid], host=info.host or self.host)
            if not _alive(info.pid):
                continue
            key = (info.host, info.rank, info.pid if info.rank is None else -1)
            if key not in found or info.time < found[key].time:
                found[key] = info
        return sorted(found.values(), key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))

    def live_ranks(self) -> set[int]:
        """Ranks that reached their first collective (``<pid>.live``, :func:`runtime.rankboot.mark_live`)."""
        live = {path.name[: -len(LIVE_SUFFIX)] for path in self.dir.glob(f"*{LIVE_SUFFIX}")}
        return {info.rank for info in self.ranks() if info.rank is not None and str(info.pid) in live}

    def find(self, rank: int, host: str | None = None) -> RankInfo | None:
        for info in self.ranks():
            if info.rank == rank and (host is None or info.host is None or info.host == host):
                return info
        return None

    def stack_file(self, pid: int) -> Path:
        return self.dir / f"{pid}.stack"

    def write_fault(self, pid: int, action: Mapping[str, object]) -> None:
        path = self.dir / f"{pid}.fault"
        path.write_text(json.dumps(dict(action)), encoding="utf-8")

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


# --- stack dumps ---------------------------------------------------------------------------------


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
        try:
            with open(registry.stack_file(pid), encoding="utf-8", errors="replace") as handle:
                handle.seek(sizes[pid])
                text = handle.read()
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
_RANK_LABEL = re.compile(r"(?:^|/)rank (\d+)$")


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


@dataclass
class StallFailure(RankFailure):
    """A job the watchdog ended: label ``watchdog``, no rank, exit code :data:`STALL_EXIT_CODE`;
    ``stderr_tail`` holds one ``rank N (host, pid): where`` line per rank."""

    summary: str = ""

    def describe(self) -> str:
        return "\n".join([self.summary, *self.stderr_tail])


class StallWatchdog(SupervisorHook):
    """Ends a stalled job with every rank's stack (see the module docstring)."""

    def __init__(
        self,
        host: str,
        registry: RankRegistry,
        stall_timeout: float,
        log: Log,
        output_dir: str | Path | None = None,
        code_dir: str | Path | None = None,
        dumper: str = "auto",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stall_timeout <= 0:
            raise ValueError(f"stall_timeout={stall_timeout}: must be > 0 seconds")
        if dumper not in STACK_DUMPERS:
            raise ValueError(f"dumper={dumper!r}: must be one of {STACK_DUMPERS}")
        self.host = host
        self.registry = registry
        self.stall_timeout = stall_timeout
        self.log = log
        self.output_dir = Path(output_dir) if output_dir else None
        self.code_dir = code_dir
        self.dumper = dumper
        self.clock = clock
        self._last_output: float | None = None
        self._spawned_ranks: set[int] = set()
        self._printed: set[int] = set()
        self._under_way_at: float | None = None
        self._exited = False
        self._fired = False

    def on_start(self, processes: Sequence[StartedProcess]) -> None:
        self._spawned_ranks = {p.rank for p in processes if p.rank is not None}

    def on_output(self, label: str) -> None:
        self._last_output = self.clock()
        match = _RANK_LABEL.search(label)
        if match:
            self._printed.add(int(match[1]))

    def on_exit(self, label: str, exit_code: int) -> None:
        self._exited = True

    def _under_way(self) -> bool:
        """Every rank known on this host (spawned or registered) printed or reached a collective."""
        if self._under_way_at is None:
            known = self._spawned_ranks | {r.rank for r in self.registry.ranks() if r.rank is not None}
            if known and known <= self._printed | self.registry.live_ranks():
                self._under_way_at = self.clock()
        return self._under_way_at is not None

    def stalled(self) -> bool:
        if self._fired or self._exited or not self._under_way():
            return False
        assert self._under_way_at is not None
        quiet_since = max(self._last_output or self._under_way_at, self._under_way_at)
        return self.clock() - quiet_since >= self.stall_timeout

    def poll(self) -> RankFailure | None:
        if not self.stalled():
            return None
        self._fired = True
        ranks = self.registry.ranks()
        self.log(
            f"no output from any process for {self.stall_timeout:g} s and none has exited: the job "
            f"looks hung; dumping the Python stacks of {len(ranks)} rank(s)"
        )
        tool, stacks = dump_stacks(self.registry, ranks, self.dumper)
        lines: list[str] = []
        report: list[str] = [f"Python stacks of host {self.host}, taken with {tool}:"]
        for info in ranks:
            text = stacks.get(info.pid, "")
            lines.append(f"{info.name}: {where(text, self.code_dir) if text else 'no stack could be read'}")
            report.append(f"===== {info.name} =====")
            report.append(text.rstrip() or "(no stack could be read)")
        if not ranks:
            lines.append("no rank registered (not Python, or it never started)")
        target = None
        if self.output_dir is not None:
            try:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                target = self.output_dir / f"smlaunch-stacks-{self.host}.txt"
                target.write_text("\n".join(report) + "\n", encoding="utf-8")
            except OSError as error:
                self.log(f"could not write the stacks file: {error}")
                target = None
        for line in report:
            for part in line.splitlines() or [""]:
                self.log(f"stacks: {part}")
        summary = (
            f"Stalled: no process on host {self.host} wrote output for {self.stall_timeout:g} s "
            f"({contract.SMLAUNCH_STALL_TIMEOUT_SECONDS}) and none had exited; the job was ended. "
            f"Where each rank was ({tool}"
            + (f"; full stacks in {target.name} in the job's output" if target else "")
            + "):"
        )
        return StallFailure(self.host, "watchdog", None, STALL_EXIT_CODE, time.time(), lines, summary)


def hooks_from_environ(host: str, environ: Mapping[str, str], log: Log) -> list[SupervisorHook]:
    """The hooks a host's supervisor runs, from the environment: always the rank registry; the
    stall watchdog when ``SMLAUNCH_STALL_TIMEOUT_SECONDS`` is set (> 0); the fault injector when
    ``SMLAUNCH_FAULTS`` is set. Raises ``HostConfigurationError`` naming the variable on a bad value."""
    from runtime.errors import HostConfigurationError

    # Under the host's base dir (not /tmp): even a host that is SIGKILLed leaves nothing outside its
    # own tree, which the local backend removes with the job. Nothing below it is uploaded.
    registry = RankRegistry(environ.get(contract.BASE_DIR_ENV) or contract.DEFAULT_BASE_DIR, host=host)
    hooks: list[SupervisorHook] = [registry]
    try:
        raw = environ.get(contract.SMLAUNCH_STALL_TIMEOUT_SECONDS, "").strip()
        if raw:
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if timeout < 0:
                raise HostConfigurationError(
                    contract.SMLAUNCH_STALL_TIMEOUT_SECONDS,
                    raw,
                    "must be a number of seconds >= 0 (0 turns the stall watchdog off)",
                    "e.g. 600",
                )
            dumper = environ.get(contract.SMLAUNCH_STACK_DUMPER, "auto") or "auto"
            if dumper not in STACK_DUMPERS:
                raise HostConfigurationError(
                    contract.SMLAUNCH_STACK_DUMPER, dumper, f"must be one of {STACK_DUMPERS}", "e.g. auto"
                )
            if timeout > 0:
                paths = contract.Paths(environ.get(contract.BASE_DIR_ENV) or contract.DEFAULT_BASE_DIR)
                hooks.append(
                    StallWatchdog(
                        host,
                        registry,
                        timeout,
                        log,
                        output_dir=paths.output_data_dir,
                        code_dir=paths.code_dir,
                        dumper=dumper,
                    )
                )
        if environ.get(contract.SMLAUNCH_FAULTS, "").strip():
            from runtime.fault_injector import FaultInjector
            from runtime.faults import parse_faults

            hooks.append(FaultInjector(host, parse_faults(environ[contract.SMLAUNCH_FAULTS]), registry, log))
    except Exception:
        registry.close()
        raise
    return hooks
