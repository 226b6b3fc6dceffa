"""What the supervisor calls while it runs a plan, and how it sees ranks it did not spawn.

:class:`SupervisorHook`: ``prepare`` each process spec before it starts, ``on_start`` once all
started, ``on_output`` for every line, ``on_exit`` for every exit, ``poll`` every 0.2 s or sooner (a
returned failure ends the job), and ``close`` at the end. The stall watchdog
(:mod:`smlaunch.runtime.supervision.watchdog`) and fault injection
(:mod:`smlaunch.runtime.supervision.fault_injector`) are hooks.

:class:`RankRegistry` is the hook that lets them see ranks the supervisor did not spawn (``mpirun``'s
children): it puts ``smlaunch/rank/_site`` on each rank's ``PYTHONPATH`` and gives it a private
directory where each rank registers ``<pid>.json`` (:mod:`smlaunch.rank.boot`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from smlaunch.contract.artifact_tree import read_regular, write_file
from smlaunch.contract.processes import pid_alive
from smlaunch.rank.boot import BOOT_DIR as _BOOT_DIR
from smlaunch.rank.boot import LIVE_SUFFIX, RANK_DIR_ENV
from smlaunch.runtime.launchers.base import ProcessSpec, RankFailure

BOOT_DIR = Path(_BOOT_DIR)
REGISTRATION_MAX_BYTES = 64 * 1024
"""A rank's registration (``<pid>.json``, a few dozen bytes) larger than this is not read."""

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

    def on_output(self, label: str, lines: int = 1) -> None:
        """A process printed ``lines`` lines (``label`` after any ``split_line``: ``rank 3``); the
        supervisor reports a chunk of lines at once."""

    def on_exit(self, label: str, exit_code: int) -> None:
        """A process started by the supervisor exited."""

    def poll(self) -> RankFailure | None:
        """Called every 0.2 s or sooner; a returned failure ends the job as the root cause."""
        return None

    def close(self) -> None:
        """The run is over (also after errors)."""


@dataclass(frozen=True)
class RankInfo:
    """A rank as it registered itself (see :mod:`smlaunch.rank.boot`)."""

    pid: int
    rank: int | None
    host: str | None
    time: float

    @property
    def name(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{who} ({self.host}, pid {self.pid})" if self.host else f"{who} (pid {self.pid})"


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
            try:  # the ranks write here: a FIFO or a link in a registration's place is not read
                data = json.loads(read_regular(self.dir, path.name, REGISTRATION_MAX_BYTES))
                info = RankInfo(int(data["pid"]), data.get("rank"), data.get("host"), float(data["time"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if info.rank is None and info.pid in self._spawned:
                info = replace(info, rank=self._spawned[info.pid], host=info.host or self.host)
            if not pid_alive(info.pid):
                continue
            key = (info.host, info.rank, info.pid if info.rank is None else -1)
            if key not in found or info.time < found[key].time:
                found[key] = info
        return sorted(found.values(), key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))

    def live_ranks(self) -> set[int]:
        """Ranks that reached their first collective (``<pid>.live``,
        :func:`smlaunch.rank.boot.mark_live`)."""
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
        # The ranks write here too: a link left in the file's place is replaced, not followed.
        write_file(self.dir, f"{pid}.fault", json.dumps(dict(action)).encode("utf-8"))

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
