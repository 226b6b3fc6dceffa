"""Mount-namespace primitives shared by the local executors (``/opt/ml`` per host, the job store
hidden: ``smlaunch.sdk.backends.emulated.executors.process.spawn``) and the host runtime (the requirements
cache
sealed from the ranks: :func:`smlaunch.runtime.requirements_cache.seal_hook`).

Everything here that runs in a child (:func:`enter_namespace`, :func:`mount`, :func:`read_only`)
runs between ``fork`` and ``exec``: it only calls the C library loaded by :func:`load_libc` in the
parent (a forked child of a multi-threaded process must not ``dlopen``), raising :class:`OSError`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
MS_STRICTATIME = 0x1000000
_KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
)
"""statvfs flags -> the mount flags a read-only remount must repeat (in a user namespace the kernel
refuses to drop what the machine's mount locked)."""
UNSHARE_TRIES = 10
"""How often :func:`enter_namespace` asks for its namespaces while ``unshare(2)`` answers EINVAL,
waiting 10 ms, then twice as long each time (about 5 s in all). In CI a forked, single-threaded
child's ``unshare(CLONE_NEWNS | CLONE_NEWUSER)`` has now and then answered EINVAL while the same call
succeeded just before and after (seen in full test runs with the Kubernetes dev cluster up, never
alone; the kernel's reason is not known). Any other error, and EINVAL that lasts, is raised."""


def load_libc() -> ctypes.CDLL | None:
    """The C library, for the calls below; None where mount namespaces do not exist (not Linux)."""
    return ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _check(what: str, result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    fstype: str | None,
    flags: int,
    what: str,
    data: str | None = None,
) -> None:
    """``mount(2)``; ``what`` says what failed in the :class:`OSError`."""
    fields = [None if s is None else os.fsencode(s) for s in (source, target, fstype)]
    _check(what, libc.mount(*fields, flags, None if data is None else os.fsencode(data)))


def enter_namespace(libc: ctypes.CDLL) -> None:
    """Put this process in a mount namespace of its own, every mount a slave of the one it left.

    As root, a new mount namespace; otherwise also a new user namespace mapping only this uid and
    gid (what ``unshare -Urm`` does, keeping the uid; the capabilities it grants end at ``exec``).
    The slave step comes first, before anything is mounted: nothing mounted here reaches the
    machine, while mounts made there later still reach this namespace. A passing EINVAL from
    ``unshare`` is retried (:data:`UNSHARE_TRIES`).
    """
    uid, gid = os.getuid(), os.getgid()
    root = os.geteuid() == 0
    flags = CLONE_NEWNS if root else CLONE_NEWNS | CLONE_NEWUSER
    for attempt in range(UNSHARE_TRIES):
        result = libc.unshare(flags)
        if result == 0 or ctypes.get_errno() != errno.EINVAL or attempt == UNSHARE_TRIES - 1:
            break
        time.sleep(0.01 * 2**attempt)
    _check("unshare", result)
    if not root:
        maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
        for name, text in maps:
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    mount(libc, None, "/", None, MS_REC | MS_SLAVE, "making every mount a slave")


def read_only(libc: ctypes.CDLL, path: str) -> None:
    """Remount the mount at ``path`` read-only, keeping the flags the machine gave it."""
    flags = os.statvfs(path).f_flag
    kept = sum(flag for statvfs, flag in _KEPT_FLAGS if flags & statvfs)
    if not flags & (os.ST_NOATIME | os.ST_RELATIME):
        kept |= MS_STRICTATIME  # relatime is what a remount gets by default
    mount(libc, None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept, f"making {path} read-only")


def unavailable(hook: Callable[[], None]) -> str | None:
    """None when a child can run ``hook`` before ``exec`` here (tried in a throwaway child that
    runs ``true``), else why not (the :class:`OSError` it raised)."""
    true = shutil.which("true") or "/bin/true"
    read, write = os.pipe()

    def probe() -> None:
        try:
            hook()
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
