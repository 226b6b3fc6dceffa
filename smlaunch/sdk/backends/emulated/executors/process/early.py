"""The process executor's early start: a job's first hosts started before the agent loads its machinery.

A process job whose hosts need nothing staged (no input channels, no checkpoints to restore) is
planned at submit (:meth:`.executor.ProcessExecutor.plan_early_start`): each host's ``/opt/ml`` tree
is written and ``early-start.json`` holds what starts its runtime (the interpreter, the master port,
the attempt's scratch directory, the S3 variables, each host's own variables). :func:`start_hosts`
starts those hosts as the executor would (:func:`.spawn.start_host`: private ``/opt/ml``,
parent-death signal, as a child subreaper), loading only the standard library to do so; where the
host runs this very interpreter, each host runtime is a fork of this process instead of a new
interpreter (:mod:`.forked`: ~40 ms sooner), and its output is read from then on
(:class:`.spawn.DrainedOutput`).
The started hosts, an :class:`EarlyHosts`, go to a :class:`.executor.ProcessExecutor`, which hands
them to the agent (:meth:`.base.Executor.adopt`) and launches them as the first attempt. The entry
that does this is :mod:`smlaunch.sdk.backends.emulated.early_start`.

A SIGTERM or SIGINT that arrives before the agent has installed its handlers is remembered
(:attr:`EarlyHosts.signals`) and handed to the agent, which then stops the job as it would have.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import Any

from smlaunch.contract.processes import become_subreaper
from smlaunch.sdk.backends.emulated.executors.process.forked import ForkedHost, can_fork, fork_host
from smlaunch.sdk.backends.emulated.executors.process.spawn import (
    DrainedOutput,
    PrivateOptMl,
    base_environment,
    start_host,
)
from smlaunch.sdk.backends.emulated.state import JobDir

HEAD_START_SECONDS = 1.0
"""At most this long, the agent lets its hosts start before it loads its own machinery."""
_SLICE_SECONDS = 0.05


class EarlyHosts:
    """The first attempt's hosts, started before the agent loaded its machinery. (A plain class:
    dataclasses loads inspect, which this entry would pay before it starts the hosts.)"""

    def __init__(
        self, port: int, scratch: Path, started: float, record: dict[str, Any] | None = None
    ) -> None:
        self.procs: dict[str, subprocess.Popen[bytes] | ForkedHost] = {}
        """Host name -> its ``python -m smlaunch.runtime``: a fork of this process where it can be
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
        """The job's ``spec`` and ``state`` (JSON objects) and ``settings`` (the text of
        ``settings.json``) as read before any host started: what the agent runs the job from (the
        hosts were not there yet to write it); empty: the agent reads it."""


def start_hosts(job: JobDir) -> EarlyHosts | None:
    """Start the hosts ``job.early_start_file`` plans (then removed: it is used once), or None
    when there is no plan or a host could not be started (then none runs and the agent starts
    the hosts itself, reporting what fails). Call it from the main thread."""
    try:
        plan = json.loads(job.early_start_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    job.early_start_file.unlink()
    record = {
        "spec": job.read_json(job.spec_file),
        "settings": job.settings_file.read_text(encoding="utf-8"),  # typed by the agent
        "state": job.read_state(),
    }
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
    base = base_environment(plan["s3_environment"], hosts.scratch)
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
