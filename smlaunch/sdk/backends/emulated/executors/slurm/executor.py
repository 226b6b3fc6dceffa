"""The Slurm executor: each host of a job is one ``srun`` step on one node of the job's allocation.

The job's agent runs as the batch script of the job's ``sbatch`` allocation
(:mod:`smlaunch.sdk.backends.slurm.backend`), on the allocation's first node, with the job directory on the
shared directory every node mounts. For each attempt it asks this executor to start the hosts:

- ``algo-1..N`` map to the allocation's nodes in order (``scontrol show hostnames
  $SLURM_JOB_NODELIST``); each host's address is its node's ``NodeAddr`` (``sinfo``), so the master
  address is ``algo-1``'s node; the master port is free on the agent's node (``algo-1``'s, as Slurm
  runs the batch script on the allocation's first node);
- each host is ``srun --nodes=1 --ntasks=1 --nodelist=<node> --job-name=<host> python -m
  smlaunch.sdk.backends.emulated.executors.slurm.host``, started from the host's tree (on the shared
  directory) with ``SAGEMAKER_BASE_DIR`` set to it, which mounts that tree at ``/opt/ml`` in a
  private mount namespace and becomes ``python -m smlaunch.runtime``; its output comes back through
  ``srun``, whose exit status is the runtime's;
- with ``container_image`` (pyxis/enroot clusters) the step runs the image's ``train`` with the
  shared directory mounted at the same path and the host's tree at ``/opt/ml``
  (``--container-image``, ``--container-mounts``, ``--container-workdir``);
- MPI (``distribution={"mpi": ...}``): the hosts meet in a private directory inside the job
  directory (``SMLAUNCH_MPI_DIR``, on the shared directory) and ``SMLAUNCH_MPI_SLURM=1`` tells the
  runtime to start ranks through Slurm: the master's ``mpirun`` asks, through that directory
  (:mod:`smlaunch.contract.mpi_slurm`), for each host's ``orted``, which :meth:`SlurmExecutor.watch` starts
  as a step ``<host>-mpi`` on the host's node (:func:`mpi_step_prefix`, the environment the host
  started with, its tree at ``/opt/ml``), from the agent, outside every host's step (a step's
  ``srun`` would kill its step at once on the SIGTERM of ``stop()``); so each rank runs on its
  host's node, Slurm signals and ends it with the job, and ``stop()`` reaches it through
  ``mpirun``;
- signals go to the step, not to ``srun`` (which would end the step at once): ``scancel
  --signal=TERM <job>.<step>`` reaches the runtime, which forwards it to its ranks within the
  grace; :meth:`SlurmExecutor.kill_everything` sends SIGKILL the same way to every step left.

Whatever still runs when the batch script (the agent) ends is killed by Slurm with the job.

A managed-spot job is submitted with ``--requeue``: when Slurm preempts it (or ``scontrol requeue``),
it signals the agent and every step, then runs the batch script again with ``SLURM_RESTART_COUNT``
set; the agent ends the attempt as ``Interrupted`` and its next run continues the job as the next
attempt (:attr:`SlurmExecutor.requeues`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from smlaunch import contract
from smlaunch.contract import mpi_slurm
from smlaunch.contract.processes import free_port
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.executors.base import Executor, Host, LaunchContext
from smlaunch.sdk.backends.emulated.executors.process.spawn import STORE_VIEW_ENV
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, SlurmSettings
from smlaunch.sdk.backends.emulated.state import host_report
from smlaunch.sdk.backends.slurm.client import SlurmClient, SlurmCommandError

if TYPE_CHECKING:
    from smlaunch.sdk.request.spec import TrainingJobSpec

JOB_ID_ENV = "SLURM_JOB_ID"
NODELIST_ENV = "SLURM_JOB_NODELIST"
RESTART_COUNT_ENV = "SLURM_RESTART_COUNT"
"""Set by Slurm in a requeued batch run: how many times the job was requeued (``sbatch(1)``)."""
KILL_WAIT_SECONDS = 10.0
MPI_POLL_SECONDS = 0.2
"""How often the agent looks for ``orted`` requests of the master's ``mpirun``."""


HOST_MODULE = "smlaunch.sdk.backends.emulated.executors.slurm.host"
"""Run by each step outside containers: the host's tree at ``/opt/ml``, then ``python -m
smlaunch.runtime``."""
CONTAINER_COMMAND = "train"
"""Run by each step in a container: the image's entry command (``python -m smlaunch.runtime`` in ours)."""
MPI_STEP_SUFFIX = "-mpi"
"""The steps that run a host's MPI daemon (``orted``) and ranks are named ``<host>-mpi``."""
MPI_STEP_LOG_LINES = 50
"""At most this many of the last lines an ``orted`` step printed go into the job's log."""
MPI_FAULT_LINES = 12
"""At most this many of a failed ``orted`` step's last lines go into the job's FailureReason."""
MPI_DAEMON_GRACE_SECONDS = 30.0
"""How long the hosts may keep running after an ``orted`` step failed before the job is failed for
it. ``mpirun`` ends within seconds of a daemon failure it knows of (a rank's crash tears the job
down); a daemon that died before calling back (``orte_init`` failed) leaves it waiting forever."""


def srun_command(
    node: str, host: str, python: str, container_image: str | None, shared_dir: str, tree: str
) -> list[str]:
    """The ``srun`` that starts host ``host`` on ``node`` (one task, this node only), its tree
    ``tree`` at ``/opt/ml``: through :data:`HOST_MODULE`, or mounted into the container."""
    argv = [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        f"--job-name={host}",
        "--kill-on-bad-exit=0",
        "--export=ALL",
    ]
    if container_image:
        mounts = f"{shared_dir}:{shared_dir},{tree}:{contract.DEFAULT_BASE_DIR}"
        return [
            *argv,
            f"--container-image={container_image}",
            f"--container-mounts={mounts}",
            f"--container-workdir={tree}",
            CONTAINER_COMMAND,
        ]
    return [*argv, python, "-m", HOST_MODULE]


def mpi_step_prefix(node: str, host: str, python: str, tree: str) -> list[str]:
    """The ``srun`` that runs a command as a new step ``<host>-mpi`` on ``node`` in the host's tree
    ``tree`` at ``/opt/ml`` (``--overlap``: the host's own step holds the node's CPUs): ``host``'s
    ``orted``, when the master's ``mpirun`` asks for it."""
    return [
        "srun",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        f"--job-name={host}{MPI_STEP_SUFFIX}",
        "--kill-on-bad-exit=0",
        "--export=ALL",
        f"--chdir={tree}",
        python,
        "-m",
        HOST_MODULE,
    ]


class SlurmExecutor(Executor):
    """Hosts as ``srun`` steps of the agent's own Slurm job; see the module docstring."""

    name: ClassVar[str] = "slurm"
    hosts_called: ClassVar[str] = "Slurm nodes"
    requeues: ClassVar[bool] = True

    def __init__(
        self,
        client: SlurmClient | None = None,
        job_id: str = "",
        nodelist: str = "",
        python: str = sys.executable,
        container_image: str | None = None,
        shared_dir: str = "",
    ) -> None:
        self.client = client or SlurmClient()
        self.job_id = job_id
        self.nodelist = nodelist
        self.python = python
        self.container_image = container_image
        self.shared_dir = shared_dir
        self._scratch: list[Path] = []
        self._mpi_dir: Path | None = None
        self._placement: dict[str, tuple[str, str]] = {}
        self._host_env: dict[str, dict[str, str]] = {}
        self._mpi_steps: dict[str, subprocess.Popen[bytes]] = {}
        self._mpi_seen_at = 0.0
        self._mpi_step_failed_at: dict[str, float] = {}
        self._mpi_fault: dict[str, Any] | None = None

    def settings(self, spec: TrainingJobSpec) -> SlurmSettings:
        """The interpreter on the nodes, the container image and the shared directory."""
        return SlurmSettings(
            python=self.python, container_image=self.container_image, shared_dir=self.shared_dir
        )

    @classmethod
    def for_agent(cls, settings: JobSettings) -> Executor:
        """The executor inside the job's allocation: job id and node list from Slurm's environment."""
        missing = [name for name in (JOB_ID_ENV, NODELIST_ENV) if not os.environ.get(name)]
        if missing:
            raise RuntimeError(f"the Slurm executor runs inside a Slurm job; {missing} not set")
        own = settings.executor_fields(SlurmSettings)
        return cls(
            job_id=os.environ[JOB_ID_ENV],
            nodelist=os.environ[NODELIST_ENV],
            python=own.python,
            container_image=own.container_image,
            shared_dir=own.shared_dir,
        )

    def requeued(self) -> str | None:
        """``SLURM_RESTART_COUNT`` > 0: Slurm requeued the job (preemption, ``scontrol requeue``)."""
        count = os.environ.get(RESTART_COUNT_ENV, "0")
        if not count.isdigit() or int(count) == 0:
            return None
        return f"Slurm requeued job {self.job_id} ({RESTART_COUNT_ENV}={count})"

    def nodes(self, hosts: Sequence[Host]) -> dict[str, tuple[str, str]]:
        """``{host: (node, address)}``: ``algo-1..N`` on the allocation's nodes, in order."""
        nodes = self.client.hostnames(self.nodelist)
        if len(nodes) < len(hosts):
            raise SlurmCommandError(
                ["scontrol", "show", "hostnames", self.nodelist],
                f"listed {len(nodes)} node(s) for {len(hosts)} host(s)",
            )
        ordered = sorted(hosts, key=lambda h: h.index)
        addresses = self.client.node_addresses(nodes[: len(hosts)])
        return {h.name: (nodes[i], addresses[nodes[i]]) for i, h in enumerate(ordered)}

    def launch(self, context: LaunchContext) -> None:
        placement = self.nodes(context.hosts)
        addresses = {name: address for name, (_, address) in placement.items()}
        port = free_port()
        master = min(context.hosts, key=lambda h: h.index).name
        context.say(
            f"Job {context.spec.TrainingJobName}: Slurm job {self.job_id}, {len(context.hosts)} host(s) "
            + ", ".join(f"{name}={node}({address})" for name, (node, address) in sorted(placement.items()))
            + f", master {master}="
            f"{addresses[master]}:{port}, stop grace {context.grace:g} s, "
            f"max run {context.spec.StoppingCondition.MaxRuntimeInSeconds} s"
            + (f", container {self.container_image}" if self.container_image else "")
        )
        base_env = dict(os.environ)  # SLURM_JOB_ID among them: srun starts a step of this job
        for name, value in context.settings.s3_environment().items():
            base_env.setdefault(name, value)
        self._placement = placement
        self._mpi_steps = {}
        if not self.container_image:
            self._mpi_dir = Path(tempfile.mkdtemp(prefix="mpi-", dir=context.job.path))  # 0700, unguessable
            self._scratch.append(self._mpi_dir)
            base_env[contract.SMLAUNCH_MPI_DIR] = str(self._mpi_dir)
            base_env[contract.SMLAUNCH_MPI_SLURM] = "1"
            view = layout.host_view(context.spec, context.settings, context.job, [self._mpi_dir])
            base_env[STORE_VIEW_ENV] = json.dumps(view)  # slurm_host hides the rest of the store
        for host in context.hosts:
            env = dict(base_env)
            env.update(
                layout.host_environment(
                    context.spec,
                    host.base,
                    addresses,
                    port,
                    context.settings.processes_per_host,
                    context.grace,
                    context.settings.num_gpus,
                    context.settings.emulate_cuda,
                )
            )
            env.update(layout.settings_environment(context.settings))
            self._host_env[host.name] = env
            host.proc = subprocess.Popen(
                srun_command(
                    placement[host.name][0],
                    host.name,
                    self.python,
                    self.container_image,
                    self.shared_dir,
                    str(host.base),
                ),
                cwd=str(host.base),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )

    def watch(self, context: LaunchContext) -> None:
        """Start the ``orted`` steps the master's ``mpirun`` asked for (at most every
        :data:`MPI_POLL_SECONDS`; see the module docstring)."""
        now = time.monotonic()
        if self._mpi_dir is None or now - self._mpi_seen_at < MPI_POLL_SECONDS:
            return
        self._mpi_seen_at = now
        for path in self._mpi_dir.glob("orted-*.json"):
            ask = host_report(path)  # written by the master's mpirun: never block on what is there
            if ask is None or "host" not in ask or "command" not in ask:
                continue
            host, command = str(ask["host"]), str(ask["command"])
            if host in self._mpi_steps:
                continue
            why = self._start_mpi_step(context, host, command)
            mpi_slurm.write_private_json(mpi_slurm.answer_file(self._mpi_dir, host), {"error": why})
        self._check_mpi_steps(context, now)

    def _check_mpi_steps(self, context: LaunchContext, now: float) -> None:
        """Fail the job when an ``orted`` step ended non-zero and the hosts still run
        :data:`MPI_DAEMON_GRACE_SECONDS` later: ``mpirun`` never heard from that daemon and would
        wait for it forever. The hosts get SIGTERM; :meth:`root_cause` names the daemon."""
        if self._mpi_fault is not None:
            return
        for host, proc in self._mpi_steps.items():
            code = proc.poll()
            if code is None or code == 0:
                continue
            failed_at = self._mpi_step_failed_at.setdefault(host, now)
            running = [h for h in context.hosts if h.proc is not None and h.proc.poll() is None]
            if now - failed_at < MPI_DAEMON_GRACE_SECONDS or not running:
                continue
            tail = "\n".join(self._mpi_step_lines(host)[-MPI_FAULT_LINES:])
            self._mpi_fault = {
                "FailureReason": (
                    f"InternalServerError: {host}'s MPI daemon (orted, Slurm step {host}{MPI_STEP_SUFFIX} on "
                    f"{self._placement[host][0]}) exited with code {code} before mpirun heard from it, "
                    f"and mpirun kept waiting for it. Its last lines:\n{tail}"
                ),
                "ExitCode": code,
            }
            context.say(
                f"MPI: {host}'s orted step exited with code {code} {MPI_DAEMON_GRACE_SECONDS:g} s ago "
                "and mpirun still waits for it: ending the job"
            )
            self.signal(context, running, signal.SIGTERM)
            return

    def root_cause(self, context: LaunchContext) -> dict[str, Any] | None:
        """An ``orted`` step that failed before ``mpirun`` heard from it (:meth:`_check_mpi_steps`)."""
        return self._mpi_fault

    def _start_mpi_step(self, context: LaunchContext, host: str, command: str) -> str | None:
        """Start ``host``'s ``orted`` step; None, or why it could not start."""
        assert self._mpi_dir is not None
        known = {h.name: h for h in context.hosts}
        if host not in known:
            return f"no host {host!r} in this job (hosts: {sorted(known)})"
        argv = mpi_step_prefix(self._placement[host][0], host, self.python, str(known[host].base))
        try:
            with self._mpi_step_log(host).open("ab") as out:
                self._mpi_steps[host] = subprocess.Popen(
                    [*argv, "/bin/sh", "-c", command],
                    cwd=str(known[host].base),
                    env=self._host_env[host],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        except OSError as error:
            return f"cannot start {argv[0]}: {error}"
        context.say(f"MPI: started {host}'s orted as a step on {self._placement[host][0]}")
        return None

    def attempt_ended(self, context: LaunchContext) -> None:
        """Reap the ``orted`` steps' ``srun`` (their ``orted`` ends with the master's ``mpirun``;
        :meth:`kill_everything` has cancelled any left), and put what each step printed in the
        job's log: ``srun``'s and ``orted``'s own messages (a step that could not start, a daemon
        that never reached ``mpirun``), which would otherwise go with the meeting directory. The
        ranks' output is not there: it reaches the log through ``mpirun``."""
        for host, proc in self._mpi_steps.items():
            try:
                proc.wait(timeout=KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._say_mpi_step_output(context, host)

    def _mpi_step_log(self, host: str) -> Path:
        """Where ``host``'s ``orted`` step writes (``srun`` and ``orted`` messages)."""
        assert self._mpi_dir is not None
        return contract.child_path(self._mpi_dir, f"orted-{host}.log", "host name", single=True)

    def _mpi_step_lines(self, host: str) -> list[str]:
        """What ``host``'s ``orted`` step printed so far (none where its log cannot be read)."""
        try:
            return self._mpi_step_log(host).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []

    def _say_mpi_step_output(self, context: LaunchContext, host: str) -> None:
        """The last :data:`MPI_STEP_LOG_LINES` lines of ``host``'s ``orted`` step, into the job's log
        as ``[<host>/orted] ...``."""
        for line in self._mpi_step_lines(host)[-MPI_STEP_LOG_LINES:]:
            context.say(f"[{host}/orted] {line}")

    def _steps(self) -> dict[str, str]:
        try:
            return self.client.steps(self.job_id)
        except SlurmCommandError:
            return {}

    def signal(self, context: LaunchContext, hosts: Sequence[Host], sig: int) -> None:
        """``scancel --signal=<sig> <job>.<step>`` for each host's step (``srun`` itself before its
        step is registered). MPI steps (``<host>-mpi``) are left to ``mpirun``, which Slurm signals
        in the master's step: on one SIGTERM it passes SIGTERM to every rank through each
        ``orted``, then SIGKILL; a second SIGTERM, or ``orted`` signalled beside it, would make it
        SIGKILL every rank at once (the runtime does not forward the stop to ``mpirun`` either:
        ``ProcessSpec.signalled_with_host``). :meth:`kill_everything` kills the MPI steps."""
        steps = self._steps()
        name = signal.Signals(sig).name.removeprefix("SIG")
        for host in hosts:
            step = steps.get(host.name)
            if step is not None:
                if self._cancel(context, step, name):
                    continue
                context.say("WARNING: signalling srun instead")
            if host.proc is not None and host.proc.poll() is None:
                host.proc.send_signal(sig)

    def _cancel(self, context: LaunchContext, step: str, signal_name: str) -> bool:
        """``scancel --signal=<signal_name> <step>``; False (said in the log) when it failed."""
        try:
            self.client.cancel(step, signal=signal_name)
        except SlurmCommandError as error:
            context.say(f"WARNING: {error}")
            return False
        return True

    def kill_everything(self, context: LaunchContext) -> None:
        """SIGKILL every host step still running and every MPI step (``<host>-mpi``), then wait
        for the hosts' ``srun`` to end."""
        self.signal(
            context,
            [h for h in context.hosts if h.proc is not None and h.proc.poll() is None],
            signal.SIGKILL,
        )
        for name, step in self._steps().items():
            if name.endswith(MPI_STEP_SUFFIX):
                self._cancel(context, step, "KILL")
        for host in context.hosts:
            if host.proc is None:
                continue
            try:
                host.proc.wait(timeout=KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                host.proc.kill()
                host.proc.wait()

    def close(self, context: LaunchContext) -> None:
        """Remove the MPI hosts' meeting directories."""
        for scratch in self._scratch:
            shutil.rmtree(scratch, ignore_errors=True)
