"""What a launch strategy is: a pure plan of processes, run by the supervisor.

One module per strategy (``process``, ``torchrun``, ``smddp``, ``mpi``, ``smp``), each a small
subclass of :class:`Launcher` that turns an :class:`~runtime.environment.Environment` into a
:class:`LaunchPlan`: the exact processes to start on this host, with argv (never a shell string),
environment and working directory. Planning does no I/O, so every strategy is unit-testable by
comparing plans. Running the plan (spawning, log prefixes, fail-fast, signal forwarding, exit codes)
belongs to :mod:`runtime.supervisor`, written once for all strategies.

A strategy with a host role that is not "start these processes" (the MPI worker that only serves
sshd until the master's job ends) overrides :meth:`Launcher.run`.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from runtime.environment import Environment
    from runtime.supervisor import RunResult, Supervisor


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


class Launcher(ABC):
    """A launch strategy. Subclasses implement :meth:`plan`; most need nothing else."""

    name: ClassVar[str]

    def __init__(self, env: Environment, python: str = sys.executable) -> None:
        self.env = env
        self.python = python

    @abstractmethod
    def plan(self) -> LaunchPlan:
        """The processes this host starts. Pure: reads ``self.env`` only."""

    def run(self, supervisor: Supervisor) -> RunResult:
        """Run this host's part of the job. Default: supervise the plan's processes."""
        return supervisor.run(self.plan())
