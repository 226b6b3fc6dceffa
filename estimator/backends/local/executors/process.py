"""The process executor: every host of the job is one ``python -m runtime`` process on this machine.

:class:`ProcessExecutor` (the default executor) starts each host runtime with the host->address map
(all ``127.0.0.1``) and a free master port, so concurrent jobs never collide; its own
``SAGEMAKER_BASE_DIR``; a private scratch directory the emulated MPI hosts share
(``SMLAUNCH_MPI_DIR``); and two pre-exec hooks, in this order: a private mount namespace in which its
tree is ``/opt/ml`` (:class:`PrivateOptMl`, below), then ``PR_SET_PDEATHSIG=SIGHUP`` against the
agent (:func:`runtime.processes.die_with_parent`): if the agent dies, even of SIGKILL, each host
runtime kills and reaps its ranks before it exits. Containment: every process the job ever started
is remembered (a ``/proc`` scan at most every ``DESCENDANT_SCAN_SECONDS``) and SIGKILLed by
:meth:`ProcessExecutor.kill_everything` if it still carries the job's name, daemons included.

Each emulated host of a process job sees its own tree at ``/opt/ml`` (Linux mount namespaces).

Scripts that write ``/opt/ml/model/model.pth`` or read ``/opt/ml/input/data/train`` literally work
as processes: every host runtime (and so every rank it starts) runs in a private mount namespace in
which its host tree is bind-mounted at ``/opt/ml``. The namespace is entered in the forked child,
before the runtime is executed (:meth:`PrivateOptMl.hook`):

- as root, a new mount namespace; otherwise a new user namespace that maps only the user's own uid
  and gid, plus a mount namespace (what ``unshare -Urm`` does, except that the script keeps its own
  uid, and the capabilities the namespace grants end when the runtime is executed);
- every mount becomes a slave: nothing mounted in the namespace reaches the machine, while mounts the
  agent makes later on the machine still reach the host (where the kernel propagates them);
- where ``/opt/ml`` does not exist, a tmpfs covers ``/opt`` in the namespace, holding the original
  entries of ``/opt`` (bind-mounted back) and an empty ``ml``: nothing is created on the machine.

The ``SM_*`` variables keep naming the host tree's own path, which stays valid inside the
namespace. Where namespaces cannot be had (not Linux, user namespaces disabled, no ``/opt``),
:meth:`PrivateOptMl.unavailable` says why; the agent says it once in the job log and starts the
hosts as before (``SM_*`` paths work, literal ``/opt/ml`` paths do not). Limit: with ``mpirun`` one
launcher serves every emulated host, so all its ranks see the master host's tree at ``/opt/ml``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import psutil

from estimator.backends.local import layout
from estimator.backends.local.executors.base import Executor, Host, LaunchContext
from runtime import contract
from runtime.processes import die_with_parent, free_port

DESCENDANT_SCAN_SECONDS = 1.0
"""How often the process trees of the job are scanned for processes to remember (a /proc walk)."""

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SLAVE = 0x80000


class PrivateOptMl:
    """Bind-mounts a host tree at ``target`` (``/opt/ml``) in a private mount namespace."""

    def __init__(self, target: str = contract.DEFAULT_BASE_DIR) -> None:
        self.target = target
        # Loaded here, in the parent: the hook runs between fork and exec and must not load libraries.
        self._libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None

    def hook(self, tree: Path) -> Callable[[], None]:
        """A pre-exec hook that puts the child in its own namespace with ``tree`` at the target."""
        source = str(tree)
        return lambda: self._enter(source)

    def unavailable(self, tree: Path) -> str | None:
        """None when a child can get ``tree`` at the target here (tried in a throwaway child), else why."""
        if self._libc is None:
            return f"mount namespaces need Linux, not {sys.platform}"
        true = shutil.which("true") or "/bin/true"
        read, write = os.pipe()

        def probe() -> None:
            try:
                self._enter(str(tree))
            except OSError as error:
                os.write(write, str(error).encode())
                os._exit(1)

        try:
            code = subprocess.run([true], preexec_fn=probe, pass_fds=(write,), check=False).returncode
        except (OSError, subprocess.SubprocessError) as error:
            code, why = 1, str(error)
        else:
            why = ""
        finally:
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                why = pipe.read().decode(errors="replace") or why
        return None if code == 0 else why or f"the probe exited with code {code}"

    # --- in the forked child ------------------------------------------------------------------

    def _check(self, what: str, result: int) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def _mount(
        self,
        source: str | None,
        target: str,
        fstype: str | None,
        flags: int,
        what: str,
        data: str | None = None,
    ) -> None:
        assert self._libc is not None
        fields = [None if s is None else os.fsencode(s) for s in (source, target, fstype)]
        self._check(what, self._libc.mount(*fields, flags, None if data is None else os.fsencode(data)))

    def _enter(self, tree: str) -> None:
        assert self._libc is not None
        uid, gid = os.getuid(), os.getgid()
        root = os.geteuid() == 0
        self._check("unshare", self._libc.unshare(_CLONE_NEWNS if root else _CLONE_NEWNS | _CLONE_NEWUSER))
        if not root:
            maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
            for name, text in maps:
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        # First, before anything is mounted: nothing done here may propagate to the machine.
        self._mount(None, "/", None, _MS_REC | _MS_SLAVE, "making every mount a slave")
        if not os.path.isdir(self.target):
            self._cover_parent()
        self._mount(tree, self.target, None, _MS_BIND | _MS_REC, f"bind-mounting {tree} at {self.target}")

    def _cover_parent(self) -> None:
        """A tmpfs over the target's parent, with the parent's entries bind-mounted back and the
        target created empty."""
        parent, name = os.path.split(self.target.rstrip("/"))
        if not os.path.isdir(parent):
            raise OSError(2, f"{parent} does not exist, so {self.target} cannot be mounted")
        original = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)  # still reaches what the tmpfs hides
        entries = os.listdir(original)
        self._mount("tmpfs", parent, "tmpfs", 0, f"mounting a tmpfs over {parent}", "mode=755")
        for entry in entries:
            source, placed = f"/proc/self/fd/{original}/{entry}", os.path.join(parent, entry)
            if os.path.islink(source):
                os.symlink(os.readlink(source), placed)
                continue
            if os.path.isdir(source):
                os.mkdir(placed)
            else:
                os.close(os.open(placed, os.O_CREAT | os.O_WRONLY, 0o644))
            self._mount(source, placed, None, _MS_BIND | _MS_REC, f"bind-mounting {parent}/{entry} back")
        os.mkdir(os.path.join(parent, name))
        os.close(original)


class ProcessExecutor(Executor):
    """Hosts as local processes of the agent (module docstring); the default executor."""

    name: ClassVar[str] = "process"

    def __init__(self) -> None:
        self._opt_ml: PrivateOptMl | Literal[False] | None = None
        self._scratch: list[Path] = []
        self._known_pids: set[int] = set()
        self._descendants_seen_at = 0.0

    def launch(self, context: LaunchContext) -> None:
        """One ``python -m runtime`` per host, spawned from this (main) thread: PDEATHSIG is tied
        to the thread that forked, and the pre-exec hooks only enter the host's mount namespace and
        call prctl and getppid, PDEATHSIG last."""
        spec, settings, hosts = context.spec, context.settings, context.hosts
        port = free_port()
        addresses = {h.name: "127.0.0.1" for h in hosts}
        ranks = int(settings["processes_per_host"])
        python = settings.get("python") or sys.executable
        context.say(
            f"Job {spec.TrainingJobName}: {len(hosts)} host(s) {[h.name for h in hosts]} "
            f"emulating {spec.ResourceConfig.InstanceType}, {ranks} process(es) per host for "
            f"per-GPU launchers, master {hosts[0].name}=127.0.0.1:{port}, "
            f"stop grace {context.grace:g} s, max run {spec.StoppingCondition.MaxRuntimeInSeconds} s"
        )
        emulated = settings.get("emulate_cuda")
        if emulated:
            context.say(
                f"CUDA emulated on CPU: {emulated['gpus']} {emulated['model']} GPU(s) per host that this "
                "machine lacks; CUDA calls run on the CPU, NCCL uses gloo, numbers are a CPU run's "
                "(LocalSession(emulate_cuda=False) turns this off)"
            )
        # SIGHUP, not SIGKILL: a host runtime must live long enough to kill and reap everything its
        # ranks started (runtime.supervisor, point 5).
        die_with_agent = die_with_parent(signal.SIGHUP)
        opt_ml = self._private_opt_ml(context)
        base_env = dict(os.environ)
        # The S3 the session talks to (e.g. a test's moto server) is the S3 the hosts talk to:
        # the runtime fetches s3:// code with boto3, which honours these variables.
        if settings.get("s3_endpoint_url"):
            base_env.setdefault("AWS_ENDPOINT_URL_S3", str(settings["s3_endpoint_url"]))
        if settings.get("s3_region_name"):
            base_env.setdefault("AWS_REGION", str(settings["s3_region_name"]))
        base_env[contract.SMLAUNCH_MPI_DIR] = str(self._scratch_dir(context))
        for host in hosts:
            env = dict(base_env)
            env.update(
                layout.host_environment(
                    spec,
                    host.base,
                    addresses,
                    port,
                    ranks,
                    context.grace,
                    settings.get("num_gpus"),
                    emulated,
                )
            )
            env.update(layout.requirements_environment(settings))
            host.proc = subprocess.Popen(
                [python, "-m", "runtime"],
                cwd=str(host.base),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_in_order(opt_ml.hook(host.base) if opt_ml is not None else None, die_with_agent),
            )

    def _private_opt_ml(self, context: LaunchContext) -> PrivateOptMl | None:
        """What gives each host its own tree at /opt/ml (probed once per job), or None after saying
        once why this machine cannot."""
        if self._opt_ml is None:
            mounts = PrivateOptMl()
            why = mounts.unavailable(context.hosts[0].base)
            self._opt_ml = mounts if why is None else False
            if why is not None:
                context.say(
                    f"No private /opt/ml per host on this machine ({why}): scripts must take their "
                    "paths from SM_* variables (or use LocalSession(executor='docker'))"
                )
        return self._opt_ml or None

    def _scratch_dir(self, context: LaunchContext) -> Path:
        """A private directory (``mkdtemp``: 0700, unguessable) inside the job directory that this
        attempt's hosts share (the emulated MPI hosts meet there); removed when the job ends. Never a
        predictable path in the system temp directory, where others could read or pre-create it."""
        path = Path(tempfile.mkdtemp(prefix="scratch-", dir=context.job.path))
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


def _belongs_to_job(proc: psutil.Process, job_name: str) -> bool:
    """A pid we once saw may have been reused: kill it only if it still carries this job."""
    try:
        env: dict[str, Any] = proc.environ()
    except psutil.Error:
        return False
    return env.get(contract.TRAINING_JOB_NAME_ENV) == job_name


def _in_order(*hooks: Callable[[], None] | None) -> Callable[[], None] | None:
    """One pre-exec hook running ``hooks`` (None ones skipped) in order."""
    present = [hook for hook in hooks if hook is not None]
    if not present:
        return None

    def run() -> None:
        for hook in present:
            hook()

    return run
