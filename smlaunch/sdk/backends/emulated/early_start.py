"""``python -m smlaunch.sdk.backends.emulated.early_start <job dir>``: the local agent, hosts first.

The entry :meth:`LocalBackend.submit <smlaunch.sdk.backends.emulated.backend.LocalBackend.submit>`
starts instead of the agent's own when the process executor planned the job's first hosts
(:mod:`smlaunch.sdk.backends.emulated.executors.process.early`). It starts those hosts first, then
loads and runs the agent (:mod:`smlaunch.sdk.backends.emulated.agent`) with a process executor that
hands them over (:meth:`.executors.base.Executor.adopt`): the agent's own start-up (the job spec,
pydantic, its policy modules) runs while the hosts start instead of before; it even waits (briefly,
see :func:`~.executors.process.early.give_head_start`) until each host has printed its first line.
The agent then applies its whole policy to them, unchanged. A job without a plan (or a second run
of its agent) goes straight to the agent.
"""

from __future__ import annotations

import sys
from pathlib import Path

from smlaunch.sdk.backends.emulated.executors.process.early import give_head_start, start_hosts
from smlaunch.sdk.backends.emulated.state import JobDir


def main(argv: list[str] | None = None) -> int:
    """Start the planned hosts, then run the job's agent with them."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m smlaunch.sdk.backends.emulated.early_start <job dir>", file=sys.stderr)
        return 2
    job = JobDir(Path(args[0]))
    hosts = start_hosts(job)
    if hosts is not None:
        give_head_start(job, hosts)
    from smlaunch.sdk.backends.emulated.agent import Agent  # after the hosts started: the slow part
    from smlaunch.sdk.backends.emulated.executors.process.executor import ProcessExecutor

    if hosts is None:
        return Agent(job).run()
    return Agent(job, ProcessExecutor(started=hosts)).run()


if __name__ == "__main__":
    sys.exit(main())
