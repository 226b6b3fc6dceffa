"""The Slurm backend: the local backend's job directory and agent, on a Slurm cluster.

``submit(request)`` checks the job (capabilities, the partition exists and has the nodes), fills the
job directory ``<shared_dir>/jobs/<job>/`` as the local backend does, and submits ONE ``sbatch``
whose batch script runs the job's agent (:mod:`smlaunch.sdk.backends.emulated.agent`) on the
allocation's first node. The agent owns everything but where hosts run: staging, the state
machine, logs, failure / stop / ``max_run`` policy, artifacts; its executor
(:mod:`smlaunch.sdk.backends.emulated.executors.slurm.executor`) starts each host as one ``srun`` step per
allocated node. The job directory is on the shared directory, so any process that sees it
(``attach`` from another notebook, ``smlaunch describe``) reads the same files.

``sbatch`` arguments (:func:`sbatch_arguments`): ``--nodes=<instance_count>``,
``--ntasks-per-node=1``, ``--exclusive`` (an instance is a whole machine), ``--gpus-per-node``
(``SlurmSession(gpus_per_node=...)``, else the instance type's GPUs from the instance catalog on
partitions with ``gpu`` generic resources), ``--time`` (``max_run`` plus the stop grace and
:data:`TIME_MARGIN_SECONDS` for staging and packaging: the agent enforces ``max_run`` itself,
Slurm's limit is the backstop), ``--job-name=<job>``, ``--output=<job>/logs/agent.log``,
``--requeue`` for ``use_spot_instances`` (else ``--no-requeue``), ``--partition``, ``--account``,
``--qos``, then ``extra_sbatch_args``. The job inherits this process's environment (``sbatch``'s
``--export=ALL``) without AWS secret keys: the nodes use their own credentials (a shared
``~/.aws``, an instance profile); Slurm keeps a job's environment in its state files.

Status comes from the agent's ``state.json``; Slurm's own state fills in what the agent cannot
say (:meth:`SlurmBackend.describe`): PENDING is InProgress/Starting with "Pending in queue:
<reason>"; a job that ended without its agent writing an outcome is TIMEOUT -> Stopped /
MaxRuntimeExceeded, CANCELLED -> Stopped, anything else -> Failed naming Slurm's state.
``stop()`` cancels a job still in the queue, or whose agent has not started it yet (no
``TrainingStartTime``: SIGTERM would kill the agent before it handles SIGTERM), else sends SIGTERM
to the agent (``scancel --batch --signal=TERM``), which stops the hosts (SIGTERM, SIGKILL after the
grace).

Every distribution runs: torch_distributed, smddp and smp model parallel start their ranks from
each host's runtime; MPI's ``mpirun`` on the master starts each host's ranks as a step on that
host's node (:mod:`smlaunch.sdk.backends.emulated.executors.slurm.executor`), so it is refused only together
with ``container_image``.
"""

from __future__ import annotations

import math
import shlex
import time
import warnings
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.base import Capabilities
from smlaunch.sdk.backends.emulated.backend import JobStore, LocalBackend, _agent_environment
from smlaunch.sdk.backends.emulated.executors.slurm.executor import SlurmExecutor
from smlaunch.sdk.backends.emulated.job_settings import JobSettings
from smlaunch.sdk.backends.emulated.layout import file_uri_path
from smlaunch.sdk.backends.emulated.state import JobDir, JobState, write_json_atomic
from smlaunch.sdk.backends.slurm.client import PENDING, Partition, SlurmClient, SlurmCommandError, SlurmJob
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request import catalog
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec


class SlurmJobStore(JobStore, Protocol):
    """What the backend reads of its session (:class:`~smlaunch.sdk.sessions.slurm.SlurmSession`),
    so that the backend never imports the session: the local backend's, and the cluster's."""

    @property
    def shared_dir(self) -> Path: ...

    @property
    def python(self) -> str: ...

    @property
    def container_image(self) -> str | None: ...

    @property
    def partition(self) -> str | None: ...

    @property
    def account(self) -> str | None: ...

    @property
    def qos(self) -> str | None: ...

    @property
    def extra_sbatch_args(self) -> tuple[str, ...]: ...

    @property
    def gpus_per_node(self) -> int | None: ...

    def slurm_client(self) -> Any: ...


TIME_MARGIN_SECONDS = 600
"""Added to ``max_run`` and the stop grace in ``--time``: staging before the hosts start and
packaging after they end."""
SLURM_FILE = "slurm.json"
"""In the job directory: ``{"job_id": ...}`` of the job's ``sbatch`` submission."""
SECRET_ENVIRONMENT = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
"""Never handed to ``sbatch`` (Slurm stores a job's environment in its state files)."""
STATE_CACHE_SECONDS = 1.0
"""``squeue`` is asked at most this often per job by one backend (log followers poll often)."""
_CONTAINER_REFUSED = frozenset({Strategy.MPI})
"""Strategies not run with ``container_image``: ``mpirun``'s ``orted`` steps start outside the image."""


def sbatch_arguments(
    spec: TrainingJobSpec, session: SlurmJobStore, partition: Partition | None, job: JobDir, grace: float
) -> list[str]:
    """The ``sbatch`` options of ``spec``'s job (see the module docstring). Pure."""
    seconds = spec.StoppingCondition.MaxRuntimeInSeconds + grace + TIME_MARGIN_SECONDS
    args = [
        f"--job-name={spec.TrainingJobName}",
        f"--nodes={spec.ResourceConfig.InstanceCount}",
        "--ntasks-per-node=1",
        "--exclusive",
        f"--time={math.ceil(seconds / 60)}",
        f"--output={job.agent_log}",
        "--open-mode=append",
        f"--chdir={job.path}",
        "--requeue" if spec.EnableManagedSpotTraining else "--no-requeue",
    ]
    gpus = gpus_per_node(spec, session, partition)
    if gpus:
        args.append(f"--gpus-per-node={gpus}")
    named = (("partition", session.partition), ("account", session.account), ("qos", session.qos))
    for option, value in named:
        if value:
            args.append(f"--{option}={value}")
    return [*args, *session.extra_sbatch_args]


def gpus_per_node(spec: TrainingJobSpec, session: SlurmJobStore, partition: Partition | None) -> int | None:
    """``SlurmSession(gpus_per_node=...)``, else the instance type's GPUs on a GPU partition."""
    if session.gpus_per_node is not None:
        return session.gpus_per_node
    if partition is None or not partition.has_gpus:
        return None
    return catalog.lookup(spec.ResourceConfig.InstanceType).gpus


def batch_script(python: str, job: JobDir, agent_module: str) -> str:
    """The batch script: the job's agent, replacing the shell (so ``scancel --batch`` reaches it)."""
    return (
        "#!/bin/sh\n"
        f"# smlaunch training job {job.name}: its agent, which starts one srun step per host.\n"
        f"exec {shlex.quote(python)} -m {agent_module} {shlex.quote(str(job.path))}\n"
    )


class SlurmBackend(LocalBackend):
    """Run jobs on a Slurm cluster; see the module docstring."""

    capabilities = Capabilities(
        name="slurm",
        uri_schemes=frozenset({"file", "s3"}),
        input_modes=frozenset({"File"}),
        distributions=frozenset(Strategy),
        spot=True,
        checkpoints=True,
        retry_strategy=True,  # as the local backend's (same agent): see its module docstring
        interrupt_stops_job=True,
    )

    def __init__(self, session: SlurmJobStore) -> None:
        executor = SlurmExecutor(
            client=session.slurm_client(),
            python=session.python,
            container_image=session.container_image,
            shared_dir=str(session.shared_dir),
        )
        super().__init__(session, executor=executor)
        self.capabilities = SlurmBackend.capabilities  # not the local ones the base narrows by executor
        self.session: SlurmJobStore = session
        self._states: dict[str, tuple[float, SlurmJob | None]] = {}

    @property
    def client(self) -> SlurmClient:
        client: SlurmClient = self.session.slurm_client()
        return client

    # --- check / submit ---------------------------------------------------------------------

    def partition(self) -> Partition:
        """The session's partition (else the cluster's default) as ``sinfo`` reports it."""
        name = self.session.partition or self.client.default_partition()
        partition = self.client.partition(name)
        if partition is None:
            raise ConfigurationError(
                "partition",
                name,
                "the cluster has no such partition",
                "pass SlurmSession(partition=...) one that `sinfo --summarize` lists",
            )
        return partition

    def check(self, request: JobRequest) -> None:
        """The local backend's checks, plus: the partition exists, is up and has the nodes; a
        warning for each ``file://`` path outside ``shared_dir``."""
        super().check(request)
        self.check_cluster(request)
        self._warn_about_unshared_paths(request.spec)

    def check_cluster(self, request: JobRequest) -> None:
        """What the cluster must offer ``request`` (Slurm answers, the partition is up and has the
        nodes, MPI without ``container_image``); a tuning job checks its trials so before it starts."""
        spec = request.spec
        partition = self.partition()
        if partition.available != "up":
            raise ConfigurationError(
                "partition",
                partition.name,
                f"the partition is {partition.available}",
                "pass SlurmSession(partition=...) a partition that is up",
            )
        count = spec.ResourceConfig.InstanceCount
        if count > partition.nodes:
            raise UnsupportedByBackendError(
                "instance_count",
                count,
                f"partition {partition.name} has {partition.nodes} node(s)",
                f"use instance_count <= {partition.nodes} or a larger partition",
            )
        self._check_mpi_container(request.strategy)

    def _check_mpi_container(self, strategy: Strategy) -> None:
        """``mpi`` with ``container_image``: refused (each host's ``orted`` is a step of its own,
        started outside the image)."""
        if self.session.container_image and strategy in _CONTAINER_REFUSED:
            raise UnsupportedByBackendError(
                "distribution",
                strategy.value,
                f"MPI ranks on Slurm start outside containers, and container_image="
                f"{self.session.container_image!r} is set",
                "drop container_image (run on the nodes' Python) or use torch_distributed",
            )

    def _warn_about_unshared_paths(self, spec: TrainingJobSpec) -> None:
        """Warn for each ``file://`` path (code, channels, output, checkpoints) outside
        ``shared_dir``: the nodes must see it at the same path, which only a shared filesystem
        gives (it may be one: ``/home`` on NFS)."""
        uris = spec.data_uris()
        submit = (spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY)
        if submit:
            uris.append(("source_dir", str(hp.decode_value(submit))))
        for field, uri in uris:
            if urlparse(uri).scheme != "file":
                continue
            path = file_uri_path(uri).resolve()
            if not path.is_relative_to(self.session.shared_dir):
                warnings.warn(
                    f"{field}={uri}: {path} is outside SlurmSession.shared_dir ({self.session.shared_dir}); "
                    "the job's nodes must see it at the same path. Fix: put it on a filesystem every "
                    "node mounts (e.g. under shared_dir), or use s3://",
                    stacklevel=4,
                )

    def _host_gpus(self, machine_gpus: int) -> int | None:
        """The GPUs are counted on the nodes, not here: ``SlurmSession(gpus_per_node=...)``, else
        None (each node's runtime counts its own)."""
        return self.session.gpus_per_node

    def _start_agent(self, job: JobDir) -> None:
        """``sbatch`` the job's agent; record the Slurm job id in ``slurm.json``."""
        spec = TrainingJobSpec.model_validate(job.read_json(job.spec_file))
        grace = JobSettings.model_validate_json(job.settings_file.read_bytes()).stop_grace_seconds
        arguments = sbatch_arguments(spec, self.session, self.partition(), job, grace)
        env = {k: v for k, v in _agent_environment().items() if k not in SECRET_ENVIRONMENT}
        job_id = self.client.submit(batch_script(self.session.python, job, self.agent_module), arguments, env)
        write_json_atomic(job.path / SLURM_FILE, {"job_id": job_id, "sbatch": arguments})

    # --- describe / logs / stop -------------------------------------------------------------

    def slurm_job_id(self, job: JobDir) -> str | None:
        """The Slurm job id of the job, once submitted."""
        try:
            return str(job.read_json(job.path / SLURM_FILE)["job_id"])
        except FileNotFoundError:
            return None

    def _slurm_state(self, job_id: str) -> SlurmJob | None:
        seen_at, record = self._states.get(job_id, (0.0, None))
        if time.monotonic() - seen_at >= STATE_CACHE_SECONDS:
            record = self.client.job(job_id)
            self._states[job_id] = (time.monotonic(), record)
        return record

    def _started(self, job: JobDir) -> bool:
        """Whether the agent's Slurm job was submitted (``slurm.json``)."""
        return (job.path / SLURM_FILE).exists()

    def _agent_alive(self, job: JobDir) -> bool | None:
        """The agent runs as long as the Slurm job does (queued counts: it will start)."""
        job_id = self.slurm_job_id(job)
        if job_id is None:
            return None
        record = self._slurm_state(job_id)
        return record is not None and not record.terminal

    def _agent_lost(self, job: JobDir, state: dict[str, Any]) -> dict[str, Any]:
        """The Slurm job ended and the agent wrote no outcome: say what Slurm says, and keep it in
        ``state.json`` (no agent will write there again; Slurm forgets ended jobs)."""
        if JobState.of(state).is_terminal:
            return state
        job_id = self.slurm_job_id(job)
        record = self._slurm_state(job_id) if job_id else None
        slurm_state = record.state if record else "unknown to slurmctld (no accounting to ask)"
        status, secondary = contract.STATUS_FAILED, contract.SECONDARY_FAILED
        where = f"Slurm job {job_id} ended {slurm_state}"
        if record is not None and record.reason not in ("None", ""):
            where += f" ({record.reason})"
        if slurm_state == "TIMEOUT":
            status, secondary = contract.STATUS_STOPPED, contract.SECONDARY_MAX_RUNTIME_EXCEEDED
            reason = f"MaxRuntimeExceeded: {where}: Slurm's time limit (--time) ended it"
        elif slurm_state == "CANCELLED":
            status, secondary = contract.STATUS_STOPPED, contract.SECONDARY_STOPPED
            reason = f"Stopped: {where} (scancel)"
        else:
            reason = f"InternalServerError: {where} before its agent recorded an outcome. See {job.agent_log}"
        state = dict(state)
        ended = time.time()
        state.update(
            TrainingJobStatus=status, SecondaryStatus=secondary, FailureReason=reason, LastModifiedTime=ended
        )
        state.setdefault("TrainingEndTime", ended)
        transitions = state.setdefault("SecondaryStatusTransitions", [])
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1]["EndTime"] = ended
        transitions.append(
            {"Status": secondary, "StartTime": ended, "EndTime": ended, "StatusMessage": reason}
        )
        if not JobState.of(job.read_state()).is_terminal:  # the agent may have written it meanwhile
            write_json_atomic(job.state_file, state)
        return job.read_state()

    def describe(self, job_name: str) -> dict[str, Any]:
        """The local description; a job still in Slurm's queue says so, with Slurm's reason."""
        description = super().describe(job_name)
        started = "TrainingStartTime" in description
        if description["TrainingJobStatus"] != contract.STATUS_IN_PROGRESS or started:
            return description
        job_id = self.slurm_job_id(self._existing(job_name))
        record = self._slurm_state(job_id) if job_id else None
        transitions = description["SecondaryStatusTransitions"]
        if record is not None and record.state == PENDING and transitions:
            transitions[-1]["StatusMessage"] = f"Pending in queue: {record.reason}"
        return description

    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Cancel a job still queued, or whose agent has not started the job yet; else SIGTERM to
        its agent, which stops the hosts (SIGTERM, SIGKILL after the grace) and ends the job
        Stopped."""
        if reason is not None:
            raise ConfigurationError(
                "reason",
                reason,
                "the Slurm backend does not emulate spot interruptions (Slurm "
                "requeues preempted --requeue jobs itself)",
                "call stop() without a reason",
            )
        job = self._existing(job_name)
        state = job.read_state()
        if JobState.of(state).is_terminal:
            return
        job.stop_file.touch()  # an agent about to start sees it
        job_id = self.slurm_job_id(job)
        if job_id is None:
            return
        self._states.pop(job_id, None)
        record = self._slurm_state(job_id)
        try:
            # An agent that has not set TrainingStartTime has not yet taken SIGTERM over (it does
            # first) and started nothing: SIGTERM would kill it (FAILED, JobLaunchFailure), so its
            # Slurm job is cancelled whole (CANCELLED: Stopped), as a queued one is.
            if (record is not None and record.state == PENDING) or "TrainingStartTime" not in state:
                self.client.cancel(job_id)
            else:
                self.client.cancel(job_id, signal="TERM", batch=True)
        except SlurmCommandError:
            if self._agent_alive(job):
                raise
        self._states.pop(job_id, None)
