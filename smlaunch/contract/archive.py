"""Tarballs, written deterministically and extracted safely. Shared by the SDK and the hosts.

- :func:`pack_files` writes the same bytes for the same files whatever the clock, the umask or
  the owner: entries sorted, mtimes fixed, owner root, gzip header without a timestamp. So the
  archive's hash identifies its content and unchanged code is never uploaded twice. The archive is
  streamed to its file: memory stays flat whatever the size of the code. It packs regular files
  only, as :mod:`smlaunch.contract.artifact_tree` walked them (code, or what a job wrote), and opens none
  that is not one; :func:`create_tarball` packs named files and directories the same way.
- :func:`safe_extract` is the one extractor of code archives (local runs, containers, ``python -m
  runtime``). It never relies on ``tarfile``'s ``filter`` (absent from Debian bookworm's Python
  3.11.2, and fooled by links whose resolved path exceeds the OS path limit, CVE-2025-4517).
  It reads the archive twice:

  1. every header is checked, with nothing written: names must be relative without ``..``; only
     files, directories, symlinks and hardlinks are allowed (no devices, no FIFOs); no member may
     be written through an earlier symlink or hardlink (a parent path holding a link); a symlink's
     target, resolved lexically against the member's own directory, and again through every link
     the archive leaves behind, must stay inside the destination; a hardlink must name an earlier
     regular file of the archive; the member count and the total expanded size are bounded
     (:class:`ArchiveLimits`), so a tar bomb fails before anything is written;
  2. members are written one by one below a directory descriptor of the destination, every path
     component opened with ``O_NOFOLLOW`` (a link met on the way is an error, never followed), files
     created with ``O_EXCL | O_NOFOLLOW``; every header is checked again, and the archive must hold
     the same members as in the first pass (else what was written is removed).

  A refusal raises :class:`UnsafeArchiveError` naming the member; if the second pass fails, what it
  wrote is removed, so the destination is left empty.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from smlaunch import contract
from smlaunch.contract.artifact_tree import ArtifactFile, NotARegularFile, Skipped, walk
from smlaunch.contract.errors import HostConfigurationError

FIXED_MTIME = 0
DEFAULT_MAX_BYTES = 20 * 1024**3
"""Default bound on the total expanded size of an archive's files (20 GiB)."""
DEFAULT_MAX_MEMBERS = 1_000_000
"""Default bound on the number of members of an archive."""
MAX_LINK_HOPS = 40  # as Linux's MAXSYMLINKS
_COPY_CHUNK = 1 << 20


class UnsafeArchiveError(ValueError):
    """An archive member would escape the extraction directory, or the archive exceeds its limits."""


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isdir():
        info.mode = 0o755
    else:
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def create_tarball(
    entries: Iterable[tuple[Path, str]],
    dest: Path,
    on_file: Callable[[int], None] | None = None,
    on_skip: Callable[[Skipped], None] | None = None,
) -> str:
    """Write a gzipped tar of ``entries`` (local path, name in the archive) to ``dest``.

    A file is packed under its name as what it is (a link the caller named is followed to its
    file); a directory is walked by :func:`smlaunch.contract.artifact_tree.walk`, its regular files packed
    below its name. What is not packed (what the walk skips, a named entry that is not a regular
    file, a file swapped for a FIFO or a link before it is read) goes to ``on_skip``, named as in
    the archive; without ``on_skip`` it raises :class:`~smlaunch.contract.artifact_tree.NotARegularFile`.
    Members are written as :func:`pack_files` writes them. Returns the SHA-256 of the bytes written.
    """

    def skip(entry: Skipped) -> None:
        if on_skip is None:
            raise NotARegularFile(errno.EINVAL, f"{entry.name!r} is not packed: {entry.why}")
        on_skip(entry)

    files: list[ArtifactFile] = []
    for local, arcname in entries:
        real = os.path.realpath(local)
        if os.path.isdir(real):
            listing = walk(Path(real))
            files += [ArtifactFile(f"{arcname}/{f.name}", f.root, f.source) for f in listing.files]
            for entry in listing.skipped:
                skip(Skipped(f"{arcname}/{entry.name}", entry.why))
        else:  # opened by open_regular: what is not a regular file is skipped, never opened
            files.append(ArtifactFile(arcname, os.path.dirname(real), os.path.basename(real)))
    return pack_files(files, dest, skip, on_file)


def pack_files(
    files: Iterable[ArtifactFile],
    dest: Path,
    on_skip: Callable[[Skipped], None],
    on_file: Callable[[int], None] | None = None,
) -> str:
    """Write a gzipped tar of the regular ``files`` a walk found
    (:func:`smlaunch.contract.artifact_tree.walk`)
    to ``dest``: entries sorted by name, metadata normalised (fixed mtimes, owner root, modes 0644
    or 0755), gzip header without a timestamp, streamed (never held in memory).

    Each file is read through :func:`smlaunch.contract.artifact_tree.open_regular`: one that is no longer a
    regular file is left out and passed to ``on_skip``. ``on_file(size)`` is called as each file
    is added (progress). Returns the SHA-256 of the bytes written.
    """
    with _tar_stream(dest) as tar:
        for item in sorted(files, key=lambda f: f.name):
            try:
                handle = item.open()
            except NotARegularFile as error:
                on_skip(Skipped(item.name, error.strerror or "no longer a regular file"))
                continue
            with handle:
                info = tarfile.TarInfo(item.name)
                found = os.fstat(handle.fileno())
                info.size, info.mode = found.st_size, stat.S_IMODE(found.st_mode)
                tar.addfile(_normalized(info), handle)
            if on_file is not None:
                on_file(info.size)
    return sha256_file(dest)


@contextmanager
def _tar_stream(dest: Path) -> Iterator[tarfile.TarFile]:
    """A PAX tar written through gzip (no timestamp in its header) straight to ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(dest, "wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        yield tar


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on what one archive may expand to: total bytes of its files and number of members.

    :meth:`from_environ` reads ``SMLAUNCH_ARCHIVE_MAX_BYTES`` and ``SMLAUNCH_ARCHIVE_MAX_MEMBERS``
    (the local session's ``archive_max_bytes`` / ``archive_max_members`` settings, or a job's
    ``environment=``; both checked before the job starts); defaults 20 GiB and
    1,000,000. A value that is not a positive integer is a :class:`HostConfigurationError`.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ArchiveLimits:
        """The limits set in ``environ``."""
        values = {}
        for field, name, default in (
            ("max_bytes", contract.SMLAUNCH_ARCHIVE_MAX_BYTES, DEFAULT_MAX_BYTES),
            ("max_members", contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS, DEFAULT_MAX_MEMBERS),
        ):
            text = environ.get(name, "").strip()
            try:
                values[field] = int(text) if text else default
            except ValueError:
                values[field] = 0
            if values[field] <= 0:
                raise HostConfigurationError(
                    name, text, "must be a positive integer", f"unset it for the default {default}"
                )
        return cls(**values)


_FILE, _DIR, _SYMLINK, _HARDLINK = "file", "directory", "symlink", "hardlink"


@dataclass(frozen=True)
class _Member:
    """One accepted header."""

    name: str  # normalized: no '.' components, no trailing '/'; "" is the destination itself
    kind: str
    linkname: str
    size: int


def _refuse(member: str, problem: str) -> UnsafeArchiveError:
    shown = member if len(member) <= 240 else f"{member[:100]}...{member[-100:]}"
    return UnsafeArchiveError(f"refusing archive member {shown!r}: {problem}")


def _normalized_name(member: str, raw: str, what: str = "name") -> str:
    if not raw or raw.startswith("/"):
        raise _refuse(member, f"its {what} {raw!r} is empty or absolute")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refuse(member, f"its {what} {raw!r} has a '..' component")
    return "/".join(parts)


class _Plan:
    """The namespace the archive builds, checked header by header (no I/O); :attr:`digest` sums up
    every accepted header, so the second pass can tell whether it read the same archive."""

    def __init__(self, limits: ArchiveLimits) -> None:
        self.limits = limits
        self.names: list[str] = []
        self.kinds: dict[str, str] = {"": _DIR}
        self.links: dict[str, str] = {}  # the symlinks left behind, name -> target
        self.total = 0
        self.digest = hashlib.sha256()

    def add(self, info: tarfile.TarInfo) -> _Member:
        raw = info.name
        if len(self.names) >= self.limits.max_members:
            raise _refuse(
                raw,
                f"the archive has more than {self.limits.max_members} members "
                f"(raise the archive_max_members setting, {contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS}, "
                "if it is genuine)",
            )
        if info.isfile():
            kind = _FILE
        elif info.isdir():
            kind = _DIR
        elif info.issym():
            kind = _SYMLINK
        elif info.islnk():
            kind = _HARDLINK
        else:
            raise _refuse(raw, "devices, FIFOs and other special files are not allowed")
        name = _normalized_name(raw, raw)
        if name == "" and kind != _DIR:
            raise _refuse(raw, "names the destination itself")
        parts = name.split("/") if name else []
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            found = self.kinds.get(prefix)
            if found in (_SYMLINK, _HARDLINK):
                raise _refuse(raw, f"it would be written through the link {prefix!r}")
            if found == _FILE:
                raise _refuse(raw, f"its parent {prefix!r} is a file")
        if self.kinds.get(name) == _DIR and kind != _DIR:
            raise _refuse(raw, f"it would replace the directory {name!r}")
        size = info.size if kind == _FILE else 0
        self.total += size
        if self.total > self.limits.max_bytes:
            raise _refuse(
                raw,
                f"the archive expands to more than {self.limits.max_bytes} bytes "
                f"(raise the archive_max_bytes setting, {contract.SMLAUNCH_ARCHIVE_MAX_BYTES}, "
                "if it is genuine)",
            )
        linkname = ""
        if kind == _SYMLINK:
            linkname = info.linkname
            if not linkname or PurePosixPath(linkname).is_absolute():
                raise _refuse(raw, f"symlink to {linkname!r}: targets must be relative")
            lexical = posixpath.normpath(posixpath.join(posixpath.dirname(name) or ".", linkname))
            if lexical == ".." or lexical.startswith("../"):
                raise _refuse(raw, f"symlink to {linkname!r} leaves the destination")
        elif kind == _HARDLINK:
            linkname = _normalized_name(raw, info.linkname, "hardlink target")
            if linkname == name or self.kinds.get(linkname) not in (_FILE, _HARDLINK):
                raise _refuse(
                    raw, f"hardlink to {info.linkname!r}, which is not an earlier regular file of the archive"
                )
        for depth in range(1, len(parts)):
            self.kinds.setdefault("/".join(parts[:depth]), _DIR)
        self.kinds[name] = kind
        if kind == _SYMLINK:
            self.links[name] = linkname
        else:
            self.links.pop(name, None)
        self.names.append(name)
        self.digest.update(f"{name}\0{kind}\0{linkname}\0{size}\n".encode(errors="surrogateescape"))
        return _Member(name, kind, linkname, size)

    def check_links(self) -> None:
        """Every symlink left behind must resolve inside the destination through all the others."""
        for name, target in self.links.items():
            if not self._stays_inside(posixpath.dirname(name), target, self.links):
                raise _refuse(
                    name,
                    f"symlink to {target!r} leaves the destination once the "
                    "archive's other links are followed",
                )

    @staticmethod
    def _stays_inside(base: str, target: str, links: dict[str, str]) -> bool:
        stack = [p for p in base.split("/") if p]
        pending = [p for p in target.split("/") if p not in ("", ".")]
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if not stack:
                    return False
                stack.pop()
                continue
            here = "/".join([*stack, part])
            if here in links:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return False
                pending = [p for p in links[here].split("/") if p not in ("", ".")] + pending
            else:
                stack.append(part)
        return True


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(root_fd: int, path: str, member: str, create: bool) -> int:
    """A new descriptor of ``path`` below ``root_fd``, reached without following any link."""
    fd = os.dup(root_fd)
    try:
        for part in path.split("/") if path else []:
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(member, f"{path!r} on its path holds a link or a file") from error
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Writer:
    """Pass 2: members written below one directory descriptor; no link is ever followed."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self._parent: tuple[str, int] | None = None  # the last parent, reused by its siblings

    def close(self) -> None:
        if self._parent is not None:
            os.close(self._parent[1])
            self._parent = None

    def _parent_fd(self, member: str, parent: str) -> int:
        if self._parent is None or self._parent[0] != parent:
            self.close()
            self._parent = (parent, _open_dir(self.root_fd, parent, member, create=True))
        return self._parent[1]

    def write(self, member: _Member, info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        """Write one checked member; an OS error (a full disk, a name too long) names it."""
        try:
            self._write(member, info, tar)
        except UnsafeArchiveError:
            raise
        except OSError as error:
            raise OSError(
                error.errno, f"{error.strerror}: cannot extract archive member {member.name[:240]!r}"
            ) from error

    def _write(self, member: _Member, info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        parent, _, base = member.name.rpartition("/")
        if not base:  # the destination itself
            return
        fd = self._parent_fd(member.name, parent)
        try:
            existing: os.stat_result | None = os.stat(base, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            if member.kind != _DIR:
                raise _refuse(member.name, "it would replace a directory")
        elif existing is not None:
            os.unlink(base, dir_fd=fd)  # a file or link of an earlier member: replaced, never followed
        if member.kind == _DIR:
            if existing is None or not stat.S_ISDIR(existing.st_mode):
                os.mkdir(base, 0o755, dir_fd=fd)
            made = os.open(base, _DIR_FLAGS, dir_fd=fd)
            try:
                os.fchmod(made, (info.mode & 0o755) | 0o700)
            finally:
                os.close(made)
        elif member.kind == _SYMLINK:
            os.symlink(member.linkname, base, dir_fd=fd)
        elif member.kind == _HARDLINK:
            source_parent, _, source = member.linkname.rpartition("/")
            source_fd = _open_dir(self.root_fd, source_parent, member.name, create=False)
            try:
                os.link(source, base, src_dir_fd=source_fd, dst_dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(source_fd)
        else:
            _write_file(member, info, tar, fd, base)


def _write_file(member: _Member, info: tarfile.TarInfo, tar: tarfile.TarFile, fd: int, base: str) -> None:
    out = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        source = tar.extractfile(info)
        if source is not None:
            while chunk := source.read(_COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        os.fchmod(out, (info.mode & 0o755) | 0o600)
        try:
            os.utime(out, (info.mtime, info.mtime))
        except (OverflowError, ValueError):
            pass  # an absurd mtime is not worth refusing the archive for
    finally:
        os.close(out)


@contextmanager
def _destination(dest: Path) -> Iterator[int]:
    """A descriptor of ``dest``, which must be a new or empty directory; emptied again on failure."""
    dest.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if os.listdir(fd):
            raise UnsafeArchiveError(f"cannot extract into {dest}: it is not empty")
        try:
            yield fd
        except BaseException:
            for entry in os.listdir(fd):
                if stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                    shutil.rmtree(dest / entry)  # fd-based on Linux: never follows a link
                else:
                    os.unlink(entry, dir_fd=fd)
            raise
    finally:
        os.close(fd)


_UNREADABLE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def _headers(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members of a stream, without ``tarfile`` keeping every header in memory."""
    for info in tar:
        tar.members.clear()  # type: ignore[attr-defined]  # not in typeshed: TarFile keeps headers here
        yield info


def safe_extract(archive: Path, dest: Path, limits: ArchiveLimits | None = None) -> list[str]:
    """Extract ``archive`` (tar, optionally compressed) into ``dest``; return the member names.

    ``dest`` is created, or must be empty. Every member is checked before anything is written
    (see the module docstring); ``limits`` default to :meth:`ArchiveLimits.from_environ` of
    ``os.environ``. Raises :class:`UnsafeArchiveError` naming the refused member.
    """
    limits = limits if limits is not None else ArchiveLimits.from_environ(os.environ)
    archive = Path(archive)
    try:
        plan = _Plan(limits)
        with tarfile.open(archive, mode="r|*") as tar:
            for info in _headers(tar):
                plan.add(info)
        plan.check_links()
        with _destination(Path(dest)) as root_fd:
            again = _Plan(limits)  # the same checks on what is written: the file may have changed
            writer = _Writer(root_fd)
            try:
                with tarfile.open(archive, mode="r|*") as tar:
                    for info in _headers(tar):
                        writer.write(again.add(info), info, tar)
            finally:
                writer.close()
            again.check_links()
            if again.digest.digest() != plan.digest.digest():
                raise UnsafeArchiveError(f"{archive} changed while it was being extracted")
    except _UNREADABLE as error:
        raise UnsafeArchiveError(f"{archive} is not a readable tar archive: {error}") from error
    return plan.names
