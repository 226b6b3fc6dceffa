"""Fault injection for local runs: rehearse what production will do to a training script.

Give a local session ``faults`` (``LocalSession(faults=[...])``, the config file's ``faults``, or
``SMLAUNCH_FAULTS``; a job's ``environment={"SMLAUNCH_FAULTS": ...}`` for one job): the hosts get
it as ``SMLAUNCH_FAULTS``, a JSON list of faults; each host's supervisor applies the ones meant
for it::

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
lines (a script printing once per step faults at a given step; rank faults only; output is read
in chunks, so lines printed in the same burst may get through first);
``exit_code`` (``crash`` only, 1..255); ``attempt`` (``spot`` only, >= 1). Unknown fields are errors.

``crash`` and ``hang`` are carried out inside the rank by :mod:`smlaunch.rank.boot` (a SIGUSR2 handler
that reads the action the supervisor wrote), so the stack shows the user's code at that moment; a
rank that is not a Python process cannot crash or hang on request (``kill`` works for any process).

This module is the *specification* (:class:`Fault`, :func:`parse_faults`): part of the shared layer
(see :mod:`smlaunch.contract`), parsed in the notebook so that a typo fails before anything is staged. The
hosts carry the faults out with :class:`smlaunch.runtime.supervision.fault_injector.FaultInjector`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError

FAULT_KINDS = ("crash", "hang", "kill", "kill_host", "spot")
RANK_KINDS = ("crash", "hang", "kill")
JOB_KINDS = ("spot",)
"""Faults the local backend's agent carries out for the whole job; host supervisors skip them."""
_FIELDS = {"kind", "host", "rank", "after_seconds", "after_lines", "exit_code", "attempt"}


@dataclass(frozen=True)
class Fault:
    """One fault to inject, as one entry of ``SMLAUNCH_FAULTS`` describes it (fields: see above)."""

    kind: str
    host: str | None = None
    rank: int | None = None
    after_seconds: float = 0.0
    exit_code: int = 1
    after_lines: int | None = None
    attempt: int = 1

    def describe(self) -> str:
        """One line for the log: ``crash of rank 1 with exit code 7 after 3 s``."""
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
                raise _bad(
                    raw,
                    f"{where}: spot counts a rank's lines: give rank and after_lines together",
                    'e.g. {"kind": "spot", "rank": 0, "after_lines": 40}, or only after_seconds',
                )
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
