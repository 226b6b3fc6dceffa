"""The process executor: every host of the job is one ``python -m smlaunch.runtime`` process on this machine.

:class:`ProcessExecutor` (the default executor) starts each host runtime with the host->address map
(all ``127.0.0.1``) and a free master port, so concurrent jobs never collide; its own
``SAGEMAKER_BASE_DIR``; a private scratch directory the emulated MPI hosts share
(``SMLAUNCH_MPI_DIR``); and two pre-exec hooks, in this order: a private mount namespace in which its
tree is ``/opt/ml`` (:class:`~.spawn.PrivateOptMl`, described below), then
``PR_SET_PDEATHSIG=SIGHUP`` against the agent (:func:`smlaunch.contract.processes.die_with_parent`): if the
agent dies, even of SIGKILL, each host runtime kills and reaps its ranks before it exits.
Containment: every process the job ever started is remembered (a ``/proc`` scan at most every
``DESCENDANT_SCAN_SECONDS``) and SIGKILLed by :meth:`ProcessExecutor.kill_everything` if it still
carries the job's name, daemons included.

A job whose hosts need nothing staged (no input channels, no checkpoints to restore) is planned at
submit (:meth:`ProcessExecutor.plan_early_start`) and its first attempt's hosts are started before
the agent loads its own machinery (:mod:`.early`); the executor hands them to the agent
(:meth:`ProcessExecutor.adopt`) and launches them as that attempt.

Each emulated host of a process job sees its own tree at ``/opt/ml`` (Linux mount namespaces).

Scripts that write ``/opt/ml/model/model.pth`` or read ``/opt/ml/input/data/train`` literally work
as processes: every host runtime (and so every rank it starts) runs in a private mount namespace in
which its host tree is bind-mounted at ``/opt/ml``. The namespace is entered in the forked child,
before the runtime is executed (:meth:`.spawn.PrivateOptMl.hook`):

- as root, a new mount namespace; otherwise a new user namespace that maps only the user's own uid
  and gid, plus a mount namespace (what ``unshare -Urm`` does, except that the script keeps its own
  uid, and the capabilities the namespace grants end when the runtime is executed);
- every mount becomes a slave: nothing mounted in the namespace reaches the machine, while mounts the
  agent makes later on the machine still reach the host (where the kernel propagates them);
- where ``/opt/ml`` does not exist, a tmpfs covers ``/opt`` in the namespace, holding the original
  entries of ``/opt`` (bind-mounted back) and an empty ``ml``: nothing is created on the machine;
- the job store (the session's root) is covered by an empty tmpfs on which only what the job's
  hosts need is bind-mounted back at its own path (:func:`.layout.host_view`), then made
  read-only: no rank reaches a job's record (``state.json``, ``spec.json``, the stop file, the
  logs), its own or another's, nor another job's host trees. The requirements cache is writable
  there for the host runtime only: each rank gets a nested namespace in which it is read-only but
  for the job's own environment (:func:`smlaunch.runtime.requirements_cache.seal_hook`);
- checkpoints' and TensorBoard's ``LocalPath`` outside ``/opt/ml`` get the host tree's directory
  (which the agent syncs) bind-mounted there, so each host has its own; the agent creates a missing
  mount point (empty) on the machine first and says so, and a job that needs such a path on a
  machine without namespaces fails at start (:meth:`ProcessExecutor.check_container_dir` refuses
  it at submit).

The ``SM_*`` variables keep naming the host tree's own path, which stays valid inside the
namespace. Where namespaces cannot be had (not Linux, user namespaces disabled, no ``/opt``),
:meth:`.spawn.PrivateOptMl.unavailable` says why; the agent says it once in the job log and starts the
hosts as before (``SM_*`` paths work, literal ``/opt/ml`` paths do not). Limit: with ``mpirun`` one
launcher serves every emulated host, so all its ranks see the master host's tree at ``/opt/ml``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psutil

from smlaunch import contract
from smlaunch.contract.processes import free_port, has_children
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.executors.base import (
    Executor,
    Host,
    LaunchContext,
    shared_container_dir,
)
from smlaunch.sdk.backends.emulated.executors.docker.containers import FailedStart
from smlaunch.sdk.backends.emulated.executors.process.spawn import (
    PrivateOptMl,
    base_environment,
    no_private_opt_ml,
    start_host,
)
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, ProcessSettings
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError

if TYPE_CHECKING:
    from smlaunch.sdk.backends.emulated.executors.process.early import EarlyHosts
    from smlaunch.sdk.request.spec import TrainingJobSpec

DESCENDANT_SCAN_SECONDS = 1.0
"""How often the process trees of the job are scanned for processes to remember (a /proc walk)."""


class ProcessExecutor(Executor):
    """Hosts as local processes of the agent (module docstring); the default executor."""

    name: ClassVar[str] = "process"

    def __init__(self, started: EarlyHosts | None = None) -> None:
        self._opt_ml: bool | None = None
        """Whether this machine gives hosts a private ``/opt/ml`` (None: not probed yet)."""
        self._scratch: list[Path] = []
        self._known_pids: set[int] = set()
        self._descendants_seen_at = 0.0
        self._started = started
        """The first attempt's hosts, already started early (:mod:`.early`); None once launched."""

    def adopt(self) -> EarlyHosts | None:
        """The hosts started early (:mod:`.early`), which :meth:`launch` takes over."""
        return self._started

    def settings(self, spec: TrainingJobSpec) -> ProcessSettings:
        """The hosts run this interpreter (the submitter's)."""
        return ProcessSettings(python=sys.executable)

    def plan_early_start(self, spec: TrainingJobSpec, settings: JobSettings, job: JobDir) -> bool:
        """A job whose hosts need nothing staged (no input channels, no checkpoints to restore):
        write each host's tree and what starts its runtime (master port, scratch directory, each
        host's variables) to ``early-start.json``, so its agent starts the hosts before it loads
        its own machinery (:mod:`.early`)."""
        if spec.InputDataConfig or spec.CheckpointConfig is not None:
            return False
        names = layout.host_names(spec.ResourceConfig.InstanceCount)
        if layout.container_dirs(spec, contract.Paths(job.host_base(names[0]))):
            return False  # the agent makes their mount points, and says so
        port, grace = free_port(), settings.stop_grace_seconds
        hosts = []
        for name in names:
            tree = job.host_base(name)
            layout.write_host_tree(spec, tree, name, names)
            variables = self._host_variables(spec, settings, tree, names, port, grace)
            hosts.append({"name": name, "tree": str(tree), "env": variables})
        scratch = self._scratch_dir(job)
        plan = {
            "python": settings.executor_fields(ProcessSettings).python,
            "port": port,
            "s3_environment": settings.s3_environment(),
            "scratch": str(scratch),
            "view": layout.host_view(spec, settings, job, [scratch]),
            "hosts": hosts,
        }
        write_json_atomic(job.early_start_file, plan)
        return True

    def launch(self, context: LaunchContext) -> None:
        """One ``python -m smlaunch.runtime`` per host (:func:`.spawn.start_host`), from this (main) thread;
        for the first attempt of a job planned by :meth:`plan_early_start`, the hosts started early
        (:meth:`adopt`) are taken over instead."""
        spec, settings, hosts = context.spec, context.settings, context.hosts
        started, self._started = self._started, None
        port = started.port if started is not None else free_port()
        context.say(
            f"Job {spec.TrainingJobName}: {len(hosts)} host(s) ({', '.join(h.name for h in hosts)}) "
            f"emulating {spec.ResourceConfig.InstanceType}, "
            f"master {hosts[0].name}=127.0.0.1:{port}, "
            f"stop grace {context.grace:g} s, max run {spec.StoppingCondition.MaxRuntimeInSeconds} s"
        )
        emulated = settings.emulate_cuda
        if emulated:
            context.say(
                f"CUDA emulated on CPU: {emulated.gpus} {emulated.model} GPU(s) per host that this "
                "machine lacks; CUDA calls run on the CPU, NCCL uses gloo, numbers are a CPU run's "
                "(LocalSession(emulate_cuda=False) turns this off)"
            )
        if started is not None:
            self._scratch.append(started.scratch)
            self._opt_ml = started.opt_ml is not None
            if started.no_opt_ml is not None:
                context.say(no_private_opt_ml(started.no_opt_ml))
            for host in hosts:
                host.proc = started.procs[host.name]
            return
        scratch = self._scratch_dir(context.job)
        view = layout.host_view(spec, settings, context.job, [scratch])
        dirs = layout.container_dirs(spec, hosts[0].paths)
        view["binds"] = {path: str(d.relative_to(hosts[0].base)) for path, (_, d) in dirs.items()}
        if dirs:  # hosts without their own directory there would share the machine's: never start them
            why = _make_mount_points(context, dirs) or PrivateOptMl.from_view(view).unavailable(hosts[0].base)
            if why is not None:
                for host in hosts:
                    host.proc = FailedStart(host.name, f"{host.name} not started: {why}")
                return
        opt_ml = self._private_opt_ml(context, view)
        base_env = base_environment(settings.s3_environment(), scratch)
        python = settings.executor_fields(ProcessSettings).python
        names = [h.name for h in hosts]
        for host in hosts:
            env = dict(base_env)
            env.update(self._host_variables(spec, settings, host.base, names, port, context.grace))
            host.proc = start_host(python, host.base, env, opt_ml)

    @staticmethod
    def _host_variables(
        spec: TrainingJobSpec,
        settings: JobSettings,
        tree: Path,
        names: list[str],
        port: int,
        grace: float,
    ) -> dict[str, str]:
        """One host runtime's own variables (:func:`.layout.host_environment`, requirements)."""
        addresses = {name: "127.0.0.1" for name in names}
        variables = layout.host_environment(
            spec,
            tree,
            addresses,
            port,
            settings.processes_per_host,
            grace,
            settings.num_gpus,
            settings.emulate_cuda,
        )
        variables.update(layout.settings_environment(settings))
        return variables

    def check_container_dir(self, field: str, value: str, default: str, store: Path) -> None:
        """Accept a ``LocalPath`` outside ``/opt/ml`` where each host can have its own directory
        there: the host's mount namespace binds its tree's directory at that path, whose mount
        point exists or can be made, and which covers nothing the hosts need."""
        path = Path(os.path.normpath(value))
        for needed in _needed_paths(store):
            if path == needed or path in needed.parents:
                raise ConfigurationError(
                    field,
                    value,
                    f"would cover {needed}, which every host needs, in each host's view",
                    f"pass a directory of its own, e.g. {default!r} or a new directory such as "
                    "'/checkpoints'",
                )
        if store.resolve() in Path(os.path.realpath(path)).parents:
            raise ConfigurationError(
                field, value, f"is inside the job store {store}", f"pass e.g. {default!r}"
            )
        why = _mount_point_problem(path)
        if why is None:
            with tempfile.TemporaryDirectory() as tree:
                why = PrivateOptMl().unavailable(Path(tree))
        if why is not None:
            raise shared_container_dir(field, value, default, why)

    def _private_opt_ml(self, context: LaunchContext, view: dict[str, Any]) -> PrivateOptMl | None:
        """What gives each host of this attempt its own tree at /opt/ml and hides the job store but
        ``view`` (:func:`.layout.host_view`), or None after saying once why this machine cannot
        (probed once per job)."""
        mounts = PrivateOptMl.from_view(view)
        if self._opt_ml is None:
            why = mounts.unavailable(context.hosts[0].base)
            self._opt_ml = why is None
            if why is not None:
                context.say(no_private_opt_ml(why))
        return mounts if self._opt_ml else None

    def _scratch_dir(self, job: JobDir) -> Path:
        """A private directory (``mkdtemp``: 0700, unguessable) inside the job directory that this
        attempt's hosts share (the emulated MPI hosts meet there); removed when the job ends. Never a
        predictable path in the system temp directory, where others could read or pre-create it."""
        path = Path(tempfile.mkdtemp(prefix="scratch-", dir=job.path))
        self._scratch.append(path)
        return path

    def watch(self, context: LaunchContext) -> None:
        if time.monotonic() - self._descendants_seen_at >= DESCENDANT_SCAN_SECONDS:
            self._remember_descendants()  # a /proc scan: not at every poll

    def signal(self, context: LaunchContext, hosts: Sequence[Host], sig: int) -> None:
        self._remember_descendants()
        for host in hosts:
            if host.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    host.proc.send_signal(sig)

    def _remember_descendants(self) -> None:
        self._descendants_seen_at = time.monotonic()
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children(recursive=True):
                self._known_pids.add(child.pid)

    def kill_everything(self, context: LaunchContext) -> None:
        """SIGKILL every process of the job still alive: our descendants and any we saw before."""
        if has_children() is False and all(_gone(pid) for pid in self._known_pids):
            return  # the usual end: no descendant, nothing remembered alive; no scan of every process
        victims: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            victims.extend(psutil.Process().children(recursive=True))
        for pid in self._known_pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if _belongs_to_job(proc, context.spec.TrainingJobName):
                    victims.append(proc)
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(victims, timeout=5)
        self._reap_orphans(context.hosts)

    def _reap_orphans(self, hosts: Sequence[Host]) -> None:
        """Ranks orphaned by a dying runtime were reparented to the agent (a child subreaper)."""
        ours = {h.proc.pid for h in hosts if h.proc is not None}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children():
                if child.pid not in ours:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(child.pid, os.WNOHANG)

    def close(self, context: LaunchContext) -> None:
        for scratch in self._scratch:
            shutil.rmtree(scratch, ignore_errors=True)


SYSTEM_DIRS = (
    "/proc",
    "/sys",
    "/dev",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/tmp",
)
"""What every process on the machine needs: the kernel's file systems, programs and libraries, the
configuration and the temporary directory."""


def _needed_paths(store: Path) -> list[Path]:
    """Paths a host needs at their place, which a ``LocalPath`` must neither be nor hold: the
    system's, the job store, the interpreter's and smlaunch's own code (each as given and real)."""
    own = Path(contract.__file__).parents[1]
    places: list[str | Path] = [
        *SYSTEM_DIRS,
        store,
        sys.prefix,
        sys.base_prefix,
        Path(sys.executable).parent,
        own,
    ]
    needed: list[Path] = []
    for place in places:
        for path in (Path(os.path.abspath(place)), Path(os.path.realpath(place))):
            if path not in needed:
                needed.append(path)
    return needed


def _mount_point_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a mount point here (neither a directory nor creatable), or None."""
    if path.exists():
        return None if path.is_dir() else f"{path} exists and is not a directory"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} does not exist and cannot be created: {parent} is not a writable directory"
    return None


def _make_mount_points(context: LaunchContext, dirs: dict[str, tuple[str, Path]]) -> str | None:
    """Create each missing ``LocalPath`` outside ``/opt/ml`` (empty, on the machine: the host's own
    directory is bind-mounted there in its namespace) and say so; None, or why one could not be."""
    for local_path, (field, _) in dirs.items():
        path = Path(local_path)
        if path.is_dir():
            continue
        try:
            path.mkdir(parents=True)
        except OSError as error:
            return f"cannot create {path} as a mount point for {field}: {error}"
        context.say(f"created {path} as a mount point for {field}")
    return None


def _gone(pid: int) -> bool:
    """Whether no process has id ``pid`` now (one that may not be signalled still exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _belongs_to_job(proc: psutil.Process, job_name: str) -> bool:
    """A pid we once saw may have been reused: kill it only if it still carries this job."""
    try:
        env: dict[str, Any] = proc.environ()
    except psutil.Error:
        return False
    return env.get(contract.TRAINING_JOB_NAME_ENV) == job_name
