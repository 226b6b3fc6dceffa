"""A host runtime started as a fork of the calling interpreter instead of a new one.

:func:`fork_host` is what :mod:`.early` uses, where it can, instead of
:func:`~smlaunch.sdk.backends.emulated.executors.process.spawn.start_host`: the child is set up exactly as
``start_host``'s (the host's cwd and environment, stdin from ``/dev/null``, stdout and stderr into
one pipe, the host's private ``/opt/ml``, ``PR_SET_PDEATHSIG=SIGHUP``) and then runs
``smlaunch.runtime.__main__.main`` in the interpreter it already has, rather than ``exec``-ing
``python -m smlaunch.runtime``. That skips the new interpreter's start-up and ``site`` (and whatever the
parent has imported already), about 40 ms of a 2-core machine that every user's first line waits
for (``benchmarks/first_line.py``).

Where it differs from an ``exec``-ed host, and what makes up for it:

- ``ps`` and ``/proc/<pid>/cmdline`` would show the parent's command line: :func:`show_command_line`
  rewrites it in place to ``<python> -m runtime``, as ``setproctitle`` does.
- ``/proc/<pid>/environ`` shows the environment the parent was started with, not the host's (which
  ``os.environ`` holds, and the ranks inherit): the agent is started with ``TRAINING_JOB_NAME`` so
  that every process of a job carries it there.
- Interpreter options taken from the host's environment at start-up (``PYTHON*`` variables) are the
  parent's: the host runtime does not depend on them, and its ranks, new interpreters, get them.

Only a single-threaded parent may fork this way (a lock another thread held at fork time would stay
held in the child forever), and only to run the same interpreter the host would have run.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, NoReturn

from smlaunch.sdk.backends.emulated.executors.process.spawn import PrivateOptMl, host_set_up

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_FAILED_SET_UP = 127
"""The child's exit code when it could not become the host (the parent raises ``OSError`` then)."""


def can_fork(python: str) -> bool:
    """Whether :func:`fork_host` may start a host meant to run ``python -m smlaunch.runtime``: the caller is
    that very interpreter, on Linux, and runs no other thread."""
    return sys.platform == "linux" and python == sys.executable and threading.active_count() == 1


class ForkedHost:
    """A host runtime :func:`fork_host` started: a child of this process, shaped like the
    ``subprocess.Popen`` that ``start_host`` returns (the agent's ``HostProcess``)."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        """The host runtime's process id."""
        self.stdout = stdout
        """Its stdout and stderr, merged, as a pipe."""
        self.returncode: int | None = None
        """As ``Popen.returncode``: None while it runs, then its exit code (``-N``: killed by signal N)."""
        self.args = [sys.executable, "-m", "smlaunch.runtime"]
        """The command it runs, as ``Popen.args``."""
        self._waitpid_lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code once the host ended, else None; never blocks (as ``Popen.poll``)."""
        if self.returncode is None and self._waitpid_lock.acquire(blocking=False):
            try:
                self._reap(os.WNOHANG)
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the host ended; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        if timeout is None:
            with self._waitpid_lock:
                self._reap(0)
        else:
            deadline, delay = time.monotonic() + timeout, 0.0005
            while self.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the host runtime; a no-op once it ended (and was reaped)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the host runtime."""
        self.send_signal(signal.SIGKILL)

    def _reap(self, flags: int) -> None:
        if self.returncode is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: its status is lost (Popen says 0 too)
            pid, status = self.pid, 0
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def fork_host(tree: Path, env: Mapping[str, str], opt_ml: PrivateOptMl | None) -> ForkedHost:
    """The host runtime of the host whose ``/opt/ml`` tree is ``tree``, in a fork of this process
    (:func:`can_fork` must hold), its ``/opt/ml`` made private by ``opt_ml`` (None: the
    machine's), set up as :func:`.spawn.start_host`'s child is (:func:`.spawn.host_set_up`).
    Returns once the child is set up; raises ``OSError`` saying why when it could not be, and then
    no child runs."""
    set_up = host_set_up(tree, opt_ml)
    out_read, out_write = os.pipe()
    report_read, report_write = os.pipe()
    # Blocked across the fork: the child resets the handlers this process has before it can get one.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in (out_read, out_write, report_read, report_write):
            os.close(fd)
        raise
    if pid == 0:
        _become_host(str(tree), dict(env), set_up, out_write, report_write)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(out_write)
    os.close(report_write)
    with os.fdopen(report_read, "rb") as report:
        why = report.read()
    if why:
        os.close(out_read)
        os.waitpid(pid, 0)
        raise OSError(f"the host runtime for {tree} could not start: {why.decode(errors='replace')}")
    return ForkedHost(pid, os.fdopen(out_read, "rb"))


def _become_host(
    tree: str, env: dict[str, str], set_up: Callable[[], None] | None, out: int, report: int
) -> NoReturn:
    """In the child: become ``cd tree && python -m smlaunch.runtime`` with ``env``; never returns."""
    try:
        gc.freeze()  # the parent's objects are never collected here: some name descriptors closed below
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.closerange(3, report)  # every descriptor of the parent's but the report pipe
            os.closerange(report + 1, os.sysconf("SC_OPEN_MAX"))
            os.chdir(tree)
            if set_up is not None:
                set_up()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a new interpreter has them
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except BaseException as error:
            os.write(report, f"{type(error).__name__}: {error}".encode())
            os._exit(_FAILED_SET_UP)
        os.close(report)  # the parent's fork_host returns now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [sys.executable, "-m", "smlaunch.runtime"]
        sys.path[0] = tree  # what `python -m smlaunch.runtime` started in `tree` has first on its path
        show_command_line(sys.argv)
        from smlaunch.runtime.__main__ import exit_now, main  # the whole host runtime: in the child only

        exit_now(main([]))
    except BaseException:
        traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)  # main raised, which it never should, or could not be loaded


def show_command_line(argv: list[str]) -> bool:
    """Make ``ps`` and ``/proc/self/cmdline`` show ``argv`` (space-separated), as ``setproctitle``
    does: the new text is written over the process's original argument area, which is never
    longer. Linux only; returns False (and changes nothing) where it cannot."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # from field 3 on; the name may hold spaces
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
    except (OSError, ValueError, IndexError):
        return False
    title = " ".join(argv).encode()
    if len(title) >= end - start:
        return False
    ctypes.memset(start, 0, end - start)
    ctypes.memmove(start, title, len(title))
    # A last byte that is not NUL tells Linux the area was rewritten: it shows the text up to the
    # first NUL (one string) instead of every NUL-separated original argument.
    ctypes.memset(end - 1, ord(" "), 1)
    return True
