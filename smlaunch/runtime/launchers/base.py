"""What a launch strategy hands the supervisor, and what the supervisor hands back: pure data.

A strategy (:class:`~smlaunch.runtime.launchers.launcher.Launcher`) turns an
:class:`~smlaunch.runtime.environment.Environment` into a :class:`LaunchPlan`: the exact processes to
start on this host (:class:`ProcessSpec`), with argv (never a shell string), environment and working
directory. The supervisor (:mod:`smlaunch.runtime.supervision.supervisor`) runs it and returns a
:class:`RunResult`: every :class:`ProcessExit` and the host's :class:`RankFailure`, which the
supervision hooks (watchdog, fault injection) also return and the report writes.

These values sit below both the launchers and the supervision modules, as torchelastic keeps
``WorkerSpec`` and ``RunResult`` in its ``api.py``, so that neither side imports the other to name
them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from smlaunch.runtime.tracebacks import failure_summary

LineSplitter = Callable[[str], "tuple[str | None, str]"]
"""Maps one raw output line to (rank label or None, text). Used for multiplexed output such as
``mpirun --tag-output``, where one process prints for many ranks."""


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start on this host."""

    label: str
    """How its lines are prefixed after the host: ``rank 3`` gives ``[algo-1/rank 3]``."""
    argv: list[str]
    env: dict[str, str]
    cwd: str
    rank: int | None = None
    """Global rank, when the process is exactly one rank; None for a launcher process (mpirun)."""
    split_line: LineSplitter | None = None
    signalled_with_host: bool = False
    """The scheduler signals this process itself whenever it signals the host (Slurm signals every
    process of a step): a stop is not forwarded to it a second time (``mpirun`` aborts at once,
    SIGKILL to every rank, on a second SIGTERM)."""


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a host will start, plus the resolved topology logged before anything starts."""

    launcher: str
    processes: list[ProcessSpec]
    topology: dict[str, Any] = field(default_factory=dict)
    """Resolved launch configuration, logged as one block in verbose mode (``SMLAUNCH_VERBOSE``):
    hosts, ranks per host, world size, master address and port, process-group backend, command."""
    summary: str = ""
    """What this host starts, in a few words (``ranks 0-1 of 4 on host 1 of 2, gloo``): the host's
    one line, ``launcher: <launcher>, <summary>``, when not verbose."""

    def record(self) -> dict[str, Any]:
        """The plan as JSON-ready data: launcher, summary, topology and each process's label and
        argv (its environment left out: it may hold secrets)."""
        return {
            "launcher": self.launcher,
            "summary": self.summary,
            "topology": {
                key: value if isinstance(value, (int, float)) else str(value)
                for key, value in self.topology.items()
            },
            "processes": [{"label": spec.label, "argv": list(spec.argv)} for spec in self.processes],
        }


def ranks_text(first: int, count: int, world: int) -> str:
    """``rank 3 of 4`` or ``ranks 2-3 of 4``: a host's consecutive global ranks."""
    if count == 1:
        return f"rank {first} of {world}"
    return f"ranks {first}-{first + count - 1} of {world}"


@dataclass
class ProcessExit:
    """How one supervised process ended."""

    label: str
    rank: int | None
    exit_code: int
    time: float
    """``time.time()`` when the supervisor saw the exit."""


@dataclass
class RankFailure:
    """The first process of this host that exited non-zero: the job's root cause on this host."""

    host: str
    label: str
    rank: int | None
    exit_code: int
    time: float
    stderr_tail: list[str]
    """The last lines of its stderr; starts at the last Python traceback when there is one."""

    @property
    def error_message(self) -> str:
        """The exception it died of (``ValueError: boom``), whatever followed on stderr; for a
        process that is not Python, its last stderr line
        (:func:`smlaunch.runtime.tracebacks.failure_summary`)."""
        return failure_summary(self.stderr_tail, self.exit_code)

    def describe(self) -> str:
        """Failure text: host, rank, exit code first (FailureReason keeps 1024 chars), then stderr."""
        who = f"rank {self.rank}" if self.rank is not None else self.label
        signal_note = ""
        if self.exit_code > 128:
            try:
                signal_note = f" (killed by {signal.Signals(self.exit_code - 128).name})"
            except ValueError:
                signal_note = ""
        lines = [f"AlgorithmError: {who} on host {self.host} exited with code {self.exit_code}{signal_note}"]
        message = self.error_message
        if message:
            lines.append(f"ErrorMessage: {message}")
        if self.stderr_tail:
            lines.append(f"Last stderr lines of [{self.host}/{self.label}]:")
            lines.extend(self.stderr_tail)
        return "\n".join(lines)


@dataclass
class RunResult:
    """What happened on this host."""

    host: str
    exits: list[ProcessExit] = field(default_factory=list)
    first_failure: RankFailure | None = None
    stop_signal: int | None = None
    """The signal that stopped the job (SIGTERM, SIGINT), when it was stopped."""
    unreaped: list[str] = field(default_factory=list)
    """Labels of processes that did not exit even after SIGKILL (should never happen)."""
    outcome: str | None = None
    """The host's last line when its exit status does not tell it: an MPI worker exits 0 (the job's
    failure is the master's to report) even when the master's ``mpirun`` failed."""

    @property
    def exit_codes(self) -> dict[str, int]:
        return {e.label: e.exit_code for e in self.exits}

    @property
    def exit_code(self) -> int:
        if self.first_failure is not None:
            return self.first_failure.exit_code
        if self.stop_signal is not None:
            return 128 + self.stop_signal
        if self.unreaped:
            return 1
        return 0

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0
