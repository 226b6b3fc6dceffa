"""Keeps every process a host's ranks start inside the host, and kills what is left when they end.

A rank may start a daemon that leaves its process group and session (``subprocess.Popen(...,
start_new_session=True)``, a double fork, ``nohup cmd &``): killing the ranks' process groups does not
reach it, and it would outlive the job. Two mechanisms contain it (Linux; elsewhere both are no-ops):

- **Subreaper.** The host runtime sets ``PR_SET_CHILD_SUBREAPER`` on itself, so a process orphaned
  anywhere below it (the intermediate of a double fork exited, a rank died) is reparented to the
  runtime instead of to init, and stays among its descendants.
- **A cgroup, where one is available.** When the unified (v2) hierarchy is mounted and this process
  may create a child of its own cgroup (root, or a delegated subtree), every rank is moved into
  ``smlaunch-<host>-<pid>`` before it executes; whatever escapes the process tree stays in the
  cgroup, and ``cgroup.kill`` ends all of it at once. A runtime that was SIGKILLed cannot remove its
  cgroup: the next host runtime removes such empty leftovers of runtimes that are gone. Without a
  cgroup (read-only ``/sys/fs/cgroup`` in a container, a systemd scope owned by root), the subreaper
  alone is used.

:meth:`Containment.sweep` runs when the ranks have ended (normally, failed, stopped, or because the
agent that started the runtime died): it SIGKILLs every descendant of the runtime and every process of
its cgroup, reaps them, and removes the cgroup. It never touches a process outside the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from smlaunch.contract.processes import become_subreaper, has_children

CGROUP_PREFIX = "smlaunch-"
SWEEP_WAIT_SECONDS = 5.0


def _cgroup2_root() -> Path | None:
    """Where the unified cgroup hierarchy is mounted, from ``/proc/self/mountinfo``; None if nowhere."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        fields, _, rest = line.partition(" - ")
        if rest.split(" ", 1)[0] == "cgroup2":
            return Path(fields.split(" ")[4])
    return None


def _own_cgroup() -> str | None:
    """This process's path in the unified hierarchy (``0::/path`` in ``/proc/self/cgroup``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def _remove_stale_cgroups(parent: Path) -> None:
    """Remove the empty cgroups of host runtimes that are gone (one SIGKILLed cannot remove its own);
    a cgroup that still holds a process cannot be removed, and one of a live runtime is left alone."""
    for stale in parent.glob(f"{CGROUP_PREFIX}*-*"):
        pid = stale.name.rsplit("-", 1)[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its runtime is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        with contextlib.suppress(OSError):
            stale.rmdir()


class Containment:
    """The containment of one host's processes (module docstring). Linux only; a no-op elsewhere."""

    def __init__(self, host: str, *, use_cgroup: bool = True) -> None:
        self.host = host
        self.use_cgroup = use_cgroup
        self.cgroup: Path | None = None
        """The host's cgroup directory, once :meth:`enter` created one."""
        self.subreaper = False
        self._procs_fd: int | None = None
        self._entered = False

    def describe(self) -> str:
        """One line for the topology block: what contains the ranks."""
        parts = []
        if self.subreaper:
            parts.append("subreaper")
        if self.cgroup is not None:
            parts.append(f"cgroup {self.cgroup}")
        return " + ".join(parts) or "process groups only (no subreaper on this platform)"

    def enter(self) -> None:
        """Make this process a subreaper and create the host's cgroup when possible (idempotent)."""
        if self._entered or sys.platform != "linux":
            return
        self._entered = True
        self.subreaper = become_subreaper()
        if self.use_cgroup:
            self._create_cgroup()

    def _create_cgroup(self) -> None:
        root, own = _cgroup2_root(), _own_cgroup()
        if root is None or own is None:
            return
        parent = root / own.lstrip("/")
        _remove_stale_cgroups(parent)
        path = parent / f"{CGROUP_PREFIX}{self.host}-{os.getpid()}"
        try:
            path.mkdir()
        except OSError:
            return  # not ours to create (read-only, not delegated): the subreaper alone contains
        try:
            self._procs_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return
        self.cgroup = path

    def join_in_child(self) -> None:
        """Called in a freshly forked child before ``exec``: move it into the host's cgroup.

        Only a ``write`` on a descriptor opened in the parent, safe between fork and exec. A refused
        move leaves the child where it was (the subreaper still contains it).
        """
        if self._procs_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._procs_fd, b"0")

    def _cgroup_pids(self) -> set[int]:
        if self.cgroup is None:
            return set()
        try:
            text = (self.cgroup / "cgroup.procs").read_text(encoding="ascii")
        except OSError:
            return set()
        return {int(pid) for pid in text.split()}

    def _nothing_left(self) -> bool:
        """True when this process has no child (alive or zombie) and the cgroup holds no process.

        As a subreaper, every descendant of this process either is its child or descends from one
        that is, so no child means no descendant. False when that cannot be told from ``/proc``.
        """
        if not self.subreaper or self._cgroup_pids() - {os.getpid()}:
            return False
        return has_children() is False

    def sweep(self) -> list[str]:
        """SIGKILL and reap every process left in the host; remove the cgroup. Returns what was
        killed (``"<pid> (<name>)"``), for the log."""
        if not self._entered:
            return []
        if self._nothing_left():  # the usual end: no process scan (and no psutil import) needed
            self._remove_cgroup()
            return []
        import psutil

        me = os.getpid()
        killed: dict[int, str] = {}
        for _ in range(3):  # a process may fork while we look: look again until nothing is left
            victims: dict[int, Any] = {}
            with contextlib.suppress(psutil.Error):
                victims.update((p.pid, p) for p in psutil.Process(me).children(recursive=True))
            for pid in self._cgroup_pids() - {me}:
                with contextlib.suppress(psutil.Error):
                    victims.setdefault(pid, psutil.Process(pid))
            if not victims:
                break
            for proc in victims.values():
                with contextlib.suppress(psutil.Error):
                    if proc.status() != psutil.STATUS_ZOMBIE:  # a zombie is only reaped, not reported
                        killed.setdefault(proc.pid, f"{proc.pid} ({proc.name()})")
            if self.cgroup is not None:
                with contextlib.suppress(OSError):
                    (self.cgroup / "cgroup.kill").write_text("1", encoding="ascii")
            for proc in victims.values():
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGKILL)
            psutil.wait_procs(list(victims.values()), timeout=SWEEP_WAIT_SECONDS)  # reaps our children
        self._remove_cgroup()
        return list(killed.values())

    def _remove_cgroup(self) -> None:
        if self.cgroup is None:
            return
        if self._procs_fd is not None:
            os.close(self._procs_fd)
            self._procs_fd = None
        deadline = time.monotonic() + SWEEP_WAIT_SECONDS
        while True:  # the last exits may still be under way
            try:
                self.cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        self.cgroup = None
        self._entered = False
