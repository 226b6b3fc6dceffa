"""What a launch strategy is: a pure plan of processes, run by the supervisor.

One module per strategy (``process``, ``torchrun``, ``smddp``, ``mpi``, ``smp``), each a small
subclass of :class:`Launcher` that turns an :class:`~smlaunch.runtime.environment.Environment` into a
:class:`~smlaunch.runtime.launchers.base.LaunchPlan`. Planning does no I/O, so every strategy is
unit-testable by comparing plans. Running the plan (spawning, log prefixes, fail-fast, signal
forwarding, exit codes) belongs to :mod:`smlaunch.runtime.supervision.supervisor`, written once for
all strategies.

A strategy with a host role that is not "start these processes" (the MPI worker that only serves
sshd until the master's job ends) overrides :meth:`Launcher.run`. Its own module, above the
supervisor it is given: the plan and result values it shares with the supervisor are in
:mod:`smlaunch.runtime.launchers.base`, below both.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from smlaunch.runtime.launchers.base import LaunchPlan, RunResult
from smlaunch.runtime.supervision.supervisor import Supervisor

if TYPE_CHECKING:
    from smlaunch.runtime.environment import Environment


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
