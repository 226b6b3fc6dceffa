"""Model and output artifacts of an emulated multi-host job, packaged as the SageMaker platform does.

After every host has exited, the platform tars each host's ``/opt/ml/model`` into ONE
``model.tar.gz`` (files at the archive root, merged across hosts) and ``/opt/ml/output/data`` into
``output.tar.gz``, and puts both at ``<output_path>/<job>/output/``. This module does the same for
backends that keep the hosts' trees on this machine (local processes, Docker).

Merge rule: files are unioned across hosts. Two hosts writing the same path with identical bytes is
fine (one copy is kept). With different bytes the first host in host order (``algo-1`` first, the
master) wins and a warning naming both hosts and the path goes to the job log: never a silent
overwrite (SageMaker's local mode silently lets the last host win). With ``conflicts="error"``
(``LocalSession(artifact_conflicts="error")``) a clash raises :class:`ArtifactConflictError` instead,
before anything is delivered, and the job ends Failed naming every clashing path.

What is delivered of each host's directory is :mod:`smlaunch.contract.artifact_tree`'s rule: regular files,
and links to them inside the directory (dereferenced); links out of it, dangling links, loops,
FIFOs, sockets and devices are skipped, each named in the job log, and the rest is delivered.
Nothing but a regular file is ever opened, to pack it or to compare two hosts' copies.

Destinations: ``file://`` (the directory is created) or ``s3://`` (through the injected boto3 client).
Nothing already at ``<output_path>/<job>/output/`` is ever overwritten: the backend refuses such a
job at check time, and should a job of the same name (another job store) deliver there while this
one runs, :class:`ArtifactExistsError` fails this one instead.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.contract import artifact_tree
from smlaunch.contract.archive import pack_files
from smlaunch.contract.artifact_tree import ArtifactFile, NotARegularFile, Skipped
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.base import output_prefix
from smlaunch.sdk.backends.emulated.layout import file_uri_path


class ArtifactConflictError(RuntimeError):
    """Two hosts wrote the same artifact path with different bytes, and the session asked for errors."""


class ArtifactExistsError(RuntimeError):
    """``<output_path>/<job>/output/`` already holds objects: they are never overwritten."""


@dataclass(frozen=True)
class Conflict:
    """The same relative path written with different bytes by two hosts."""

    path: str
    kept_host: str
    other_host: str

    def message(self, what: str) -> str:
        return (
            f"WARNING: {what} file {self.path!r} differs between {self.kept_host} and {self.other_host}; "
            f"keeping {self.kept_host}'s copy (write host-specific names, or save on one host only)"
        )


@dataclass(frozen=True)
class Merge:
    """The union of several hosts' directories: the files to deliver (one per name, sorted), the
    names written with different bytes, and each host's skipped entries (see
    :mod:`smlaunch.contract.artifact_tree`)."""

    files: list[ArtifactFile]
    conflicts: list[Conflict]
    skipped: dict[str, list[Skipped]]


def _sha256(item: ArtifactFile) -> str:
    digest = hashlib.sha256()
    with item.open() as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def merge_entries(trees: Mapping[str, Path], seen_at: str | None = None) -> Merge:
    """Union of the regular files of ``trees`` (host -> directory), walked by
    :func:`smlaunch.contract.artifact_tree.walk`: links out, loops, FIFOs, sockets and devices are skipped.
    ``seen_at``: where the hosts' code saw its directory (``/opt/ml/model``), for absolute links.

    Hosts are visited in the mapping's order; the first host to write a path wins. Only regular
    files are ever opened to compare two hosts' copies.
    """
    chosen: dict[str, tuple[str, ArtifactFile]] = {}
    conflicts: list[Conflict] = []
    skipped: dict[str, list[Skipped]] = {}
    for host, root in trees.items():
        listing = artifact_tree.walk(root, seen_at)
        skipped[host] = listing.skipped
        for item in listing.files:
            if item.name not in chosen:
                chosen[item.name] = (host, item)
                continue
            kept_host, kept = chosen[item.name]
            try:
                if _sha256(kept) != _sha256(item):
                    conflicts.append(Conflict(item.name, kept_host, host))
            except NotARegularFile as error:  # replaced since the walk: packing skips it, and says so
                skipped[host].append(Skipped(item.name, error.strerror or "no longer a regular file"))
    files = [item for _, (_, item) in sorted(chosen.items())]
    return Merge(files, conflicts, {host: found for host, found in skipped.items() if found})


def _listable(uri: str) -> str:
    """``uri`` as the transfer engine takes it (``file://localhost/x`` -> ``file:///x``)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("file", "s3"):
        raise ValueError(f"{uri!r}: output URIs must start with file:// or s3://")
    if parsed.scheme == "file":
        return file_uri_path(uri).as_uri() + ("/" if uri.endswith("/") else "")
    return uri


def put(local: Path | Sequence[ArtifactFile], uri: str, s3_client: Callable[[], Any]) -> None:
    """Copy ``local`` (a file, or files a walk found, under their names) to ``uri`` (``file://`` or
    ``s3://``) through the transfer engine (parallel multipart, verified, written under a temporary
    name)."""
    uri = _listable(uri)
    with TransferEngine(client_factory=s3_client, progress=False) as engine:
        if isinstance(local, Path):
            engine.upload_file(local, uri)
        else:
            common = Path(os.path.commonpath([item.root for item in local])) if local else Path.cwd()
            engine.upload_dir(common, uri, files=[(item.name, item.path) for item in local])


def package_artifacts(
    host_bases: Mapping[str, Path],
    job_name: str,
    output_path: str,
    staging_dir: Path,
    s3_client: Callable[[], Any],
    log: Callable[[str], None],
    compress: bool = True,
    conflicts: str = "warn",
) -> dict[str, str]:
    """Build and deliver ``model.tar.gz`` and ``output.tar.gz`` from every host's ``/opt/ml`` tree.

    ``host_bases`` maps host -> base directory (the host's ``/opt/ml``), in host order. Conflicts
    are reported through ``log``. Returns ``{"model": uri, "output": uri}``. ``compress=False``
    (``disable_output_compression``, ``CompressionType="NONE"``) uploads the merged model files
    uncompressed under ``<output_path>/<job>/output/model/`` instead of ``model.tar.gz``.
    ``conflicts``: ``"warn"`` (log and keep the first host's copy) or ``"error"`` (raise
    :class:`ArtifactConflictError` before delivering anything).
    """
    paths = {host: contract.Paths(base) for host, base in host_bases.items()}
    prefix = output_prefix(output_path, job_name)
    delivered: dict[str, str] = {}
    merged = []
    trees: tuple[tuple[str, str, str, Callable[[contract.Paths], Path]], ...] = (
        ("model", "model", contract.MODEL_TARBALL, lambda p: p.model_dir),
        ("output", "output/data", contract.OUTPUT_TARBALL, lambda p: p.output_data_dir),
    )
    for key, what, tarball, tree in trees:
        merge = merge_entries({host: tree(p) for host, p in paths.items()}, str(tree(contract.Paths())))
        merged.append((key, what, tarball, merge.files))
        for host, skipped in merge.skipped.items():
            for line in artifact_tree.skip_report(skipped, f"{what} directory of {host}"):
                log(line)
        for clash in merge.conflicts:
            log(clash.message(what))
            if conflicts == "error":
                raise ArtifactConflictError(
                    f"{what} file {clash.path!r} differs between {clash.kept_host} and {clash.other_host} "
                    "(artifact_conflicts='error'); write host-specific names or save on one host only"
                )
    destinations = [
        f"{prefix}/model/" if key == "model" and not compress else f"{prefix}/{tarball}"
        for key, _, tarball, _ in merged
    ]
    with TransferEngine(client_factory=s3_client, progress=False) as engine:
        existing = [found for uri in destinations for found in engine.list(_listable(uri))]
    if existing:  # another job of this name delivered there since this one was checked: keep it
        raise ArtifactExistsError(
            f"{existing[0].uri} already exists (another job named {job_name}); this job's artifacts "
            "are not delivered over it. Use another job name or output_path"
        )
    for key, what, tarball, files in merged:
        if key == "model" and not compress:
            uri = f"{prefix}/model/"
            put(files, uri, s3_client)
            delivered[key] = uri
            continue
        local = staging_dir / tarball
        late: list[Skipped] = []  # replaced by something else since the walk
        pack_files(files, local, late.append)
        for line in artifact_tree.skip_report(late, f"{what} directory"):
            log(line)
        uri = f"{prefix}/{tarball}"
        put(local, uri, s3_client)
        delivered[key] = uri
    return delivered
