"""``python -m estimator.backends.local.early_start <job dir>``: the local agent, hosts first.

A process job whose hosts need nothing staged (no input channels, no checkpoints to restore) is
planned at submit (:meth:`~estimator.backends.local.executors.process.ProcessExecutor.plan_early_start`):
each host's ``/opt/ml`` tree is written and ``early-start.json`` holds what starts its runtime (the
interpreter, the master port, the attempt's scratch directory, each host's own variables). This
entry starts those hosts first, as the agent would (:func:`.executors.spawn.start_host`: private
``/opt/ml``, parent-death signal, as a child subreaper), loading only the standard library to do
so; where the host runs this very interpreter, each host runtime is a fork of this process instead
of a new interpreter (:mod:`.executors.forked`: ~40 ms sooner), and its output is read from then
on (:class:`.executors.spawn.DrainedOutput`). It then loads and runs the agent
(:mod:`estimator.backends.local.agent`), which adopts them: the agent's own start-up (the job spec,
pydantic, its policy modules) runs while the hosts start instead of before; it even waits
(briefly, see :func:`give_head_start`) until each host has printed its first line. The agent then
applies its whole policy to them, unchanged. A job without a plan (or a second run of its agent)
goes straight to the agent.

A SIGTERM or SIGINT that arrives before the agent has installed its handlers is remembered and
handed to the agent, which then stops the job as it would have.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from estimator.backends.local.executors.forked import ForkedHost, can_fork, fork_host
from estimator.backends.local.executors.spawn import DrainedOutput, PrivateOptMl, base_environment, start_host
from estimator.backends.local.state import JobDir
from runtime.processes import become_subreaper

HEAD_START_SECONDS = 1.0
"""At most this long, the agent lets its hosts start before it loads its own machinery."""
_SLICE_SECONDS = 0.05


class EarlyHosts:
    """The first attempt's hosts, started before the agent loaded its machinery. (A plain class:
    dataclasses loads inspect, which this entry would pay before it starts the hosts.)"""

    def __init__(
        self, port: int, scratch: Path, started: float, record: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.procs: dict[str, subprocess.Popen[bytes] | ForkedHost] = {}
        """Host name -> its ``python -m runtime``: a fork of this process where it can be
        (:mod:`.executors.forked`), else a new interpreter."""
        self.outputs: dict[str, DrainedOutput] = {}
        """Host name -> its output, drained (:func:`drain_outputs`); also its ``stdout`` from then on."""
        self.port = port
        """The master port the hosts were given."""
        self.scratch = scratch
        """The attempt's scratch directory (``SMLAUNCH_MPI_DIR``), removed when the job ends."""
        self.opt_ml: PrivateOptMl | None = None
        """What gave each host its own ``/opt/ml``; None when this machine cannot (``no_opt_ml``)."""
        self.no_opt_ml: str | None = None
        """Why the hosts share the machine's ``/opt/ml`` (the agent says it once), else None."""
        self.started = started
        """``time.time()`` when the first host was started: the job's TrainingStartTime."""
        self.signals: list[int] = []
        """SIGTERM / SIGINT received before the agent installed its own handlers."""
        self.record = record or {}
        """The job's ``spec``, ``settings`` and ``state`` as read before any host started: what the
        agent runs the job from (the hosts were not there yet to write it); empty: the agent reads it."""


def start_hosts(job: JobDir) -> EarlyHosts | None:
    """Start the hosts ``job.early_start_file`` plans (then removed: it is used once), or None
    when there is no plan or a host could not be started (then none runs and the agent starts
    the hosts itself, reporting what fails). Call it from the main thread."""
    try:
        plan = json.loads(job.early_start_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    job.early_start_file.unlink()
    record = {"spec": job.read_json(job.spec_file), "settings": job.read_json(job.settings_file)}
    record["state"] = job.read_state()
    hosts = EarlyHosts(int(plan["port"]), Path(plan["scratch"]), time.time(), record)

    def remember(signum: int, _frame: FrameType | None) -> None:
        hosts.signals.append(signum)

    signal.signal(signal.SIGTERM, remember)
    signal.signal(signal.SIGINT, remember)
    become_subreaper()
    with contextlib.suppress(OSError):  # before any rank can fill the store; the agent says if it failed
        job.set_space_aside()
    mounts = PrivateOptMl.from_view(plan.get("view"))
    hosts.no_opt_ml = mounts.unavailable(Path(plan["hosts"][0]["tree"]))
    hosts.opt_ml = mounts if hosts.no_opt_ml is None else None
    base = base_environment(record["settings"], hosts.scratch)
    fork = can_fork(plan["python"])
    try:
        for host in plan["hosts"]:
            env = dict(base)
            env.update(host["env"])
            tree = Path(host["tree"])
            if fork:
                hosts.procs[host["name"]] = fork_host(tree, env, hosts.opt_ml)
            else:
                hosts.procs[host["name"]] = start_host(plan["python"], tree, env, hosts.opt_ml)
    except (OSError, subprocess.SubprocessError):
        for proc in hosts.procs.values():
            proc.kill()
            proc.wait()
        shutil.rmtree(hosts.scratch, ignore_errors=True)
        return None
    drain_outputs(hosts)
    return hosts


def drain_outputs(hosts: EarlyHosts) -> None:
    """Have each host's output read into a :class:`DrainedOutput` (its ``stdout`` from now on),
    once every host has started: a process that runs threads must not fork."""
    for name, proc in hosts.procs.items():
        assert proc.stdout is not None and name not in hosts.outputs
        hosts.outputs[name] = DrainedOutput(proc.stdout)
        proc.stdout = hosts.outputs[name]  # type: ignore[assignment]


def give_head_start(job: JobDir, hosts: EarlyHosts, limit: float = HEAD_START_SECONDS) -> None:
    """Wait until every host has printed something (its runtime has loaded and read its
    configuration; its ranks start next) or ended, at most ``limit`` seconds, and no longer once a
    stop was asked for (the stop file, or a signal): on a busy machine the agent's own loading
    would otherwise take the CPU the hosts need to reach the user's first line. The hosts' outputs
    must be drained (:func:`drain_outputs`); their lines wait there for the agent's log pumps."""
    waiting = list(hosts.outputs.values())
    deadline = time.monotonic() + limit
    while waiting and not hosts.signals and not job.stop_file.exists():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        waiting[0].printed.wait(min(left, _SLICE_SECONDS))
        waiting = [output for output in waiting if not output.printed.is_set()]


def main(argv: list[str] | None = None) -> int:
    """Start the planned hosts, then run the job's agent with them."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m estimator.backends.local.early_start <job dir>", file=sys.stderr)
        return 2
    job = JobDir(Path(args[0]))
    hosts = start_hosts(job)
    if hosts is not None:
        give_head_start(job, hosts)
    from estimator.backends.local.agent import Agent  # after the hosts started: the slow part
    from estimator.backends.local.executors.process import ProcessExecutor

    if hosts is None:
        return Agent(job).run()
    return Agent(job, ProcessExecutor(started=hosts), early=hosts).run()


if __name__ == "__main__":
    sys.exit(main())
