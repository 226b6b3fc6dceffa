"""Carries out the ``SMLAUNCH_FAULTS`` meant for this host (the specification:
:mod:`smlaunch.contract.faults`).

A :class:`~smlaunch.runtime.supervision.hooks.SupervisorHook` the supervisor runs when ``SMLAUNCH_FAULTS`` is
set
(:func:`smlaunch.runtime.supervision.watchdog.hooks_from_environ`): timers (``after_seconds``) or line counts
(``after_lines``) started with the host's processes, then SIGKILL (``kill``, ``kill_host``) or an
action for :mod:`smlaunch.rank.boot` plus SIGUSR2 (``crash``, ``hang``). Runs on hosts only.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from smlaunch.contract.faults import JOB_KINDS, Fault
from smlaunch.runtime.supervision.hooks import Log, RankInfo, RankRegistry, StartedProcess, SupervisorHook

_RANK_LABEL = re.compile(r"rank (\d+)$")
REGISTRATION_WAIT_SECONDS = 10.0


class FaultInjector(SupervisorHook):
    """Applies the faults meant for this host's processes, on timers started with the processes."""

    def __init__(
        self,
        host: str,
        faults: Sequence[Fault],
        registry: RankRegistry,
        log: Log,
        kill: Callable[[int, int], None] = os.kill,
        kill_self: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.faults = [f for f in faults if f.kind not in JOB_KINDS]
        self.registry = registry
        self.log = log
        self._kill = kill
        self._kill_self = kill_self or (lambda: os.kill(os.getpid(), signal.SIGKILL))
        self._started: list[StartedProcess] = []
        self._timers: list[threading.Timer] = []
        self.applied: list[Fault] = []
        self._lines: dict[int, int] = {}
        self._lock = threading.Lock()

    def on_start(self, processes: Sequence[StartedProcess]) -> None:
        self._started = list(processes)
        for fault in self.faults:
            if fault.kind == "kill_host" and fault.host != self.host and not self._hosts_others():
                continue
            if fault.host is not None and fault.host != self.host and not self._hosts_others():
                continue
            if fault.after_lines is not None:
                continue  # fired by on_output
            timer = threading.Timer(fault.after_seconds, self._fire, args=(fault,))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)

    def on_output(self, label: str, lines: int = 1) -> None:
        found = _RANK_LABEL.search(label)
        if found is None or not any(f.after_lines is not None for f in self.faults):
            return
        rank = int(found.group(1))
        with self._lock:
            before = self._lines.get(rank, 0)
            count = self._lines[rank] = before + lines
        for fault in self.faults:  # fired once its count falls within this chunk of lines
            if fault.after_lines is not None and before < fault.after_lines <= count and fault.rank == rank:
                threading.Thread(target=self._fire, args=(fault,), daemon=True).start()

    def _hosts_others(self) -> bool:
        """Whether ranks of other hosts run under this supervisor (one mpirun serving every host)."""
        return any(p.rank is None for p in self._started)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def _signal(self, pid: int, signum: int) -> bool:
        try:
            self._kill(pid, signum)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def _find(self, fault: Fault) -> RankInfo | None:
        assert fault.rank is not None
        deadline = time.monotonic() + REGISTRATION_WAIT_SECONDS
        while True:
            info = self.registry.find(fault.rank, fault.host)
            if info is not None or time.monotonic() >= deadline:
                return info
            if not any(p.rank is None or p.rank == fault.rank for p in self._started):
                return None  # no process of this host can be that rank
            time.sleep(0.1)

    def _fire(self, fault: Fault) -> None:
        try:
            self._apply(fault)
        except Exception as error:  # a fault that cannot be applied must not break the job
            self.log(f"fault injection: could not apply {fault.describe()}: {error!r}")

    def _apply(self, fault: Fault) -> None:
        if fault.kind == "kill_host" and fault.host != self.host:
            # One mpirun here serves that emulated host: its ranks die with it.
            victims = [r for r in self.registry.ranks() if r.host == fault.host]
            self.log(
                f"fault injection: {fault.describe()}: SIGKILL to its {len(victims)} rank(s) run from here"
            )
            self.applied.append(fault)
            for victim in victims:
                self._signal(victim.pid, signal.SIGKILL)
            return
        if fault.kind == "kill_host":
            self.log(f"fault injection: {fault.describe()}: SIGKILL to every process of {self.host}")
            self.applied.append(fault)
            for proc in self._started:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.registry.close()
            self._kill_self()
            return
        info = self._find(fault)
        if info is None:
            if fault.host not in (None, self.host):
                return
            spawned = [p for p in self._started if p.rank == fault.rank]
            if fault.kind == "kill" and spawned and (fault.host in (None, self.host)):
                self.log(f"fault injection: {fault.describe()}: SIGKILL to pid {spawned[0].pid}")
                self.applied.append(fault)
                self._signal(spawned[0].pid, signal.SIGKILL)
            elif spawned:
                self.log(f"fault injection: {fault.describe()}: rank {fault.rank} is not a Python process")
            return
        if fault.kind == "kill":
            self.log(f"fault injection: {fault.describe()}: SIGKILL to {info.name}")
            self.applied.append(fault)
            self._signal(info.pid, signal.SIGKILL)
            return
        action: dict[str, Any] = {"kind": fault.kind}
        if fault.kind == "crash":
            action["exit_code"] = fault.exit_code
        self.registry.write_fault(info.pid, action)
        self.log(f"fault injection: {fault.describe()}: {info.name}")
        self.applied.append(fault)
        self._signal(info.pid, signal.SIGUSR2)
