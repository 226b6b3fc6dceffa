"""Starting one host runtime as a process of the agent: its private ``/opt/ml``, its parent-death
signal, its environment.

Used by :class:`~smlaunch.sdk.backends.emulated.executors.process.executor.ProcessExecutor` for every
attempt, and
by :mod:`.early` to start the first attempt's hosts before the agent
has loaded its own machinery; so this module imports the standard library and the shared layer of
``runtime`` only (never the job spec, pydantic or psutil).

:class:`PrivateOptMl` gives each host its own tree at ``/opt/ml`` in a private mount namespace
(described in :mod:`smlaunch.sdk.backends.emulated.executors.process.executor`); :func:`start_host` starts one
``python -m smlaunch.runtime`` with that namespace and ``PR_SET_PDEATHSIG=SIGHUP`` against the calling
thread (:func:`smlaunch.contract.processes.die_with_parent`), in this order. :class:`DrainedOutput` reads a
host's output while the agent is still loading.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from smlaunch import contract
from smlaunch.contract import mounts
from smlaunch.contract.mounts import MS_BIND, MS_NODEV, MS_NOSUID, MS_REC
from smlaunch.contract.processes import die_with_parent, pipe_reader

STORE_VIEW_ENV = "SMLAUNCH_STORE_VIEW"
"""Where a Slurm step finds the :meth:`PrivateOptMl.view` it enters (JSON), set by the executor."""
DRAINED_BYTES = 16 << 20
"""At most this much of a host's output waits in a :class:`DrainedOutput` for the agent's log pump."""


class PrivateOptMl:
    """Bind-mounts a host tree at ``target`` (``/opt/ml``) in a private mount namespace, where the
    job store is hidden: ``store`` (the store's root, holding every job's record) is covered by an
    empty read-only tmpfs, on which only ``writable`` and ``read_only`` paths (the job's host trees,
    its scratch, its code...) are mounted back at their own paths. ``binds`` maps a path outside
    the target (checkpoints' ``LocalPath``...) to a directory of the host's tree, bind-mounted
    there: each host has its own directory at that path (which must exist on the machine)."""

    def __init__(
        self,
        target: str = contract.DEFAULT_BASE_DIR,
        store: str | None = None,
        writable: Iterable[str] = (),
        read_only: Iterable[str] = (),
        binds: Mapping[str, str] | None = None,
    ) -> None:
        self.target = target
        self.store = os.path.realpath(store) if store is not None else None
        self.writable = sorted({os.path.realpath(p) for p in writable})
        self.read_only = sorted({os.path.realpath(p) for p in read_only})
        self.binds = dict(sorted((binds or {}).items()))  # a parent before what lies below it
        # Loaded here, in the parent: the hook runs between fork and exec and must not load libraries.
        self._libc = mounts.load_libc()

    def view(self) -> dict[str, Any]:
        """What :meth:`from_view` makes this again from (JSON: for ``early-start.json``, a Slurm step)."""
        return {
            "store": self.store,
            "writable": self.writable,
            "read_only": self.read_only,
            "binds": self.binds,
        }

    @classmethod
    def from_view(cls, view: Mapping[str, Any] | None) -> PrivateOptMl:
        """The :class:`PrivateOptMl` that :meth:`view` described (None: the store left as it is)."""
        if not view:
            return cls()
        return cls(
            store=view["store"],
            writable=view["writable"],
            read_only=view["read_only"],
            binds=view.get("binds"),
        )

    def hook(self, tree: Path) -> Callable[[], None]:
        """A pre-exec hook that puts the child in its own namespace with ``tree`` at the target."""
        source = str(tree)
        return lambda: self._enter(source)

    def unavailable(self, tree: Path) -> str | None:
        """None when a child can get ``tree`` at the target here (tried in a throwaway child), else why."""
        if self._libc is None:
            return f"mount namespaces need Linux, not {sys.platform}"
        return mounts.unavailable(lambda: self._enter(str(tree)))

    # --- in the forked child ------------------------------------------------------------------

    @property
    def _c(self) -> ctypes.CDLL:
        """The C library (in the child: only where :meth:`unavailable` said it can work)."""
        assert self._libc is not None
        return self._libc

    def _enter(self, tree: str) -> None:
        mounts.enter_namespace(self._c)
        source = os.open(tree, os.O_PATH | os.O_DIRECTORY)  # the tree, even once the store is covered
        binds = [
            (os.open(os.path.join(tree, relative), os.O_PATH | os.O_DIRECTORY), target)
            for target, relative in self.binds.items()
        ]
        if self.store is not None:
            self._hide_store(self.store)
        if not os.path.isdir(self.target):
            self._cover_parent()
        where = f"bind-mounting {tree} at {self.target}"
        mounts.mount(self._c, f"/proc/self/fd/{source}", self.target, None, MS_BIND | MS_REC, where)
        os.close(source)
        for handle, target in binds:
            where = f"bind-mounting {os.path.join(tree, self.binds[target])} at {target}"
            mounts.mount(self._c, f"/proc/self/fd/{handle}", target, None, MS_BIND | MS_REC, where)
            os.close(handle)

    def _hide_store(self, store: str) -> None:
        """Cover ``store`` with an empty tmpfs, mount what the host keeps back, make the cover read-only."""
        inside = [
            (path, writable)
            for writable, paths in ((True, self.writable), (False, self.read_only))
            for path in paths
            if path.startswith(store.rstrip("/") + "/") and os.path.lexists(path)
        ]
        # A path below another kept one comes with it (and a mount point made there would be made
        # on the machine's file system).
        kept = [
            (os.open(path, os.O_PATH), path, writable)
            for path, writable in sorted(inside)
            if not any(path.startswith(other + "/") for other, _ in inside)
        ]
        cover = MS_NOSUID | MS_NODEV
        mounts.mount(self._c, "tmpfs", store, "tmpfs", cover, f"covering the job store {store}", "mode=755")
        for handle, path, writable in kept:
            source = f"/proc/self/fd/{handle}"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.isdir(source):
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            mounts.mount(self._c, source, path, None, MS_BIND | MS_REC, f"bind-mounting {path} back")
            os.close(handle)
            if not writable:
                mounts.read_only(self._c, path)
        mounts.read_only(self._c, store)

    def _cover_parent(self) -> None:
        """A tmpfs over the target's parent, with the parent's entries bind-mounted back and the
        target created empty."""
        parent, name = os.path.split(self.target.rstrip("/"))
        if not os.path.isdir(parent):
            raise OSError(2, f"{parent} does not exist, so {self.target} cannot be mounted")
        original = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)  # still reaches what the tmpfs hides
        entries = os.listdir(original)
        mounts.mount(self._c, "tmpfs", parent, "tmpfs", 0, f"mounting a tmpfs over {parent}", "mode=755")
        for entry in entries:
            source, placed = f"/proc/self/fd/{original}/{entry}", os.path.join(parent, entry)
            if os.path.islink(source):
                os.symlink(os.readlink(source), placed)
                continue
            if os.path.isdir(source):
                os.mkdir(placed)
            else:
                os.close(os.open(placed, os.O_CREAT | os.O_WRONLY, 0o644))
            mounts.mount(
                self._c, source, placed, None, MS_BIND | MS_REC, f"bind-mounting {parent}/{entry} back"
            )
        os.mkdir(os.path.join(parent, name))
        os.close(original)


def no_private_opt_ml(why: str) -> str:
    """The job-log line that says, once per job, why hosts share the machine's ``/opt/ml`` (and
    see the whole job store)."""
    return (
        f"No private /opt/ml per host on this machine ({why}): scripts must take their "
        "paths from SM_* variables, and the job store is not hidden from them "
        "(or use LocalSession(executor='docker'))"
    )


def base_environment(s3_environment: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """What every host runtime of an attempt inherits besides its own variables: the agent's
    environment, the S3 the session talks to (``JobSettings.s3_environment``, below what the
    agent's environment sets), and the attempt's scratch directory (``SMLAUNCH_MPI_DIR``, where the
    emulated MPI hosts meet)."""
    env = dict(os.environ)
    for name, value in s3_environment.items():
        env.setdefault(name, value)
    env[contract.SMLAUNCH_MPI_DIR] = str(scratch)
    return env


def start_host(
    python: str, tree: Path, env: Mapping[str, str], opt_ml: PrivateOptMl | None
) -> subprocess.Popen[bytes]:
    """One ``python -m smlaunch.runtime`` for the host whose ``/opt/ml`` tree is ``tree``, its stdout and
    stderr merged into one pipe. Call it from the main thread: ``PR_SET_PDEATHSIG`` is tied to the
    thread that forks. The pre-exec hooks only enter the host's mount namespace (``opt_ml``; None:
    the machine's) and call prctl and getppid, PDEATHSIG last (:func:`host_set_up`)."""
    return subprocess.Popen(
        [python, "-m", "smlaunch.runtime"],
        cwd=str(tree),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=host_set_up(tree, opt_ml),
    )


def host_set_up(tree: Path, opt_ml: PrivateOptMl | None) -> Callable[[], None] | None:
    """What a host runtime's child does before it becomes the runtime (:func:`start_host`, and
    :func:`.forked.fork_host`): enter the host's mount namespace (``opt_ml``; None: the machine's),
    then ``PR_SET_PDEATHSIG=SIGHUP`` against the calling thread. Make it in the parent, in the
    thread that starts the child; None when there is nothing to do."""
    # SIGHUP, not SIGKILL: a host runtime must live long enough to kill and reap everything its
    # ranks started (smlaunch.runtime.supervision.supervisor, point 5).
    hooks = [opt_ml.hook(tree) if opt_ml is not None else None, die_with_parent(signal.SIGHUP)]
    present = [hook for hook in hooks if hook is not None]
    if not present:
        return None

    def run() -> None:
        for hook in present:
            hook()

    return run


class DrainedOutput:
    """A host's output pipe, read by a thread of its own from the moment
    :mod:`~smlaunch.sdk.backends.emulated.early_start` started the hosts: the agent's log pump
    (:meth:`read`) takes the bytes from here. Without it, nothing would read a
    host's pipe while the agent loads (about 0.2 s, after the user's first line), so a rank that
    prints much at its start would wait on a full pipe for the agent's start-up. Holds at most
    :data:`DRAINED_BYTES` unread: beyond that the host's pipe fills and the rank waits, as on a
    plain pipe."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        self._chunks: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._changed = threading.Condition()
        self._ended = False
        self.printed = threading.Event()
        """Set once the host has printed something, or ended."""
        threading.Thread(target=self._drain, name="early-output", daemon=True).start()

    def _drain(self) -> None:
        read = pipe_reader(self._pipe.fileno())
        while True:
            data = read()
            with self._changed:
                while self._held > DRAINED_BYTES:
                    self._changed.wait()
                self._chunks.append(data)
                self._held += len(data)
                self._changed.notify_all()
            self.printed.set()
            if not data:
                return

    def read(self) -> bytes:
        """The host's next bytes, as they came (whole lines or not); ``b""`` once it ended."""
        with self._changed:
            while not self._chunks and not self._ended:
                self._changed.wait()
            if not self._chunks:
                return b""
            data = self._chunks.popleft()
            self._held -= len(data)
            self._ended = not data
            self._changed.notify_all()
            return data
