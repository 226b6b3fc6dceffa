"""The executor interface: how the hosts of one job start somewhere, are signalled, end and are cleaned up.

The local backend has one agent per job (:mod:`smlaunch.sdk.backends.emulated.agent`) that owns everything
that does not depend on *where* a host runs: the job directory, each host's ``/opt/ml`` tree and
channels, log streaming, the failure / stop / ``max_run`` / spot policy, artifacts and the job's
state machine (:class:`smlaunch.sdk.backends.emulated.state.JobState`). An :class:`Executor` owns only the
part that does: starting the hosts of one attempt and making them go away. Today's executors:

- :class:`smlaunch.sdk.backends.emulated.executors.process.executor.ProcessExecutor`: one ``python -m
smlaunch.runtime``
  process per host on this machine (a private mount namespace per host, containment, the
  parent-death signal); the default;
- :class:`smlaunch.sdk.backends.emulated.executors.docker.executor.DockerExecutor`: one container per host;
- :class:`smlaunch.sdk.backends.emulated.executors.slurm.executor.SlurmExecutor`: one ``srun`` step per host
on
  the nodes of the Slurm allocation the agent runs in (:mod:`smlaunch.sdk.backends.slurm.backend`).

A new executor subclasses :class:`Executor`, registers its
:attr:`Executor.name` in :data:`smlaunch.sdk.backends.emulated.executors.EXECUTORS`, adds the model of
its own fields to :data:`smlaunch.sdk.backends.emulated.job_settings.ExecutorSettings`, and needs
nothing else from the agent.

An executor lives on both sides of the job, with one class for both:

- **in the notebook** (the session's backend, at submit): :meth:`Executor.check` refuses what it
  cannot run before anything starts; :meth:`Executor.settings` gives its own fields of the job's
  ``settings.json`` (:class:`~smlaunch.sdk.backends.emulated.job_settings.JobSettings`, whose
  ``executor.name`` names the class); :meth:`Executor.plan_early_start` may plan
  the first attempt's hosts so the agent starts them at once (processes);
  :meth:`Executor.submitted` may start a safety net once the agent runs (Docker: a reaper of the
  job's containers);
- **in the agent** (a detached process, built again from ``settings.json`` by
  :meth:`Executor.for_agent`): :meth:`Executor.adopt` hands over the first attempt's hosts when
  they were started before the agent ran (processes: early start), :meth:`Executor.prepare`
  adjusts the host trees the agent wrote,
  :meth:`Executor.launch` starts every host of one attempt and returns one :class:`HostProcess`
  each, :meth:`Executor.waiting` says why they are not all placed yet (a scheduler's reason),
  :meth:`Executor.kill_everything` SIGKILLs whatever of the job is left,
  :meth:`Executor.root_cause` names a failure only the executor can see (a container that could
  not start), and :meth:`Executor.close` releases what it holds once the job is terminal.

Signals go to the :class:`HostProcess` objects (``send_signal``), which the agent polls; an
executor never decides the job's status.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError

if TYPE_CHECKING:
    from smlaunch.sdk.backends.emulated.job_settings import ExecutorSettings, JobSettings
    from smlaunch.sdk.backends.emulated.state import JobDir
    from smlaunch.sdk.request.spec import TrainingJobSpec


class LineSource(Protocol):
    """A host's merged stdout and stderr, read line by line (``b""`` once it ended), as a pipe."""

    def readline(self) -> bytes:
        """The next line with its ``\\n``; ``b""`` at the end."""
        ...


class ChunkSource(Protocol):
    """A host's output that is already being read for the agent (hosts started before it ran:
    :class:`~smlaunch.sdk.backends.emulated.executors.process.spawn.DrainedOutput`)."""

    def read(self) -> bytes:
        """The host's next bytes, as they came (whole lines or not; waits for some); ``b""`` at the end."""
        ...


class HostProcess(Protocol):
    """One started host, shaped like the ``subprocess.Popen`` the agent supervises.

    ``poll()`` is ``None`` while the host runs and then its exit code (a shell's ``128 + N`` for
    signal ``N`` is what the agent reports; a ``Popen``'s negative code is converted by the agent).
    """

    pid: int
    """The host's process id on this machine, or ``-1`` when it is not a process of the agent
    (a container, a remote step): the agent's process-tree sweep then skips it."""

    @property
    def stdout(self) -> LineSource | ChunkSource | Any:
        """Every line the host prints, ``[algo-N/rank R]``-prefixed by the runtime where it can: a
        pipe (read through its ``fileno``), a :class:`LineSource` or a :class:`ChunkSource`."""
        ...

    def poll(self) -> int | None:
        """The exit code once the host ended, else ``None``."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """Block until the host ended (``subprocess.TimeoutExpired`` after ``timeout``)."""
        ...

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the host's runtime, which forwards it to its ranks; a no-op once ended."""
        ...

    def kill(self) -> None:
        """SIGKILL the host's runtime."""
        ...


class StartedHosts(Protocol):
    """The first attempt's hosts, already started when the agent runs (:meth:`Executor.adopt`):
    the agent skips writing their trees and the stop check before launching, and
    :meth:`Executor.launch` takes them over instead of starting new ones."""

    @property
    def started(self) -> float:
        """``time.time()`` when the first host was started: the job's ``TrainingStartTime``."""
        ...

    @property
    def record(self) -> dict[str, Any]:
        """The job's ``spec`` and ``state`` (JSON objects) and ``settings`` (the text of
        ``settings.json``) as read before any host started: what the agent runs the job from (a
        rank could write the files later); empty: the agent reads them."""
        ...

    @property
    def signals(self) -> Sequence[int]:
        """SIGTERM / SIGINT received before the agent installed its own handlers (read when it does)."""
        ...


@dataclass
class Host:
    """One emulated host of the job as the agent tracks it (the executor fills :attr:`proc`)."""

    name: str
    """``algo-1``, ``algo-2``, ... (SageMaker's host names)."""
    index: int
    """0-based position in the job's host list (``algo-1`` is 0)."""
    base: Path
    """This host's ``/opt/ml`` tree on this machine (``<job>/hosts/<name>``)."""
    proc: HostProcess | None = None
    """Set by :meth:`Executor.launch`."""
    exit_code: int | None = None
    """The host's exit code once the agent saw it end (``128 + N`` for signal ``N``)."""
    exited_at: float | None = None
    """When the agent saw it end (``time.time()``)."""
    pump: Any = field(default=None, repr=False)
    """The agent's thread copying :attr:`proc`'s lines into the logs."""

    @property
    def paths(self) -> contract.Paths:
        """The ``/opt/ml`` paths of this host's tree."""
        return contract.Paths(self.base)

    @property
    def failure_details(self) -> Path:
        """``output/failure.json``, which the host's runtime writes when a rank fails."""
        return self.paths.output_dir / contract.FAILURE_DETAILS_FILE


@dataclass
class LaunchContext:
    """What the agent hands :meth:`Executor.launch` for one attempt: the job, and how to speak."""

    spec: TrainingJobSpec
    """The job's CreateTrainingJob request."""
    settings: JobSettings
    """``settings.json``: how this machine runs the job (ranks per host, grace, S3 endpoint, the
    executor's own fields)."""
    job: JobDir
    """The job directory (logs, host trees, scratch space)."""
    hosts: Sequence[Host]
    """This attempt's hosts, their ``/opt/ml`` trees written by the agent."""
    grace: float
    """SIGTERM -> SIGKILL grace in seconds (``SMLAUNCH_STOP_GRACE_SECONDS`` of the hosts)."""
    say: Callable[[str], None]
    """A line of smlaunch's own into the job log (e.g. the resolved topology, once per attempt)."""


class Executor(ABC):
    """Starts, signals and cleans up the hosts of one local job; see the module docstring.

    Subclasses set :attr:`name` and implement :meth:`launch`; every other hook has a default that
    suits an executor whose hosts are processes of the agent.
    """

    name: ClassVar[str]
    """What ``LocalSession(executor=...)`` and ``settings.json`` (``executor.name``) call this executor."""
    hosts_called: ClassVar[str] = "emulated hosts"
    """What the job's hosts are here, as the status messages say it ("Launching requested pods",
    "Training in progress on the Slurm nodes")."""
    layered_requirements: ClassVar[bool] = True
    """``requirements.txt`` goes into a cached environment layered over the user's interpreter, of
    which each job gets a copy its hosts share (:mod:`smlaunch.runtime.requirements_cache`); False
    where hosts have interpreters of their own (containers)."""
    mounts_container_paths: ClassVar[bool] = False
    """Hosts see paths outside ``/opt/ml`` that the executor provides (containers: bind mounts);
    False when hosts see this machine's file system, where only ``/opt/ml`` is theirs."""
    requeues: ClassVar[bool] = False
    """A scheduler may signal the agent to preempt a managed-spot job and run it again later
    (Slurm's ``--requeue``): a signal that no ``stop()`` asked for then ends the attempt as
    ``Interrupted`` and the agent's next run continues the job (:meth:`requeued`)."""
    hosts_deliver_streams: ClassVar[bool] = False
    """Hosts run on another machine than the agent (pods), so FastFile (``s3://``) and Pipe
    channels, which must be on the host itself, are handed off: the agent decides each host's share
    and the host delivers it (:mod:`smlaunch.sdk.backends.emulated.handoff`)."""

    # --- in the notebook ------------------------------------------------------------------------

    def check(self, spec: TrainingJobSpec) -> None:
        """Raise :class:`~smlaunch.sdk.errors.ConfigurationError` if this executor cannot run ``spec``
        here (no engine, no image...), before anything is staged or started."""
        return None

    def check_container_dir(self, field: str, value: str, default: str, store: Path) -> None:
        """Raise :class:`~smlaunch.sdk.errors.ConfigurationError` unless each host can have its own
        directory at ``value``, a checkpoints' or TensorBoard ``LocalPath`` outside ``/opt/ml``
        (``default`` is the field's default; ``store`` the job store). The default accepts it
        only with :attr:`mounts_container_paths`."""
        if not self.mounts_container_paths:
            raise shared_container_dir(field, value, default)

    @abstractmethod
    def settings(self, spec: TrainingJobSpec) -> ExecutorSettings:
        """This executor's own fields of the job's ``settings.json`` (``executor``)."""

    def plan_early_start(self, spec: TrainingJobSpec, settings: JobSettings, job: JobDir) -> bool:
        """Write what lets the agent start the first attempt's hosts before it loads its own
        machinery (``job.early_start_file``); True if it did. The default plans nothing."""
        return False

    def submitted(self, job: JobDir) -> None:
        """Called once the job's agent runs: start any safety net that must outlive the agent."""
        return None

    # --- in the agent -----------------------------------------------------------------------------

    @classmethod
    def for_agent(cls, settings: JobSettings) -> Executor:
        """The executor the agent uses, from the job's ``settings.json`` (clients made on first use)."""
        return cls()

    def adopt(self) -> StartedHosts | None:
        """The first attempt's hosts if they were started before the agent ran (the agent asks
        once, before it reads the job), else None. The default starts every host in :meth:`launch`."""
        return None

    def prepare(self, context: LaunchContext) -> None:
        """Adjust the host trees the agent has just written for this attempt (e.g. the network
        interface a container sees), before any host starts."""
        return None

    @abstractmethod
    def launch(self, context: LaunchContext) -> None:
        """Start every host of ``context.hosts`` (one attempt) and set each ``host.proc``.

        A host that cannot start gets a :class:`HostProcess` that has already ended non-zero and
        says why on its ``stdout``: the agent's failure policy then ends the job. Hosts must be
        started from the calling (main) thread: the parent-death signal is tied to it. Log the
        resolved topology (hosts, master, ranks per host) with ``context.say`` once.
        """

    def waiting(self, context: LaunchContext) -> str | None:
        """Asked at every poll of the agent after :meth:`launch` until it answers None: why the
        attempt's hosts are not all placed yet, where a scheduler places them (pods). ``""`` while
        the scheduler has not answered; its reason once it did (``algo-2: Pending: 0/1 nodes are
        available: 1 Insufficient cpu.``); None once every host was placed (running or ended). The
        agent records ``Training`` only then, and ``Starting`` with the reason meanwhile, as
        SageMaker does before its instances are up. Must be cheap. The default: None (hosts start
        where :meth:`launch` starts them)."""
        return None

    def watch(self, context: LaunchContext) -> None:
        """Called at every poll of the agent while hosts run (every few tens of milliseconds): keep
        track of what :meth:`kill_everything` must find later. Must be cheap."""
        return None

    def signal(self, context: LaunchContext, hosts: Sequence[Host], sig: int) -> None:
        """Deliver ``sig`` to each of ``hosts`` (the agent's SIGTERM on stop, failure or max_run)."""
        for host in hosts:
            if host.proc is not None:
                host.proc.send_signal(sig)

    def kill_everything(self, context: LaunchContext) -> None:
        """SIGKILL whatever of the job is still alive, wherever it runs, and wait for it to end."""
        return None

    def root_cause(self, context: LaunchContext) -> dict[str, Any] | None:
        """``{"FailureReason", "ExitCode"}`` for a failure only the executor knows about (a host it
        could not start, one ended from outside), else None: the agent reads the hosts' reports."""
        return None

    def attempt_ended(self, context: LaunchContext) -> None:
        """Every host of the attempt has ended: release what belonged to them (e.g. containers)."""
        return None

    def close(self, context: LaunchContext) -> None:
        """The job is about to be terminal: release everything the executor holds for it."""
        return None

    def requeued(self) -> str | None:
        """In the agent: why this run continues a job its scheduler requeued (said in the job
        log), or None when this is the job's first run (:attr:`requeues`)."""
        return None


def shared_container_dir(field: str, value: str, default: str, why: str | None = None) -> ConfigurationError:
    """The refusal of a ``LocalPath`` outside ``/opt/ml`` that the hosts would share (``why``:
    why the executor cannot give each host its own directory there)."""
    reason = (
        "hosts run as processes on this machine, each with its own emulated /opt/ml tree; a "
        "path outside /opt/ml would be one directory shared by every host (and outside the job)"
    )
    return ConfigurationError(
        field,
        value,
        reason if why is None else f"{reason}, and each host cannot have its own directory there ({why})",
        f"use a path under /opt/ml (e.g. {default!r}), or "
        "LocalSession(executor='docker'), which mounts each host's directory at that path",
    )
