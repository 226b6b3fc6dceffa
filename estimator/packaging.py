"""Code packaging: ``sourcedir.tar.gz`` built deterministically and staged to ``file://`` or ``s3://``.

Layout (as SageMaker SDK v2's ``tar_and_upload_dir``): the *contents* of ``source_dir`` at the
archive root (no ``src/`` prefix), plus each ``dependencies`` path at the root under its basename;
without ``source_dir`` the archive holds only the entry point's file. Symlinks are followed.

smlaunch extensions:

- ``.smlaunchignore`` at the root of ``source_dir`` (and of a dependency directory) keeps files out,
  with gitignore syntax (``pathspec``). The ignore file itself is packed like any other file.
- The bytes are deterministic (``runtime.archive.create_tarball``: sorted entries, fixed mtimes and
  owners), so the SHA-256 identifies the code and an unchanged tarball is not uploaded twice:
  staging goes through ``runtime.transfer.TransferEngine``, which stores the SHA-256 in the
  object's metadata and skips an upload whose object already has the same size and hash.
- Every file is checked readable before the archive is written: an unreadable ``source_dir`` or a
  dangling symlink is a :class:`ConfigurationError` naming the path, raised before anything is
  staged.
- The archive is streamed to a temporary file, never held in memory, so packaging costs the same
  few megabytes whatever the size of the code; code larger than 100 MiB gets a warning (data
  belongs in a channel, where it is not re-packed and re-extracted on every host for every job).

Only directories are walked here; nothing outside ``source_dir`` and ``dependencies`` is read.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from estimator.errors import ConfigurationError
from runtime import contract
from runtime.archive import create_tarball
from runtime.progress import PROGRESS_MIN_BYTES, ProgressBar, interactive_output
from runtime.transfer import TransferEngine, TransferSummary

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


def _walk(directory: Path, arc_prefix: str, field: str) -> list[tuple[Path, str]]:
    """Every file under ``directory`` not ignored, as (path, archive name)."""
    spec = _ignore_spec(directory)
    entries: list[tuple[Path, str]] = []

    def on_error(exc: OSError) -> None:
        raise ConfigurationError(
            field,
            exc.filename,
            f"cannot be read ({exc.strerror})",
            "fix its permissions or add it to .smlaunchignore",
        ) from exc

    for root, dirs, files in os.walk(directory, followlinks=True, onerror=on_error):
        rel_root = Path(root).relative_to(directory)
        if spec is not None:
            # Prune ignored directories so nothing below them is read.
            dirs[:] = [d for d in dirs if not spec.match_file((rel_root / d).as_posix() + "/")]
        dirs.sort()
        for name in sorted(files):
            rel = (rel_root / name).as_posix()
            if spec is not None and spec.match_file(rel):
                continue
            local = Path(root) / name
            _check_readable_file(local, field)
            entries.append((local, f"{arc_prefix}{rel}"))
    return entries


def _check_readable_file(path: Path, field: str) -> None:
    if not path.exists():
        raise ConfigurationError(
            field,
            str(path),
            "a symlink to a file that does not exist",
            "remove the link or add it to .smlaunchignore",
        )
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigurationError(
            field,
            str(path),
            f"cannot be read ({exc.strerror})",
            "fix its permissions or add it to .smlaunchignore",
        ) from exc


def code_entries(
    entry_point: str, source_dir: str | Path | None, dependencies: list[str] | None = None
) -> list[tuple[Path, str]]:
    """The files of ``sourcedir.tar.gz`` as (local path, archive name), after ignore rules."""
    entries: list[tuple[Path, str]] = []
    if source_dir is not None:
        directory = check_readable_dir(source_dir, "source_dir")
        entries += _walk(directory, "", "source_dir")
    else:
        script = Path(entry_point)
        _check_readable_file(script, "entry_point")
        entries.append((script, script.name))
    for index, dependency in enumerate(dependencies or []):
        field = f"dependencies[{index}]"
        path = Path(dependency).expanduser()
        if path.is_dir():
            entries += _walk(check_readable_dir(path, field), f"{path.resolve().name}/", field)
        else:
            _check_readable_file(path, field)
            entries.append((path, path.name))
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
    return entries


def build_sourcedir(
    entry_point: str,
    source_dir: str | Path | None,
    dependencies: list[str] | None,
    dest_dir: str | Path,
) -> CodeArchive:
    """Write ``<dest_dir>/sourcedir.tar.gz``; same files give the same bytes.

    Warns (``UserWarning``) when the files add up to more than :data:`LARGE_CODE_BYTES`."""
    entries = code_entries(entry_point, source_dir, dependencies)
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
        digest = create_tarball(entries, dest, on_file=progress)
    finally:
        progress.close()
    summary = TransferSummary(
        transferred=[str(local) for local, _ in entries], bytes=size, seconds=time.monotonic() - started
    )
    progress.report(summary.line(f"package {contract.SOURCEDIR_TARBALL}"))
    return CodeArchive(dest, digest, tuple(sorted(arcname for _, arcname in entries)))


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
