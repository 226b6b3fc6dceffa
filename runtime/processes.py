"""Process helpers shared by the local backend's agent and the host supervisor.

Part of the shared layer (see :mod:`runtime`): pure standard library, no torch, no supervisor.

- :func:`free_port`: a TCP port free on 127.0.0.1 right now.
- :func:`exit_code_of`: a ``Popen`` return code as a shell reports it (``-9`` becomes ``137``).
- :func:`die_with_parent`: a pre-exec hook giving a child ``PR_SET_PDEATHSIG`` against the process
  that spawns it (Linux), so a child never outlives its parent, even one killed with SIGKILL.
- :func:`set_parent_death_signal`: the same for the calling process itself (a FUSE server).
- :func:`pid_alive`: whether a process runs (a zombie does not).
- :func:`become_subreaper`: orphaned descendants are re-parented to this process, which can then
  find, kill and reap them.
- :func:`line_blocks`: a stream's output as blocks of whole lines, read in large chunks.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from typing import Any

READ_CHUNK_BYTES = 1 << 16
"""How much :func:`pipe_reader` asks the kernel for at once."""
PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal this process gets when the thread that created it ends."""
PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option: orphaned descendants are re-parented to this process instead of init."""

_prctl: Any = None


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


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (False when that cannot be told)."""
    try:
        import psutil

        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except Exception:
        return False


def pipe_reader(fd: int) -> Callable[[], bytes]:
    """``read()`` of up to :data:`READ_CHUNK_BYTES` from ``fd``; ``b""`` at its end (or on an error)."""

    def read() -> bytes:
        try:
            return os.read(fd, READ_CHUNK_BYTES)
        except OSError:
            return b""

    return read


def line_blocks(read: Callable[[], bytes]) -> Iterator[list[str]]:
    """The lines ``read()`` returns (``b""`` at the end), one list per chunk that ends a line.

    Lines come whole, decoded (UTF-8, errors replaced) and without their ``\\n`` or trailing
    ``\\r``: a line longer than a chunk waits for its end; a last line without ``\\n`` comes when the
    stream ends. Splitting a chunk in bulk costs far less than reading line by line.
    """
    pending = b""
    while True:
        chunk = read()
        if chunk:
            pending += chunk
            end = pending.rfind(b"\n") + 1
            if not end:
                continue
            block, pending = pending[: end - 1], pending[end:]
        elif pending:
            block, pending = pending, b""
        else:
            return
        text = block.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if "\r" in text:
            lines = [line.rstrip("\r") for line in lines]
        yield lines
