"""The Slurm executor: each host of a job is one ``srun`` step on one node of the job's allocation.

The job's agent runs as the batch script of the job's ``sbatch`` allocation
(:mod:`estimator.backends.slurm`), on the allocation's first node, with the job directory on the
shared directory every node mounts. For each attempt it asks this executor to start the hosts:

- ``algo-1..N`` map to the allocation's nodes in order (``scontrol show hostnames
  $SLURM_JOB_NODELIST``); each host's address is its node's ``NodeAddr`` (``sinfo``), so the master
  address is ``algo-1``'s node; the master port is free on the agent's node (``algo-1``'s, as Slurm
  runs the batch script on the allocation's first node);
- each host is ``srun --nodes=1 --ntasks=1 --nodelist=<node> --job-name=<host> python -m
  estimator.backends.local.executors.slurm_host``, started from the host's tree (on the shared
  directory) with ``SAGEMAKER_BASE_DIR`` set to it, which mounts that tree at ``/opt/ml`` in a
  private mount namespace and becomes ``python -m runtime``; its output comes back through
  ``srun``, whose exit status is the runtime's;
- with ``container_image`` (pyxis/enroot clusters) the step runs the image's ``train`` with the
  shared directory mounted at the same path and the host's tree at ``/opt/ml``
  (``--container-image``, ``--container-mounts``, ``--container-workdir``);
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

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from estimator.backends.local import layout
from estimator.backends.local.executors.base import Executor, Host, LaunchContext
from estimator.backends.slurm_client import SlurmClient, SlurmCommandError
from runtime import contract
from runtime.processes import free_port

if TYPE_CHECKING:
    from estimator.spec import TrainingJobSpec

JOB_ID_ENV = "SLURM_JOB_ID"
NODELIST_ENV = "SLURM_JOB_NODELIST"
RESTART_COUNT_ENV = "SLURM_RESTART_COUNT"
"""Set by Slurm in a requeued batch run: how many times the job was requeued (``sbatch(1)``)."""
KILL_WAIT_SECONDS = 10.0


HOST_MODULE = "estimator.backends.local.executors.slurm_host"
"""Run by each step outside containers: the host's tree at ``/opt/ml``, then ``python -m runtime``."""
CONTAINER_COMMAND = "train"
"""Run by each step in a container: the image's entry command (``python -m runtime`` in ours)."""


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


class SlurmExecutor(Executor):
    """Hosts as ``srun`` steps of the agent's own Slurm job; see the module docstring."""

    name: ClassVar[str] = "slurm"
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

    def settings(self, spec: TrainingJobSpec) -> dict[str, Any]:
        """The interpreter on the nodes, the container image and the shared directory."""
        return {
            "executor": self.name,
            "python": self.python,
            "container_image": self.container_image,
            "shared_dir": self.shared_dir,
        }

    @classmethod
    def for_agent(cls, settings: dict[str, Any]) -> Executor:
        """The executor inside the job's allocation: job id and node list from Slurm's environment."""
        missing = [name for name in (JOB_ID_ENV, NODELIST_ENV) if not os.environ.get(name)]
        if missing:
            raise RuntimeError(f"the Slurm executor runs inside a Slurm job; {missing} not set")
        return cls(
            job_id=os.environ[JOB_ID_ENV],
            nodelist=os.environ[NODELIST_ENV],
            python=str(settings.get("python") or sys.executable),
            container_image=settings.get("container_image"),
            shared_dir=str(settings.get("shared_dir") or ""),
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
        ranks = int(context.settings["processes_per_host"])
        master = min(context.hosts, key=lambda h: h.index).name
        context.say(
            f"Job {context.spec.TrainingJobName}: Slurm job {self.job_id}, {len(context.hosts)} host(s) "
            + ", ".join(f"{name}={node}({address})" for name, (node, address) in sorted(placement.items()))
            + f", {ranks} process(es) per host for per-GPU launchers, master {master}="
            f"{addresses[master]}:{port}, stop grace {context.grace:g} s, "
            f"max run {context.spec.StoppingCondition.MaxRuntimeInSeconds} s"
            + (f", container {self.container_image}" if self.container_image else "")
        )
        base_env = dict(os.environ)  # SLURM_JOB_ID among them: srun starts a step of this job
        if context.settings.get("s3_endpoint_url"):
            base_env.setdefault("AWS_ENDPOINT_URL_S3", str(context.settings["s3_endpoint_url"]))
        if context.settings.get("s3_region_name"):
            base_env.setdefault("AWS_REGION", str(context.settings["s3_region_name"]))
        for host in context.hosts:
            env = dict(base_env)
            env.update(
                layout.host_environment(
                    context.spec,
                    host.base,
                    addresses,
                    port,
                    ranks,
                    context.grace,
                    context.settings.get("num_gpus"),
                    context.settings.get("emulate_cuda"),
                )
            )
            env.update(layout.requirements_environment(context.settings))
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

    def _steps(self) -> dict[str, str]:
        try:
            return self.client.steps(self.job_id)
        except SlurmCommandError:
            return {}

    def signal(self, context: LaunchContext, hosts: Sequence[Host], sig: int) -> None:
        """``scancel --signal=<sig> <job>.<step>`` for each host's step (``srun`` itself before its
        step is registered)."""
        steps = self._steps()
        for host in hosts:
            step = steps.get(host.name)
            if step is not None:
                try:
                    self.client.cancel(step, signal=signal.Signals(sig).name.removeprefix("SIG"))
                    continue
                except SlurmCommandError as error:
                    context.say(f"WARNING: {error}; signalling srun instead")
            if host.proc is not None and host.proc.poll() is None:
                host.proc.send_signal(sig)

    def kill_everything(self, context: LaunchContext) -> None:
        """SIGKILL every host step still running, then wait for their ``srun`` to end."""
        self.signal(
            context,
            [h for h in context.hosts if h.proc is not None and h.proc.poll() is None],
            signal.SIGKILL,
        )
        for host in context.hosts:
            if host.proc is None:
                continue
            try:
                host.proc.wait(timeout=KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                host.proc.kill()
                host.proc.wait()
