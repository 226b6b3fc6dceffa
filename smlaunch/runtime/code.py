"""The user's code on this host: fetched, safely extracted, its command.

- :class:`CodeFetcher` puts ``sagemaker_submit_directory`` into the code dir: ``s3://`` through an
  injected boto3 S3 client (created lazily, so boto3 is imported only when S3 is used), ``file://``
  or a plain path, a tarball (extracted with :func:`smlaunch.contract.archive.safe_extract`, which refuses
  absolute paths, ``..``, devices, escaping links and writes through links before writing anything,
  and bounds the expanded size and member count) or a directory (copied). Like the toolkit, it does
  nothing when the code dir is already non-empty (Docker images, re-runs).
- Its ``requirements.txt`` is installed by :mod:`smlaunch.runtime.requirements`.
- :func:`entry_point_command` turns the entry point into the argv head: ``.py`` runs under the
  runtime's Python; any other file (``.sh``, a binary) runs directly when it has a shebang or is a
  binary, else under ``/bin/sh``. Never through ``sh -c``: arguments are never re-split. An entry
  point the training toolkit refuses (:func:`smlaunch.contract.entry_point_problem`: absolute, a
  leading ``-``, ``.``/``..`` segments, characters beyond ``[A-Za-z0-9._+/-]``) or one that resolves
  outside the code dir is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from smlaunch import contract
from smlaunch.contract.archive import safe_extract
from smlaunch.contract.errors import HostConfigurationError


def _is_empty_dir(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


class CodeFetcher:
    """Fetches the submit directory into the code dir. ``s3_client``: a boto3 S3 client (lazy)."""

    def __init__(
        self, s3_client: Any | None = None, s3_client_factory: Callable[[], Any] | None = None
    ) -> None:
        self._s3_client = s3_client
        self._factory = s3_client_factory

    def s3_client(self) -> Any:
        if self._s3_client is None:
            if self._factory is not None:
                self._s3_client = self._factory()
            else:
                import boto3  # only when code comes from S3: boto3 costs ~0.3 s to import

                self._s3_client = boto3.client("s3")
        return self._s3_client

    def fetch(self, submit_directory: str | None, code_dir: Path) -> bool:
        """Put the code into ``code_dir``; return False when skipped (non-empty dir or no source)."""
        code_dir = Path(code_dir)
        if not _is_empty_dir(code_dir) or not submit_directory:
            return False
        code_dir.mkdir(parents=True, exist_ok=True)
        parsed = urlparse(submit_directory)
        if parsed.scheme == "s3":
            self._fetch_s3(submit_directory, parsed.netloc, parsed.path.lstrip("/"), code_dir)
            return True
        if parsed.scheme == "file":
            local = Path(unquote(parsed.path))
        elif parsed.scheme == "":
            local = Path(submit_directory)
        else:
            raise HostConfigurationError(
                contract.HP_SUBMIT_DIRECTORY,
                submit_directory,
                f"unsupported scheme {parsed.scheme!r}",
                "use an s3:// or file:// URI or a local path",
            )
        if local.is_dir():
            shutil.copytree(local, code_dir, dirs_exist_ok=True)
        elif local.is_file():
            safe_extract(local, code_dir)
        else:
            raise HostConfigurationError(
                contract.HP_SUBMIT_DIRECTORY,
                submit_directory,
                "does not exist on this host",
                "point it at the staged sourcedir.tar.gz or a directory",
            )
        return True

    def _fetch_s3(self, uri: str, bucket: str, key: str, code_dir: Path) -> None:
        if not bucket or not key:
            raise HostConfigurationError(
                contract.HP_SUBMIT_DIRECTORY,
                uri,
                "is not a full S3 object URI",
                "use s3://bucket/key/sourcedir.tar.gz",
            )
        with tempfile.TemporaryDirectory(prefix="smlaunch-code-") as tmp:
            local = Path(tmp) / contract.SOURCEDIR_TARBALL
            # verified (size, smlaunch-sha256), retried
            from smlaunch.contract.transfer.engine import TransferEngine

            with TransferEngine(client_factory=self.s3_client, progress=False) as engine:
                engine.download_file(uri, local, skip_unchanged=False)
            safe_extract(local, code_dir)


def resolve_entry_point(code_dir: Path, entry_point: str | None) -> Path:
    """The entry point's path inside ``code_dir``; refuses anything that escapes it or is missing."""
    if not entry_point:
        raise HostConfigurationError(
            contract.HP_PROGRAM,
            entry_point,
            "no entry point was given",
            "set sagemaker_program (entry_point=)",
        )
    problem = contract.entry_point_problem(entry_point)  # what SageMaker's containers refuse
    if problem is not None:
        raise HostConfigurationError(contract.HP_PROGRAM, entry_point, problem, contract.ENTRY_POINT_FIX)
    name = PurePosixPath(entry_point)
    root = Path(code_dir).resolve()
    path = (root / name).resolve()
    if root not in path.parents:
        raise HostConfigurationError(
            contract.HP_PROGRAM,
            entry_point,
            f"resolves outside the code directory {root}",
            "use a file of source_dir",
        )
    if not path.is_file():
        raise HostConfigurationError(
            contract.HP_PROGRAM,
            entry_point,
            f"not found in the code directory {root}",
            "check entry_point and source_dir",
        )
    return path


def entry_point_command(code_dir: Path, entry_point: str | None, python: str) -> list[str]:
    """The argv head that runs the entry point with ``cwd=code_dir`` (arguments follow it)."""
    path = resolve_entry_point(code_dir, entry_point)
    relative = str(PurePosixPath(str(entry_point)))
    if path.suffix == ".py":
        return [python, relative]
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(b"#!") or head == b"\x7fELF":
        mode = path.stat().st_mode
        if not mode & stat.S_IXUSR:
            os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return [str(path)]
    return ["/bin/sh", relative]
