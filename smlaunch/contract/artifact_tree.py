"""Which entries of a directory the user's code wrote are delivered, and how they are read.

Shared by every place that packs or copies such a directory: ``model.tar.gz`` and ``output.tar.gz``
(and the merge of several hosts' model directories), the uncompressed model upload, and the
checkpoint, intermediate-output and TensorBoard syncs; and the code of ``sourcedir.tar.gz`` (where
``.smlaunchignore`` also leaves entries out). SageMaker's own upload is the reference: it delivers
regular files. The rule, applied by :func:`walk`:

- a regular file is delivered under its path;
- a directory is walked;
- a symbolic link whose target, every link on the way resolved, is a regular file or a directory
  *inside* the walked directory is delivered as what it points to, under the link's own name
  (dereferenced once: object stores hold no links, and SageMaker hosting cannot extract a
  ``model.tar.gz`` that holds links); a link to the directory itself or to one of its own parents
  (``latest -> .``) would loop and is skipped;
- skipped, each with the reason: a link whose target lies outside the directory (``-> /etc``), a
  dangling link, a link loop, a FIFO, a socket, a device, and what cannot be read;
- at most ``limit`` entries are walked (links can multiply a small tree): past it the walk stops
  and says so.

The walk only lists (``scandir``, ``lstat``, ``realpath``): it never opens an entry, so a FIFO or a
device cannot block it. Files are read through :func:`open_regular`, which reaches the file from
the walked directory one component at a time with ``O_NOFOLLOW`` and opens it with ``O_NONBLOCK``,
then requires ``fstat`` to say "regular file": an entry replaced by a link, a FIFO or a device
between the walk and the read raises :class:`NotARegularFile` (the caller skips it), and is never
followed nor waited on. What the runtime itself writes into such a tree (a host's ``output/success``)
goes through :func:`write_file`, which never follows a link planted in its place.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_ENTRIES = 1_000_000
"""Default bound on the entries one walk visits: what :mod:`smlaunch.contract.archive` extracts at most."""
MAX_REPORTED = 20
"""Skipped entries named one per line in the job log; the rest are counted in one more line."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotARegularFile(OSError):
    """An entry is not (or no longer) a regular file reached without following a link."""


@dataclass(frozen=True)
class Skipped:
    """An entry that is not delivered: its path below the walked directory, and why."""

    name: str
    why: str


@dataclass(frozen=True)
class ArtifactFile:
    """A regular file to deliver: ``name`` (``/``-separated, below the walked directory) and where
    its bytes are: ``source``, a link-free path below ``root`` (the walked directory's real path)."""

    name: str
    root: str
    source: str

    @property
    def path(self) -> Path:
        """The file's real path."""
        return Path(self.root, self.source)

    def open(self) -> BinaryIO:
        """The file, opened for reading by :func:`open_regular`."""
        return os.fdopen(open_regular(self.root, self.source), "rb")


@dataclass(frozen=True)
class Listing:
    """What :func:`walk` found: the files to deliver (sorted by name) and the entries skipped."""

    files: list[ArtifactFile]
    skipped: list[Skipped]


def describe_mode(mode: int) -> str:
    """What an entry that is not a regular file nor a directory is, in words (``a FIFO (named pipe)``)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def walk(
    directory: Path,
    seen_at: str | None = None,
    limit: int = DEFAULT_MAX_ENTRIES,
    ignore: Callable[[str], bool] | None = None,
) -> Listing:
    """The files of ``directory`` to deliver, and the entries skipped, by the module's rule.

    ``seen_at``: where the job's code saw ``directory`` when that is not its path here (a process
    host's mount namespace or a container shows a host's tree at ``/opt/ml``): a link whose target
    is an absolute path below ``seen_at`` (``latest -> /opt/ml/model/checkpoint-3``) is read as the
    same path below ``directory``. A ``directory`` that does not exist or is not a directory has
    nothing to deliver.

    ``ignore``: the entries left out on purpose (``.smlaunchignore`` for code), asked with an
    entry's name, a directory's (or a link's to one) with a trailing ``/`` as gitignore matches
    them, an entry skipped for what it is with both spellings. What it accepts is neither delivered
    nor reported, and an ignored directory is not listed at all.
    """

    def ignored(name: str, *spellings: str) -> bool:
        return ignore is not None and any(ignore(name + end) for end in spellings)

    root = os.path.realpath(directory)
    try:
        top = os.lstat(root)
    except OSError:
        return Listing([], [])
    if not stat.S_ISDIR(top.st_mode):
        return Listing([], [])
    files: list[ArtifactFile] = []
    skipped: list[Skipped] = []
    visited = 0
    # (name prefix, real path, the real directories from the root down to it): a directory link to
    # one of those would walk for ever.
    pending: list[tuple[str, str, frozenset[tuple[int, int]]]] = [
        ("", root, frozenset({(top.st_dev, top.st_ino)}))
    ]
    while pending:
        prefix, real_dir, ancestors = pending.pop()
        try:
            with os.scandir(real_dir) as listed:
                entries = sorted(listed, key=lambda entry: entry.name)
        except OSError as error:
            skipped.append(Skipped(prefix.rstrip("/") or ".", f"cannot be listed ({error.strerror})"))
            continue
        for entry in entries:
            name = prefix + entry.name
            visited += 1
            if visited > limit:
                skipped.append(
                    Skipped(name, f"past the limit of {limit} entries walked; the rest is not delivered")
                )
                return Listing(sorted(files, key=lambda f: f.name), skipped)
            path = entry.path
            try:
                if entry.is_file(follow_symlinks=False):  # the directory entry says so: no stat
                    if not ignored(name, ""):
                        files.append(ArtifactFile(name, root, os.path.relpath(path, root)))
                    continue
                found = _resolve(path, root, (seen_at, str(directory)) if seen_at else None)
                if isinstance(found, str):
                    if not ignored(name, "", "/"):
                        skipped.append(Skipped(name, found))
                    continue
                path, info = found
            except OSError as error:
                if not ignored(name, "", "/"):
                    skipped.append(Skipped(name, f"cannot be read ({error.strerror})"))
                continue
            if ignored(name, "/" if stat.S_ISDIR(info.st_mode) else ""):
                continue
            if stat.S_ISREG(info.st_mode):
                files.append(ArtifactFile(name, root, os.path.relpath(path, root)))
            elif stat.S_ISDIR(info.st_mode):
                key = (info.st_dev, info.st_ino)
                if key in ancestors:
                    skipped.append(Skipped(name, "a link to its own directory or a parent (a loop)"))
                else:
                    pending.append((name + "/", path, ancestors | {key}))
            else:
                skipped.append(Skipped(name, describe_mode(info.st_mode)))
    return Listing(sorted(files, key=lambda f: f.name), skipped)


def _resolve(path: str, root: str, alias: tuple[str, str] | None) -> tuple[str, os.stat_result] | str:
    """``path``'s real path inside ``root`` and its ``lstat``, or why a link there is skipped.
    ``alias`` (seen at, here): a link's absolute target below the first is read below the second."""
    info = os.lstat(path)
    if not stat.S_ISLNK(info.st_mode):
        return path, info
    target = os.readlink(path)
    followed = path
    if alias is not None and (target == alias[0] or target.startswith(alias[0].rstrip("/") + "/")):
        followed = alias[1] + target[len(alias[0]) :]
    try:
        real = os.path.realpath(followed, strict=True)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"a link to {target!r} that loops"
        return f"a dangling link (to {target!r}, which does not exist)"
    if not _inside(real, root):
        return f"a link to {target!r}, outside the directory"
    return real, os.lstat(real)


def open_regular(root: str, source: str) -> int:
    """A read descriptor of the regular file ``source`` (link-free, relative) below ``root``.

    Every component is opened with ``O_NOFOLLOW``, the file itself also with ``O_NONBLOCK`` (a FIFO
    swapped in cannot block) and must be a regular file; else :class:`NotARegularFile`.
    """
    *parents, base = source.split("/")
    directory = os.open(root, _DIR_FLAGS)
    try:
        for part in parents:
            below = os.open(part, _DIR_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = below
        fd = os.open(base, _FILE_FLAGS, dir_fd=directory)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.ENOENT):
            raise NotARegularFile(
                error.errno, f"no longer a regular file since the walk ({error.strerror})"
            ) from error
        raise
    finally:
        os.close(directory)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotARegularFile(errno.EINVAL, f"since the walk, {describe_mode(mode)}")
    return fd


def read_regular(root: str | Path, source: str, limit: int, offset: int = 0) -> bytes:
    """At most ``limit`` bytes, from ``offset``, of the regular file ``source`` below ``root``,
    opened by :func:`open_regular`: a FIFO, a device or a link there raises
    :class:`NotARegularFile`, never blocks nor is followed, and a huge file costs ``limit``."""
    with os.fdopen(open_regular(str(root), source), "rb") as handle:
        handle.seek(offset)
        return handle.read(limit)


def write_file(directory: str | Path, name: str, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` as the file ``name`` of ``directory``, a directory the job's code can write
    (a host's ``output``), never following a link it planted there.

    ``directory`` is opened with ``O_NOFOLLOW`` (a link in its place is an :class:`OSError`).
    The file is written under a fresh name, then renamed over ``name``: what was there (a link, a
    FIFO, a device) is replaced, never followed nor opened. ``exclusive``: ``name`` is created in
    place with ``O_EXCL`` instead (which follows no link), and :class:`FileExistsError` is raised
    when anything is there already.
    """
    parent = os.open(directory, _DIR_FLAGS)
    try:
        if exclusive:
            _write_new(parent, name, data)
            return
        fresh = f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        _write_new(parent, fresh, data)
        try:
            os.rename(fresh, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError:
            os.unlink(fresh, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def _write_new(parent: int, name: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(name, flags, 0o666, dir_fd=parent), "wb") as handle:
        handle.write(data)


def skip_report(skipped: Sequence[Skipped], what: str, limit: int = MAX_REPORTED) -> list[str]:
    """Job-log lines naming each skipped entry of ``what`` (e.g. ``"model directory of algo-1"``),
    one line each up to ``limit``, then one line counting the rest. Names are quoted (``repr``), so
    a name holding a newline stays on its line."""
    lines = [f"WARNING: {what}: skipped {entry.name!r}: {entry.why}" for entry in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"WARNING: {what}: ... and {len(skipped) - limit} more entries skipped")
    if skipped:
        lines.append(
            f"{what}: only regular files, and links to them inside the directory, are delivered "
            "(links out of it, dangling links, loops, FIFOs, sockets and devices are not)"
        )
    return lines
