"""FastFile input mode as SageMaker provides it: one read-only FUSE mount per host and channel.

SageMaker mounts a FastFile channel at ``/opt/ml/input/data/<channel>`` before the script starts:
listing it shows every object of the host's share at once (after ShardedByS3Key), with its size, and
an object's bytes are fetched when the script reads it. ``python -m smlaunch.sdk.backends.emulated.fastfile
CONFIG`` serves
one such mount in the foreground until it is unmounted or gets SIGTERM. ``CONFIG`` is a JSON file:

``mountpoint``
    the host's channel directory; the mount covers it.
``cache_dir``
    where objects land, at their relative path, shared by every mount of the channel: an object
    is fetched once (under a lock file, through
    :class:`smlaunch.contract.transfer.engine.TransferEngine`, verified)
    and every later read, on any host, is served from the cached file.
``objects``
    the host's share: ``[{"uri", "rel", "size", "etag"}, ...]``; directories are implied by the
    relative paths. The whole tree is known before the mount exists, so no reader can ever see a
    partial listing.
``s3_endpoint_url``, ``s3_region_name``
    for the S3 client (credentials come from the environment).
``parent_pid``
    the process that started the server: the server ends (and the kernel unmounts it, through
    ``fusermount3``'s ``auto_unmount``) when that process dies.

A failed fetch answers that read and every later read of the object with ``EIO``, and prints (once)
``ERROR <uri>: <cause>`` on stdout, so the starting process can fail the job. The binding is
``mfusepy`` (ctypes over libfuse 3; the ``fastfile`` extra); :func:`unavailable` says why FUSE cannot
be used on this machine, in which case the caller delivers the channel as File mode instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import os
import posixpath
import shutil
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smlaunch.contract.processes import set_parent_death_signal
from smlaunch.contract.transfer.engine import ObjectInfo, TransferEngine

FUSE_DEVICE = "/dev/fuse"
FUSERMOUNT = "fusermount3"


def unavailable() -> str | None:
    """Why a FastFile FUSE mount cannot be served on this machine, or None when it can."""
    import importlib.util

    if not sys.platform.startswith("linux"):
        return f"FUSE mounts are served on Linux only, not on {sys.platform}"
    if not os.path.exists(FUSE_DEVICE):
        return f"{FUSE_DEVICE} does not exist (load the fuse module; in a container: --device /dev/fuse)"
    if not os.access(FUSE_DEVICE, os.R_OK | os.W_OK):
        return f"{FUSE_DEVICE} is not readable and writable by this user"
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is not installed (Debian/Ubuntu: apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian/Ubuntu: apt-get install fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "the Python binding mfusepy is not installed (pip install 'smlaunch[fastfile]')"
    return None


def _parent_dir(rel: str) -> str:
    return "/" + rel.rsplit("/", 1)[0] if "/" in rel else "/"


class ChannelTree:
    """The read-only tree of one host's share: directories implied by the objects' relative paths."""

    def __init__(self, objects: list[ObjectInfo]) -> None:
        self.files: dict[str, ObjectInfo] = {}
        self.children: dict[str, set[str]] = {"/": set()}
        for info in objects:
            path = "/" + posixpath.normpath(info.rel)
            self.files[path] = info
            child = path
            while child != "/":
                parent = _parent_dir(child[1:])
                self.children.setdefault(parent, set()).add(child.rsplit("/", 1)[1])
                if child != path:
                    self.children.setdefault(child, set())
                child = parent


class FastFileOperations:
    """The FUSE operations of one mount: listing from :class:`ChannelTree`, bytes from the cache,
    each object fetched on its first read. Kept apart from the binding so it can be tested alone."""

    use_ns = True

    def __init__(
        self,
        tree: ChannelTree,
        cache_dir: Path,
        fetch: Callable[[ObjectInfo, Path], None],
        report: Callable[[str], None],
    ) -> None:
        self.tree = tree
        self.cache_dir = cache_dir
        self._fetch = fetch
        self._report = report
        self._locks: dict[str, threading.Lock] = {}
        self._fds: dict[str, int] = {}
        self._failed: set[str] = set()
        self._guard = threading.Lock()
        self._time = time.time_ns()
        self._uid, self._gid = os.getuid(), os.getgid()

    @staticmethod
    def _error(code: int) -> OSError:
        return OSError(code, os.strerror(code))  # the binding answers an OSError with its errno

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "st_uid": self._uid,
            "st_gid": self._gid,
            "st_atime": self._time,
            "st_mtime": self._time,
            "st_ctime": self._time,
        }
        info = self.tree.files.get(path)
        if info is not None:
            return {**attrs, "st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": info.size}
        if path in self.tree.children:
            return {**attrs, "st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2}
        raise self._error(errno.ENOENT)

    def readdir(self, path: str, fh: int) -> list[str]:
        if path not in self.tree.children:
            raise self._error(errno.ENOTDIR if path in self.tree.files else errno.ENOENT)
        return [".", "..", *sorted(self.tree.children[path])]

    def open(self, path: str, flags: int) -> int:
        if path not in self.tree.files:
            raise self._error(errno.ENOENT)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise self._error(errno.EROFS)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(self._cached_fd(path), size, offset)  # an OSError answers with its errno

    def statfs(self, path: str) -> dict[str, int]:
        total = sum(info.size for info in self.tree.files.values())
        blocks = max(1, (total + 4095) // 4096)
        return {
            "f_bsize": 4096,
            "f_frsize": 4096,
            "f_blocks": blocks,
            "f_bfree": 0,
            "f_bavail": 0,
            "f_files": len(self.tree.files),
            "f_ffree": 0,
            "f_namemax": 255,
        }

    def destroy(self, path: str) -> None:
        with self._guard:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _cached_fd(self, path: str) -> int:
        """An open descriptor of the object's cached file, fetched first if no host has read it yet."""
        fd = self._fds.get(path)
        if fd is not None:
            return fd
        info = self.tree.files.get(path)
        if info is None:
            raise self._error(errno.ENOENT)
        with self._guard:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:  # one fetch per object in this mount; the lock file below covers the other mounts
            fd = self._fds.get(path)
            if fd is not None:
                return fd
            if path in self._failed:  # reported once; the job is failing
                raise self._error(errno.EIO)
            dest = self.cache_dir / info.rel
            try:
                if not dest.is_file():
                    self._fetch_locked(info, dest)
                fd = os.open(dest, os.O_RDONLY)
            except Exception as exc:
                self._failed.add(path)
                self._report(f"ERROR {info.uri}: {type(exc).__name__}: {exc}")
                raise self._error(errno.EIO) from exc
            self._fds[path] = fd
            return fd

    def _fetch_locked(self, info: ObjectInfo, dest: Path) -> None:
        locks = self.cache_dir / ".smlaunch-locks"
        locks.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(info.rel.encode()).hexdigest()[:32]
        with open(locks / name, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # Only a complete, verified download is ever renamed to ``dest``.
            if not dest.is_file():
                self._fetch(info, dest)


def _die_with_parent(parent_pid: int) -> None:
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        sys.exit(1)


def serve(config: dict[str, Any]) -> int:
    """Serve one mount as ``config`` describes (see the module docstring); returns when unmounted."""
    from mfusepy import FUSE

    if config.get("parent_pid"):
        _die_with_parent(int(config["parent_pid"]))
    objects = [ObjectInfo(o["uri"], o["rel"], int(o["size"]), o.get("etag")) for o in config["objects"]]
    cache_dir = Path(config["cache_dir"])

    def client() -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=config.get("s3_endpoint_url"), region_name=config.get("s3_region_name")
        )

    engine = TransferEngine(client_factory=client, progress=False)

    def fetch(info: ObjectInfo, dest: Path) -> None:
        engine.download_objects([info], cache_dir, dest_paths=[dest], skip_unchanged=False)

    def report(line: str) -> None:
        print(line, flush=True)

    operations = FastFileOperations(ChannelTree(objects), cache_dir, fetch, report)
    FUSE(
        operations,
        config["mountpoint"],
        foreground=True,
        ro=True,
        kernel_cache=True,
        auto_unmount=True,
        fsname="smlaunch-fastfile",
        subtype="smlaunch",
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m smlaunch.sdk.backends.emulated.fastfile CONFIG.json", file=sys.stderr)
        return 2
    return serve(json.loads(Path(args[0]).read_text(encoding="utf-8")))


if __name__ == "__main__":
    sys.exit(main())
