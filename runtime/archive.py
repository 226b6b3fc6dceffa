"""Tarballs, written deterministically and extracted safely. Shared by ``estimator`` and ``runtime``.

- :func:`create_tarball` writes the same bytes for the same files whatever the clock, the umask or
  the owner: entries sorted, mtimes fixed, owner root, gzip header without a timestamp. So the
  archive's hash identifies its content and unchanged code is never uploaded twice.
- :func:`safe_extract` refuses, before writing anything, every member that would land outside the
  destination: absolute paths, ``..`` segments, links pointing outside, devices and FIFOs.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

FIXED_MTIME = 0


class UnsafeArchiveError(ValueError):
    """An archive member would escape the extraction directory; nothing was extracted."""


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isdir():
        info.mode = 0o755
    else:
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def create_tarball(entries: Iterable[tuple[Path, str]], dest: Path) -> str:
    """Write a gzipped tar of ``entries`` (local path, name in the archive) to ``dest``.

    Symlinks are followed (as the SageMaker SDK does), directories recurse, and every member is
    added in sorted order with normalised metadata. Returns the SHA-256 of the bytes written.
    """
    members: dict[str, Path] = {}
    for local, arcname in entries:
        local = Path(local)
        members[arcname] = local
        if local.is_dir():
            for root, dirs, files in os.walk(local, followlinks=True):
                rel_root = PurePosixPath(arcname) / PurePosixPath(Path(root).relative_to(local).as_posix())
                for name in dirs + files:
                    members[str(rel_root / name)] = Path(root) / name
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname in sorted(members):
            local = members[arcname]
            info = _normalized(tar.gettarinfo(str(local), arcname=str(PurePosixPath(arcname))))
            if info.issym() or info.islnk():
                info = _normalized(tar.gettarinfo(str(local.resolve()), arcname=arcname))
            if info.isfile():
                with open(local, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(data)
    return sha256_file(dest)


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def _check_member(member: tarfile.TarInfo, dest: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise UnsafeArchiveError(f"refusing archive member {member.name!r}: absolute path or '..' segment")
    target = (dest / name).resolve()
    if dest != target and dest not in target.parents:
        raise UnsafeArchiveError(f"refusing archive member {member.name!r}: resolves outside {dest}")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = (dest / name).parent if member.issym() else dest
        resolved = (base / link).resolve() if not link.is_absolute() else Path(link)
        if link.is_absolute() or (dest != resolved and dest not in resolved.parents):
            raise UnsafeArchiveError(
                f"refusing archive member {member.name!r}: link to {member.linkname!r} escapes {dest}"
            )
    elif not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(
            f"refusing archive member {member.name!r}: devices and FIFOs are not allowed"
        )


def safe_extract(archive: Path, dest: Path) -> list[str]:
    """Extract ``archive`` (tar, optionally gzipped) into ``dest``; return the member names.

    Every member is checked first; one unsafe member means nothing is written.
    """
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:*") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member, dest)
        # Every member was checked above; the "tar" filter (Python >= 3.10.12 / 3.11.4) adds its own
        # checks where it exists. Debian bookworm's python3 (3.11.2, our image's) predates it.
        if hasattr(tarfile, "tar_filter"):
            tar.extractall(dest, members=members, filter="tar")
        else:
            tar.extractall(dest, members=members)
    return [m.name for m in members]
