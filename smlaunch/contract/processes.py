"""Process helpers shared by the local backend's agent and the host supervisor.

Part of the shared layer (see :mod:`smlaunch.contract`): pure standard library, no torch, no supervisor.

- :func:`free_port`: a TCP port free on 127.0.0.1 right now.
- :func:`exit_code_of`: a ``Popen`` return code as a shell reports it (``-9`` becomes ``137``).
- :func:`die_with_parent`: a pre-exec hook giving a child ``PR_SET_PDEATHSIG`` against the process
  that spawns it (Linux), so a child never outlives its parent, even one killed with SIGKILL.
- :func:`set_parent_death_signal`: the same for the calling process itself (a FUSE server).
- :func:`pid_alive`: whether a process runs (a zombie does not).
- :func:`has_children`: whether this process has a child, without scanning every process.
- :func:`become_subreaper`: orphaned descendants are re-parented to this process, which can then
  find, kill and reap them.
- :func:`line_chunks`: a stream's output as byte blocks of whole lines, read in large chunks;
  :func:`prefix_lines` prefixes every line of such a block at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

READ_CHUNK_BYTES = 1 << 16
"""How much :func:`pipe_reader` asks the kernel for at once."""
BATCH_SECONDS = 0.001
"""After a read that returned less than half a chunk, :func:`pipe_reader` lets the writer go on for
this long before it reads again, so that a rank writing line by line is read a chunk at a time (not
one wake-up, and one pass down the log pipeline, per line)."""
PIPE_BYTES = 1 << 18
"""What :func:`pipe_reader` asks the kernel to hold in the pipe it reads (Linux; 64 KiB by default),
so that the writer rarely waits while the reader waits :data:`BATCH_SECONDS`."""
PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal this process gets when the thread that created it ends."""
PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option: orphaned descendants are re-parented to this process instead of init."""

_prctl: Any = None


def environment_importing_smlaunch() -> dict[str, str]:
    """This process's environment with the directory that holds ``smlaunch`` first on ``PYTHONPATH``.

    For the processes we start with ``python -m smlaunch...`` (the agent, the Docker reaper): they
    must import this very copy even when it is not installed (tests, a notebook beside a checkout).
    """
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def prctl_function() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up once; None where there is none (macOS)."""
    global _prctl
    if _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the rendezvous binds it moments later)."""
    import socket  # not at the top: every host runtime imports this module before its ranks start

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a shell reports it: ``-N`` (killed by signal N) becomes ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def die_with_parent(signum: int, then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """A ``preexec_fn`` sending the child ``signum`` when the thread spawning it ends (Linux).

    Spawn from a thread that lives as long as the child should (the main thread): Linux ties the
    death signal to the thread that forked. When the parent is already gone by the time the hook
    runs, the child exits ``128 + signum`` at once. ``then`` runs afterwards in the child (e.g.
    joining the host's cgroup). Returns None where there is no ``prctl`` (macOS): the child then
    outlives a parent killed with SIGKILL, and only the parent's own clean-up ends it.

    ``prctl`` is looked up here, in the parent: the child of a multi-threaded process must not
    ``dlopen`` (another thread may have held the loader lock at fork time); it only calls it.
    """
    prctl = prctl_function()
    if prctl is None:
        return None
    parent_pid = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(128 + signum)
        if then is not None:
            then()

    return preexec


def set_parent_death_signal(signum: int) -> bool:
    """Have Linux send this process ``signum`` when the thread that started it ends.

    Returns False where there is no ``prctl`` (macOS). A caller that must not outlive its parent
    also compares :func:`os.getppid` with the parent it expects afterwards: the parent may have
    died before the call.
    """
    prctl = prctl_function()
    if prctl is None:
        return False
    prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    return True


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); False where that is not possible."""
    prctl = prctl_function()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def has_children() -> bool | None:
    """Whether this process has a child (alive or zombie), from ``/proc`` without a scan of every
    process; None where that cannot be told (not Linux, or a kernel without
    ``/proc/<pid>/task/<tid>/children``). For a subreaper, no child means no descendant."""
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children", "rb") as handle:
                if handle.read().strip():
                    return True
    except OSError:
        return None
    return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (False when that cannot be told)."""
    try:
        import psutil

        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except Exception:
        return False


def pipe_reader(fd: int) -> Callable[[], bytes]:
    """``read()`` of up to :data:`READ_CHUNK_BYTES` from ``fd``; ``b""`` at its end (or on an error).

    A read that follows one that returned little waits :data:`BATCH_SECONDS` first: a line that
    comes alone is passed on at once, a flood of lines in chunks. The first time a read fills a
    whole chunk (the writer outpaces the reader), the pipe is widened to :data:`PIPE_BYTES` where
    the kernel allows: only pipes that need it count against the user's pipe quota.
    """
    little = False
    widened = False

    def read() -> bytes:
        nonlocal little, widened
        if little:
            time.sleep(BATCH_SECONDS)
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except OSError:
            return b""
        little = len(data) < READ_CHUNK_BYTES // 2
        if len(data) == READ_CHUNK_BYTES and not widened:
            widened = True
            _widen_pipe(fd)
        return data

    return read


def _widen_pipe(fd: int) -> None:
    set_pipe_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if set_pipe_size is not None:
        with contextlib.suppress(OSError):  # over the user's pipe quota, or not a pipe: as it is
            fcntl.fcntl(fd, set_pipe_size, PIPE_BYTES)


def line_chunks(read: Callable[[], bytes]) -> Iterator[bytes]:
    """The lines ``read()`` returns (``b""`` at the end), as blocks of whole lines in valid UTF-8.

    Each block is what one read completed: one or more whole lines, each ending with ``\\n`` (a
    trailing ``\\r`` removed). A line longer than a chunk waits for its end; a last line without
    ``\\n`` comes, with one, when the stream ends. Bytes that are not UTF-8 become U+FFFD. Working
    on a chunk at a time (a search for ``\\n``, no per-line Python) keeps a chatty rank's lines as
    cheap to pass on as they are to write.
    """
    pending: list[bytes] = []
    while True:
        chunk = read()
        if not chunk:
            if pending:
                yield _clean(b"".join(pending) + b"\n")
            return
        end = chunk.rfind(b"\n") + 1
        if not end:
            pending.append(chunk)
            continue
        block = chunk[:end]
        if pending:
            block = b"".join(pending) + block
            pending.clear()
        if end < len(chunk):
            pending.append(chunk[end:])
        yield _clean(block)


_CR_BEFORE_NEWLINE = re.compile(rb"\r+\n")


def _clean(block: bytes) -> bytes:
    """``block`` without ``\\r`` before its newlines, in valid UTF-8."""
    if b"\r" in block:
        block = _CR_BEFORE_NEWLINE.sub(b"\n", block)
    if not block.isascii():
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            block = block.decode("utf-8", errors="replace").encode("utf-8")
    return block


def prefix_lines(block: bytes, prefix: bytes) -> bytes:
    """Every line of a :func:`line_chunks` block with ``prefix`` in front, in one pass."""
    return prefix + block[:-1].replace(b"\n", b"\n" + prefix) + b"\n"
