"""Code packaging: ``sourcedir.tar.gz`` built deterministically and staged to ``file://`` or ``s3://``.

Layout (as SageMaker SDK v2's ``tar_and_upload_dir``): the *contents* of ``source_dir`` at the
archive root (no ``src/`` prefix), plus each ``dependencies`` path at the root under its basename;
without ``source_dir`` the archive holds only the entry point's file.

Which entries of ``source_dir`` (and of a dependency directory) are packed is
:mod:`smlaunch.contract.artifact_tree`'s rule, the one for model directories: regular files; a link whose
target is a file or directory *inside* the directory, as what it points to under the link's name;
left out, each named in one ``UserWarning``: links out of the directory, dangling links, loops
(``latest -> .``), FIFOs, sockets and devices. Packing never follows a loop and never opens a FIFO.
The SDK (``sagemaker.utils.create_tar_file``, ``tarfile`` with ``dereference=True``) follows every
link: it packs a link's target even outside ``source_dir`` (a link to ``/etc`` packs ``/etc``),
fails on a dangling link or a loop (``ELOOP`` after 40 levels, the tree multiplied first), and
packs a FIFO as a FIFO member. smlaunch packs what the SDK packs for a tree of regular files and
links inside it; code reached by a link out of ``source_dir`` goes in ``dependencies`` (which both
pack). A file named by the user (the entry point without ``source_dir``, a dependency file) is
followed if it is a link, and must be a regular file.

smlaunch extensions:

- ``.smlaunchignore`` at the root of ``source_dir`` (and of a dependency directory) keeps files out,
  with gitignore syntax (``pathspec``); an ignored directory is not even listed, and an ignored odd
  entry is not named. The ignore file itself is packed like any other file.
- The bytes are deterministic (``smlaunch.contract.archive.create_tarball``: sorted entries, fixed mtimes and
  owners), so the SHA-256 identifies the code and an unchanged tarball is not uploaded twice (an
  entry left out changes nothing): staging goes through
  ``smlaunch.contract.transfer.engine.TransferEngine``, which
  stores the SHA-256 in the object's metadata and skips an upload whose object already has the same
  size and hash.
- Every file is checked readable before the archive is written: an unreadable ``source_dir`` or
  file is a :class:`ConfigurationError` naming the path, raised before anything is staged.
- The archive is streamed to a temporary file, never held in memory, so packaging costs the same
  few megabytes whatever the size of the code; code larger than 100 MiB gets a warning (data
  belongs in a channel, where it is not re-packed and re-extracted on every host for every job).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import pathspec

from smlaunch import contract
from smlaunch.contract import artifact_tree
from smlaunch.contract.archive import create_tarball
from smlaunch.contract.artifact_tree import Skipped
from smlaunch.contract.progress import PROGRESS_MIN_BYTES, ProgressBar, interactive_output
from smlaunch.contract.transfer.engine import TransferEngine, TransferSummary
from smlaunch.sdk.errors import ConfigurationError

LARGE_CODE_BYTES = 100 * 1024**2
"""Above this many bytes of files, packaging warns that data should go in a channel."""


@dataclass(frozen=True)
class CodeArchive:
    """A built ``sourcedir.tar.gz``: where it is, its SHA-256 and its member files."""

    path: Path
    sha256: str
    members: tuple[str, ...]


def check_readable_dir(path: str | Path, field: str) -> Path:
    """``path`` must be a readable, listable directory."""
    directory = Path(path).expanduser()
    if not directory.exists():
        raise ConfigurationError(field, str(path), "no such directory", "pass an existing directory")
    if not directory.is_dir():
        raise ConfigurationError(
            field, str(path), "not a directory", "pass the directory that holds your code"
        )
    try:
        os.listdir(directory)
    except OSError as exc:
        raise ConfigurationError(
            field,
            str(path),
            f"cannot be read ({exc.strerror})",
            "fix its permissions (chmod u+rx) or pass another directory",
        ) from exc
    if not os.access(directory, os.R_OK | os.X_OK):
        raise ConfigurationError(
            field,
            str(path),
            "cannot be read (permission denied)",
            "fix its permissions (chmod u+rx) or pass another directory",
        )
    return directory


def _ignore_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    ignore_file = directory / contract.IGNORE_FILE
    if not ignore_file.is_file():
        return None
    return pathspec.GitIgnoreSpec.from_lines(ignore_file.read_text().splitlines())


def _walk(directory: Path, arc_prefix: str, field: str, skipped: list[Skipped]) -> list[tuple[Path, str]]:
    """The files under ``directory`` to pack, not ignored, as (real path, archive name), by
    :func:`smlaunch.contract.artifact_tree.walk`'s rule; what it leaves out is added to ``skipped``."""
    spec = _ignore_spec(directory)
    listing = artifact_tree.walk(directory, ignore=spec.match_file if spec is not None else None)
    skipped += [Skipped(arc_prefix + entry.name, entry.why) for entry in listing.skipped]
    for item in listing.files:
        if not os.access(item.path, os.R_OK):  # a check that opens nothing: a FIFO cannot block
            raise ConfigurationError(
                field,
                str(directory / item.name),
                "cannot be read (permission denied)",
                "fix its permissions or add it to .smlaunchignore",
            )
    return [(item.path, arc_prefix + item.name) for item in listing.files]


def _check_regular_file(path: Path, field: str) -> Path:
    """``path``, a file the user named, must be a readable regular file (a link to one is
    followed), checked without opening it (a FIFO would block). Returns its real path."""
    real = Path(os.path.realpath(path))
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        problem = "no such file" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
        raise ConfigurationError(field, str(path), problem, "pass an existing file") from exc
    if not stat.S_ISREG(mode):
        raise ConfigurationError(
            field,
            str(path),
            f"not a regular file but {artifact_tree.describe_mode(mode)}",
            "pass a regular file",
        )
    if not os.access(real, os.R_OK):
        raise ConfigurationError(
            field, str(path), "cannot be read (permission denied)", "fix its permissions or pass another file"
        )
    return real


def _check_packed(entry_point: str, packed: set[str], skipped: list[Skipped]) -> None:
    """The entry point, relative to ``source_dir``, must be packed: a job without it cannot start."""
    name = posixpath.normpath(PurePath(entry_point).as_posix())
    if PurePath(entry_point).is_absolute() or name in packed:
        return
    why = next((entry.why for entry in skipped if entry.name == name), f"listed in {contract.IGNORE_FILE}")
    raise ConfigurationError(
        "entry_point",
        entry_point,
        f"left out of the code archive: {why}",
        f"make it a regular file inside source_dir, or remove it from {contract.IGNORE_FILE}",
    )


def code_entries(
    entry_point: str, source_dir: str | Path | None, dependencies: list[str] | None = None
) -> tuple[list[tuple[Path, str]], dict[str, list[Skipped]]]:
    """The files of ``sourcedir.tar.gz`` as (real path, archive name), after ignore rules, and
    the entries left out of each directory walked, by the field that named it."""
    entries: list[tuple[Path, str]] = []
    skipped: dict[str, list[Skipped]] = {}
    if source_dir is not None:
        directory = check_readable_dir(source_dir, "source_dir")
        entries += _walk(directory, "", "source_dir", skipped.setdefault("source_dir", []))
        _check_packed(entry_point, {name for _, name in entries}, skipped["source_dir"])
    else:
        script = Path(entry_point)
        entries.append((_check_regular_file(script, "entry_point"), script.name))
    for index, dependency in enumerate(dependencies or []):
        field = f"dependencies[{index}]"
        path = Path(dependency).expanduser()
        if path.is_dir():
            directory = check_readable_dir(path, field)
            entries += _walk(directory, f"{path.resolve().name}/", field, skipped.setdefault(field, []))
        else:
            entries.append((_check_regular_file(path, field), path.name))
    seen: dict[str, Path] = {}
    for local, arcname in entries:
        if arcname in seen and seen[arcname] != local:
            raise ConfigurationError(
                "dependencies",
                str(local),
                f"would overwrite {arcname!r} from {seen[arcname]} in the archive",
                "rename one of them",
            )
        seen[arcname] = local
    return entries, skipped


def _warn_skipped(skipped: dict[str, list[Skipped]]) -> None:
    for field, entries in skipped.items():
        if not entries:
            continue
        lines = artifact_tree.skip_report(entries, field)
        lines.append(
            f"{field}: code outside it goes in dependencies=[...]; "
            "entries listed in .smlaunchignore are left out silently"
        )
        warnings.warn("\n".join(lines), UserWarning, stacklevel=3)


def build_sourcedir(
    entry_point: str,
    source_dir: str | Path | None,
    dependencies: list[str] | None,
    dest_dir: str | Path,
) -> CodeArchive:
    """Write ``<dest_dir>/sourcedir.tar.gz``; same files give the same bytes.

    Warns (``UserWarning``) when the files add up to more than :data:`LARGE_CODE_BYTES`."""
    entries, skipped = code_entries(entry_point, source_dir, dependencies)
    size = sum(local.stat().st_size for local, _ in entries)
    if size > LARGE_CODE_BYTES:
        warnings.warn(
            f"source_dir={str(source_dir)!r}: the code archive holds {size / 1024**2:.0f} MiB of files "
            f"(more than {LARGE_CODE_BYTES // 1024**2} MiB), packed, uploaded and extracted on every host "
            "for every job. Put data in a channel (fit(inputs={'train': ...})) and keep large files out "
            "of the code with .smlaunchignore.",
            UserWarning,
            stacklevel=2,
        )
    dest = Path(dest_dir) / contract.SOURCEDIR_TARBALL
    started = time.monotonic()
    progress = ProgressBar(size, "package", interactive_output() and size >= PROGRESS_MIN_BYTES)
    try:
        # A file swapped for a FIFO or a link since the walk is left out and named too.
        late = skipped.setdefault(contract.SOURCEDIR_TARBALL, [])
        digest = create_tarball(entries, dest, on_file=progress, on_skip=late.append)
    finally:
        progress.close()
    _warn_skipped(skipped)
    summary = TransferSummary(
        transferred=[str(local) for local, _ in entries], bytes=size, seconds=time.monotonic() - started
    )
    progress.report(summary.line(f"package {contract.SOURCEDIR_TARBALL}"))
    left_out = {entry.name for entry in late}
    return CodeArchive(dest, digest, tuple(sorted(name for _, name in entries if name not in left_out)))


def stage(
    archive: CodeArchive, uri: str, s3_client: Any | None = None, extra_args: dict[str, Any] | None = None
) -> bool:
    """Copy (``file://``) or upload (``s3://``) the archive to ``uri``, its full destination.

    Returns ``True`` when bytes were sent, ``False`` when an identical object was already there.
    ``extra_args`` are S3 upload arguments (``ServerSideEncryption``, ``SSEKMSKeyId``,
    ``ExpectedBucketOwner``); the SHA-256 is added to the object's metadata.
    """
    with TransferEngine(s3_client=s3_client) as engine:  # a bar where someone watches (large code)
        summary = engine.upload_file(archive.path, uri, skip_unchanged=True, extra_args=extra_args)
    return bool(summary.transferred)


def build_and_stage(
    entry_point: str,
    source_dir: str | Path | None,
    dependencies: list[str] | None,
    uri: str,
    s3_client: Any | None = None,
    extra_args: dict[str, Any] | None = None,
) -> tuple[CodeArchive, bool]:
    """Build in a temporary directory, stage to ``uri``, clean up; returns (archive, uploaded)."""
    with tempfile.TemporaryDirectory(prefix="smlaunch-code-") as tmp:
        archive = build_sourcedir(entry_point, source_dir, dependencies, tmp)
        uploaded = stage(archive, uri, s3_client, extra_args)
    return archive, uploaded
