"""Fault injection for local runs: rehearse what production will do to a training script.

Set ``SMLAUNCH_FAULTS`` (in a local job: ``LocalSession(..., environment=...)`` or the estimator's
``environment``) to a JSON list of faults; each host's supervisor applies the ones meant for it::

    [{"kind": "crash", "rank": 1, "after_seconds": 3, "exit_code": 7},
     {"kind": "hang", "host": "algo-2", "rank": 3, "after_seconds": 5},
     {"kind": "kill", "rank": 2, "after_seconds": 4},
     {"kind": "kill_host", "host": "algo-2", "after_seconds": 10},
     {"kind": "spot", "rank": 0, "after_lines": 40}]

Kinds:

- ``crash``: the rank prints where it was and exits with ``exit_code`` (default 1), as a script that
  raised would. Expect: the job Failed, the reason naming that host, rank and code, every other rank
  ended within seconds.
- ``hang``: the rank's main thread stops where it is, forever (a deadlock, a lost peer). Expect:
  its peers block in their next collective; with ``SMLAUNCH_STALL_TIMEOUT_SECONDS`` set, the
  watchdog dumps every stack and ends the job saying where each rank was; otherwise ``max_run``.
- ``kill``: SIGKILL to the rank (the kernel's OOM killer). Expect exit code 137.
- ``kill_host``: SIGKILL to every process of the host, its runtime included (an instance that
  vanished). Expect the local backend to fail the job and end the other hosts.
- ``spot``: a spot interruption of the whole job (managed-spot jobs only), carried out by the local
  backend's agent, not by a host: the same as ``stop(reason="spot")`` at that moment. Expect every
  host SIGTERMed (the script may checkpoint within the stop grace), then a new attempt on fresh
  hosts with the checkpoints restored. ``attempt`` (default 1) is the attempt it interrupts, so a
  rehearsal can interrupt the first attempt, or the first and the second, and still finish.

Fields: ``kind`` (required); ``rank``: the global rank as shown in ``[algo-N/rank R]`` (required for
``crash``, ``hang``, ``kill``; without a distribution every host's one process is rank 0, so name
the host too); ``host``: ``algo-N`` (required for ``kill_host``; optional for the
others, where it must be the rank's host); ``after_seconds`` (default 0): counted from the moment
the host started its processes; or instead ``after_lines``: when the rank has printed that many
lines (a script printing once per step faults at a given step; rank faults only);
``exit_code`` (``crash`` only, 1..255); ``attempt`` (``spot`` only, >= 1). Unknown fields are errors.

``crash`` and ``hang`` are carried out inside the rank by :mod:`runtime.rankboot` (a SIGUSR2 handler
that reads the action the supervisor wrote), so the stack shows the user's code at that moment; a
rank that is not a Python process cannot crash or hang on request (``kill`` works for any process).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime import contract
from runtime.environment import HostConfigurationError
from runtime.watchdog import Log, RankInfo, RankRegistry, StartedProcess, SupervisorHook

FAULT_KINDS = ("crash", "hang", "kill", "kill_host", "spot")
RANK_KINDS = ("crash", "hang", "kill")
JOB_KINDS = ("spot",)
"""Faults the local backend's agent carries out for the whole job; host supervisors skip them."""
_FIELDS = {"kind", "host", "rank", "after_seconds", "after_lines", "exit_code", "attempt"}
_RANK_LABEL = re.compile(r"rank (\d+)$")
REGISTRATION_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Fault:
    kind: str
    host: str | None = None
    rank: int | None = None
    after_seconds: float = 0.0
    exit_code: int = 1
    after_lines: int | None = None
    attempt: int = 1

    def describe(self) -> str:
        if self.kind == "spot":
            who = f"attempt {self.attempt}" + (f", rank {self.rank}" if self.rank is not None else "")
        else:
            who = f"host {self.host}" if self.kind == "kill_host" else f"rank {self.rank}"
        if self.kind != "kill_host" and self.host:
            who += f" on {self.host}"
        extra = f" with exit code {self.exit_code}" if self.kind == "crash" else ""
        when = f"{self.after_lines} lines" if self.after_lines is not None else f"{self.after_seconds:g} s"
        return f"{self.kind} of {who}{extra} after {when}"


def _bad(value: object, problem: str, fix: str) -> HostConfigurationError:
    return HostConfigurationError(contract.SMLAUNCH_FAULTS, value, problem, fix)


def parse_faults(raw: str) -> list[Fault]:
    """Validate ``SMLAUNCH_FAULTS`` text; raises HostConfigurationError naming the bad entry."""
    example = '[{"kind": "crash", "rank": 1, "after_seconds": 3, "exit_code": 7}]'
    try:
        data = json.loads(raw)
    except ValueError:
        raise _bad(raw, "is not JSON", f"write a JSON list, e.g. {example}") from None
    if not isinstance(data, list):
        raise _bad(raw, "must be a JSON list of fault objects", f"e.g. {example}")
    faults: list[Fault] = []
    for index, item in enumerate(data):
        where = f"entry {index} ({json.dumps(item)})"
        if not isinstance(item, dict):
            raise _bad(raw, f"{where} is not an object", f"e.g. {example}")
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise _bad(raw, f"{where} has unknown field(s) {unknown}", f"use only {sorted(_FIELDS)}")
        kind = item.get("kind")
        if kind not in FAULT_KINDS:
            raise _bad(raw, f"{where}: kind={kind!r} is not one of {FAULT_KINDS}", "pick one of them")
        host = item.get("host")
        if host is not None and (not isinstance(host, str) or not host):
            raise _bad(raw, f"{where}: host={host!r} must be a host name", 'e.g. "algo-2"')
        rank = item.get("rank")
        if kind in RANK_KINDS:
            if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
                raise _bad(raw, f"{where}: {kind} needs rank >= 0, got {rank!r}", 'add "rank": 0')
        elif kind == "spot":
            if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
                raise _bad(raw, f"{where}: rank={rank!r} must be an integer >= 0", 'e.g. "rank": 0')
            if (rank is None) != (item.get("after_lines") is None):
                raise _bad(raw, f"{where}: spot counts a rank's lines: give rank and after_lines together",
                           'e.g. {"kind": "spot", "rank": 0, "after_lines": 40}, or only after_seconds')
        elif rank is not None:
            raise _bad(raw, f"{where}: kill_host takes no rank", 'drop "rank" or use kind "kill"')
        if kind == "kill_host" and host is None:
            raise _bad(raw, f"{where}: kill_host needs a host", 'add "host": "algo-2"')
        after = item.get("after_seconds", 0)
        if not isinstance(after, (int, float)) or isinstance(after, bool) or after < 0:
            raise _bad(raw, f"{where}: after_seconds={after!r} must be a number >= 0", '"after_seconds": 3')
        lines = item.get("after_lines")
        if lines is not None:
            if not isinstance(lines, int) or isinstance(lines, bool) or lines < 1:
                raise _bad(
                    raw, f"{where}: after_lines={lines!r} must be an integer >= 1", '"after_lines": 50'
                )
            if "after_seconds" in item or kind == "kill_host":
                raise _bad(
                    raw, f"{where}: after_lines is for rank faults, without after_seconds", "give one trigger"
                )
        code = item.get("exit_code", 1)
        if "exit_code" in item and kind != "crash":
            raise _bad(raw, f"{where}: exit_code applies to kind crash only", 'drop "exit_code"')
        if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= 255:
            raise _bad(raw, f"{where}: exit_code={code!r} must be in 1..255", '"exit_code": 7')
        attempt = item.get("attempt", 1)
        if "attempt" in item and kind != "spot":
            raise _bad(raw, f"{where}: attempt applies to kind spot only", 'drop "attempt"')
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise _bad(raw, f"{where}: attempt={attempt!r} must be an integer >= 1", '"attempt": 1')
        faults.append(Fault(kind, host, rank, float(after), code, lines, attempt))
    return faults


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

    def on_output(self, label: str) -> None:
        found = _RANK_LABEL.search(label)
        if found is None or not any(f.after_lines is not None for f in self.faults):
            return
        rank = int(found.group(1))
        with self._lock:
            count = self._lines[rank] = self._lines.get(rank, 0) + 1
        for fault in self.faults:
            if fault.after_lines == count and fault.rank == rank:
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
            for info in victims:
                self._signal(info.pid, signal.SIGKILL)
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
