"""One transfer engine for S3 and ``file://``: code staging, channels, artifacts and checkpoints.

Why one engine: every place that moves bytes (the SDK staging ``sourcedir.tar.gz``, the local backend
staging channels and collecting ``model.tar.gz``, checkpoint sync) gets the same speed, the same
verification and the same "don't send it twice" rule. It is longer than most modules because it is
one concept: most of it is :class:`TransferEngine`, whose upload, download and copy paths share the
listing, verification and retry rules below. Its neighbours: local files' hashes and their cache are
:mod:`smlaunch.contract.transfer.hashes`, URIs and S3 keys :mod:`smlaunch.contract.transfer.uris`,
drawing progress is :mod:`smlaunch.contract.progress`.

Contracts:

- **Parallel.** Many small files go through a thread pool (one ``put_object`` / ``get_object`` each,
  ``max_concurrency`` at a time); files at or above ``multipart_threshold`` go through boto3's
  transfer manager (:class:`s3transfer.manager.TransferManager`) as parallel multipart transfers of
  ``multipart_chunksize`` parts. The SageMaker SDK's ``S3Uploader`` uploads one file after another.
- **Verified.** Every upload stores the file's SHA-256 in the object's user metadata
  (``x-amz-meta-smlaunch-sha256``). Every download checks the size and, when the object carries
  that metadata, the SHA-256 (otherwise the MD5 ETag of a single-part object). A corrupt or
  truncated download is retried ``retries`` times and then raises :class:`TransferVerificationError`;
  the destination is written under a temporary name and renamed only once verified, so a reader
  never sees a partial file under its final name.
- **Incremental.** Before uploading a directory the engine lists the destination once (1 request per
  1,000 keys, while it hashes the local files) and skips every file whose size and content hash
  match: for files below the multipart threshold the ETag S3 computes (their MD5) is compared with
  the local file's; for larger files, or when the ETag is not an MD5 (SSE-KMS), one
  ``head_object`` compares ``smlaunch-sha256``. Local hashes are cached per
  ``(path, size, mtime_ns, ctime_ns, device, inode)``, as git and rsync do, in memory and in a
  per-user SQLite file (:class:`~smlaunch.contract.transfer.hashes.HashCache`), so an unchanged tree is
  not re-read, not even by a new process. A file changed less than 2 s before it was hashed is
  not cached, so a change that leaves size and timestamps equal is still seen (git's "racy clean"
  rule). Downloads skip local files whose size and hash already match.
- **Lean listings.** The engine reads only a listed object's key, size and ETag. While it lists
  (and only in the listing thread), a botocore ``before-parse`` hook on the client drops the other
  fields from the response before botocore parses it: parsing each ``LastModified`` with
  ``dateutil`` was most of a 1,000-key page's parse time. The client's other calls, the user's
  included, see whole responses.
- **file://** sources and destinations behave the same way (copy to a temporary name, verify, rename).
- **Modes.** A file is private while it is partial; under its final name it has the mode a new file
  gets under the umask: a download as ``aws s3 cp`` gives it, a copy as ``cp`` (its source's mode).
- **Progress.** A progress bar (``tqdm.auto``: a widget in Jupyter, text in a terminal; else one
  stderr line) for transfers of at least ``progress_min_bytes`` (files skipped as unchanged count),
  ending in one summary line (files, bytes, seconds, skipped unchanged); shown when
  ``progress=True``, or when ``progress=None`` and :func:`interactive_output` (a terminal or a
  Jupyter kernel). Nothing when the output is a file or a pipe. With ``progress_file`` the progress
  is published to that file instead (:class:`~smlaunch.contract.progress.ProgressFile`), for
  another process to draw.

S3 prefix semantics are those of SageMaker channels (:mod:`smlaunch.contract.transfer.uris`).
Runtime code may import this module; it never imports the SDK.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from smlaunch import contract
from smlaunch.contract.archive import sha256_file
from smlaunch.contract.progress import PROGRESS_MIN_BYTES, MiB, ProgressBar, ProgressFile, interactive_output
from smlaunch.contract.transfer.errors import TransferError, TransferVerificationError
from smlaunch.contract.transfer.hashes import (
    FileDigest,
    HashCache,
    default_hash_cache_path,
    digest_file,
    open_source,
)
from smlaunch.contract.transfer.uris import is_s3, join_key, local_path, relative_key, split_s3_uri

logger = logging.getLogger(__name__)

SHA256_METADATA_KEY = "smlaunch-sha256"
DEFAULT_MAX_CONCURRENCY = 16
DEFAULT_MULTIPART_THRESHOLD = 16 * MiB
DEFAULT_MULTIPART_CHUNKSIZE = 8 * MiB
PARTIAL_SUFFIX = ".smlaunch-partial"


def _client_error() -> type[Exception]:
    from botocore.exceptions import ClientError

    return ClientError


def created_mode(requested: int) -> int:
    """The permission bits a file created with ``requested`` gets under this process's umask, as
    ``open()``, ``cp`` and ``aws s3 cp`` give them. The umask is read from ``/proc/self/status``:
    :func:`os.umask` can read it only by setting it, for every thread at once."""
    umask = 0o022
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    return stat.S_IMODE(requested) & ~umask


def _name_of(handle: BinaryIO, path: Path) -> str:
    """A name that opens the very file ``handle`` holds (``/proc/self/fd/N``), for code that opens
    by name; ``path`` where ``/proc`` is not there."""
    name = f"/proc/self/fd/{handle.fileno()}"
    return name if os.path.exists(name) else str(path)


# --- results and progress -----------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectInfo:
    """One object (or file) under a listed prefix."""

    uri: str
    rel: str
    size: int
    etag: str | None = None


@dataclass
class TransferSummary:
    """What one call moved: files transferred and skipped as unchanged, and bytes sent."""

    transferred: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0

    def merge(self, other: TransferSummary) -> None:
        self.transferred += other.transferred
        self.skipped += other.skipped
        self.bytes += other.bytes

    def line(self, label: str) -> str:
        """``upload: 12 file(s), 80.0 MiB in 3.2 s, 4 skipped unchanged``."""
        return (
            f"{label}: {len(self.transferred)} file(s), {self.bytes / MiB:.1f} MiB in "
            f"{self.seconds:.1f} s, {len(self.skipped)} skipped unchanged"
        )


_UNREAD_LISTING_FIELDS = re.compile(
    rb"<(LastModified|Owner|StorageClass|ChecksumAlgorithm|ChecksumType|RestoreStatus)>.*?</\1>", re.DOTALL
)
"""The elements of a ``ListObjectsV2`` ``<Contents>`` entry the engine never reads. S3 escapes ``<``
in keys, so a key cannot contain one of these tags."""

_LEAN_LISTING_HOOK = "smlaunch-lean-listing"
_listing_thread = threading.local()


def _drop_unread_listing_fields(response_dict: dict[str, Any], **_: Any) -> None:
    """botocore ``before-parse.s3.ListObjectsV2`` hook: while this thread lists for the engine
    (:func:`_lean_listing`), strip :data:`_UNREAD_LISTING_FIELDS` from a successful response's body."""
    body = response_dict.get("body")
    if getattr(_listing_thread, "lean", False) and response_dict.get("status_code") == 200 and body:
        response_dict["body"] = _UNREAD_LISTING_FIELDS.sub(b"", body)


@contextlib.contextmanager
def _lean_listing(client: Any) -> Iterator[None]:
    """List through ``client`` in this thread without parsing the fields the engine never reads.

    The hook is registered once per client (botocore de-duplicates by ``unique_id``) and does
    nothing outside this block or in other threads. A client without botocore's event system
    (a test double) lists as it is."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register(
            "before-parse.s3.ListObjectsV2", _drop_unread_listing_fields, unique_id=_LEAN_LISTING_HOOK
        )
    outer = getattr(_listing_thread, "lean", False)
    _listing_thread.lean = True
    try:
        yield
    finally:
        _listing_thread.lean = outer


def _listed_objects(bucket: str, prefix: str, page: dict[str, Any]) -> list[ObjectInfo]:
    """The objects of one ``ListObjectsV2`` page under ``prefix``; "folder" markers (keys ending in
    ``/``) hold no data and are left out."""
    return [
        ObjectInfo(
            f"s3://{bucket}/{obj['Key']}",
            relative_key(prefix, obj["Key"]),
            int(obj["Size"]),
            str(obj.get("ETag", "")).strip('"'),
        )
        for obj in page.get("Contents", [])
        if not obj["Key"].endswith("/")
    ]


def _walk_files(root: Path) -> list[tuple[str, os.stat_result]]:
    """``(relative path with "/", stat)`` of every regular file below ``root`` (symbolic links
    followed, as ``os.walk(followlinks=True)``; partial downloads left out), sorted by path. One
    ``stat`` a file: the directory entries say which are files and directories."""
    found: list[tuple[str, os.stat_result]] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir)) as entries:
                listed = list(entries)
        except OSError:  # vanished or unreadable, as os.walk skips it
            continue
        for entry in listed:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir():
                    pending.append(rel)
                elif entry.is_file() and not entry.name.endswith(PARTIAL_SUFFIX):
                    found.append((rel, entry.stat()))
            except OSError:
                continue
    return sorted(found, key=lambda item: item[0])


def _stat_files(files: Sequence[tuple[str, Path]]) -> list[tuple[str, Path, os.stat_result]]:
    """``(relative path, path, stat)`` of each of ``files`` still there, sorted by relative path."""
    found = []
    for rel, path in files:
        try:
            found.append((rel, path, os.stat(path)))
        except OSError:  # gone since it was listed
            continue
    return sorted(found, key=lambda item: item[0])


# --- the engine ---------------------------------------------------------------------------------


class TransferEngine:
    """Parallel, verified, incremental transfers between local paths, ``file://`` and ``s3://``.

    ``s3_client``: a boto3 S3 client; or ``client_factory``, called on first S3 use; with neither, a
    default client is created on first S3 use, with a connection pool as large as
    ``max_concurrency``. An injected client with a smaller pool caps the concurrency,
    because extra threads would only wait for a connection.

    ``hash_cache``: the local files' content hashes; by default a :class:`HashCache` kept in
    :func:`default_hash_cache_path` (so a new process does not re-read unchanged files), or in memory
    only when ``SMLAUNCH_HASH_CACHE`` is empty or ``0``. Pass ``HashCache()`` for memory only.
    """

    def __init__(
        self,
        s3_client: Any | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunksize: int = DEFAULT_MULTIPART_CHUNKSIZE,
        progress: bool | None = None,
        progress_min_bytes: int = PROGRESS_MIN_BYTES,
        retries: int = 3,
        client_factory: Callable[[], Any] | None = None,
        progress_file: Path | None = None,
        hash_cache: HashCache | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if multipart_chunksize < 5 * MiB:
            raise ValueError("multipart_chunksize must be >= 5 MiB (the S3 minimum part size)")
        self._client = s3_client
        self._client_factory = client_factory
        self.max_concurrency = max_concurrency
        self.multipart_threshold = multipart_threshold
        self.multipart_chunksize = multipart_chunksize
        self.progress = progress
        self.progress_min_bytes = progress_min_bytes
        self.progress_file = progress_file
        self.retries = retries
        self.hashes = hash_cache if hash_cache is not None else HashCache(default_hash_cache_path())
        self._manager: Any = None
        self._lock = threading.Lock()

    # -- clients

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None and self._client_factory is not None:
                self._client = self._client_factory()
            if self._client is None:
                import boto3
                from botocore.config import Config

                self._client = boto3.client("s3", config=Config(max_pool_connections=self.max_concurrency))
            return self._client

    @property
    def concurrency(self) -> int:
        pool = getattr(getattr(self.client.meta, "config", None), "max_pool_connections", None)
        return max(1, min(self.max_concurrency, pool or self.max_concurrency))

    def _transfer_manager(self) -> Any:
        client = self.client
        with self._lock:
            if self._manager is None:
                from s3transfer.manager import TransferConfig, TransferManager

                config = TransferConfig(
                    multipart_threshold=self.multipart_threshold,
                    multipart_chunksize=self.multipart_chunksize,
                    max_request_concurrency=self.max_concurrency,
                    max_submission_concurrency=4,
                    num_download_attempts=self.retries + 2,
                )
                self._manager = TransferManager(client, config)
            return self._manager

    def close(self) -> None:
        """Release the transfer manager's threads and the hash cache's file. The engine can be used
        again afterwards."""
        self.hashes.close()
        with self._lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            manager.shutdown()

    def __enter__(self) -> TransferEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _digest(self, path: Path) -> FileDigest:
        return self.hashes.digest(path, self.multipart_threshold)

    def _progress(self, total: int, label: str, considered: int) -> ProgressBar | ProgressFile:
        """A bar for ``total`` bytes to move, shown per :attr:`progress` when the bytes ``considered``
        (files skipped as unchanged included) reach ``progress_min_bytes``; published to
        :attr:`progress_file` instead when the engine has one."""
        large = considered >= self.progress_min_bytes
        if self.progress_file is not None and large:
            return ProgressFile(self.progress_file, total, label)
        enabled = self.progress if self.progress is not None else interactive_output()
        return ProgressBar(total, label, bool(enabled) and large)

    def _pool_map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(items)), thread_name_prefix="smlaunch-transfer"
        ) as pool:
            return list(pool.map(fn, items))

    # -- listing

    def list(self, uri: str | Path) -> list[ObjectInfo]:
        """Every object under an S3 prefix, or every file under a local directory (or that one file).

        Sorted by relative path; relative paths use ``/``.
        """
        if is_s3(uri):
            bucket, prefix = split_s3_uri(str(uri))
            out: list[ObjectInfo] = []
            paginator = self.client.get_paginator("list_objects_v2")
            with _lean_listing(self.client):
                for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                    out += _listed_objects(bucket, prefix, page)
            return sorted(out, key=lambda o: o.rel)
        root = local_path(uri)
        if root.is_file():
            return [ObjectInfo(root.as_uri(), root.name, root.stat().st_size)]
        return [ObjectInfo((root / rel).as_uri(), rel, st.st_size) for rel, st in _walk_files(root)]

    # -- uploads

    def upload_file(
        self,
        path: str | Path,
        uri: str,
        *,
        skip_unchanged: bool = True,
        extra_args: dict[str, Any] | None = None,
    ) -> TransferSummary:
        """Upload (or copy, for ``file://``/paths) one file to ``uri``, the full destination name."""
        path = Path(path)
        if not is_s3(uri):
            return self._copy_files([(path, local_path(uri))], skip_unchanged, "copy")
        bucket, key = split_s3_uri(uri)
        remote: dict[str, ObjectInfo] = {}
        if skip_unchanged:
            try:
                head = self.client.head_object(Bucket=bucket, Key=key)
                remote[key] = ObjectInfo(
                    uri, key, int(head["ContentLength"]), str(head.get("ETag", "")).strip('"')
                )
            except _client_error():
                pass
        return self._upload_many([(path, bucket, key)], lambda: remote, skip_unchanged, extra_args, "upload")

    def upload_dir(
        self,
        directory: str | Path,
        uri: str,
        *,
        skip_unchanged: bool = True,
        extra_args: dict[str, Any] | None = None,
        include: Callable[[str], bool] | None = None,
        files: Sequence[tuple[str, Path]] | None = None,
    ) -> TransferSummary:
        """Upload every file under ``directory`` to ``uri`` (prefix), keeping relative paths.

        ``include(rel)`` filters files. Unchanged files (same size and hash) are skipped.
        ``files``: the files to send, as (relative path, where its bytes are), instead of every
        file below ``directory`` (what :func:`smlaunch.contract.artifact_tree.walk` found there, say); one
        gone since is left out.
        """
        directory = local_path(directory)
        if directory.is_file():
            raise NotADirectoryError(
                f"upload_dir needs a directory, not the file {directory}: use upload_file"
            )
        found = (
            [(rel, directory / rel, st) for rel, st in _walk_files(directory)]
            if files is None
            else _stat_files(files)
        )
        chosen = [item for item in found if include is None or include(item[0])]
        if not is_s3(uri):
            dest = local_path(uri)
            pairs = [(path, dest / rel) for rel, path, _st in chosen]
            return self._copy_files(pairs, skip_unchanged, "copy")
        bucket, prefix = split_s3_uri(uri)
        jobs = [(path, bucket, join_key(prefix, rel)) for rel, path, _st in chosen]
        stats = [st for _rel, _path, st in chosen]
        if not (skip_unchanged and chosen):
            return self._upload_many(jobs, dict, skip_unchanged, extra_args, "upload", stats)
        listing_prefix = prefix.rstrip("/") + "/" if prefix else ""
        keys = sorted(key for _path, _bucket, key in jobs)
        self.hashes.preload(directory)
        # One listing pass, run while the local files are hashed: the two take about as long.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="smlaunch-list") as lister:
            listing = lister.submit(self._list_keys, bucket, listing_prefix, keys)
            return self._upload_many(jobs, listing.result, skip_unchanged, extra_args, "upload", stats)

    def _list_keys(self, bucket: str, prefix: str, keys: Sequence[str]) -> dict[str, ObjectInfo]:
        """The objects under ``prefix`` up to the last of ``keys`` (sorted), by key: one listing, cut
        into runs of 1,000 of ``keys`` listed side by side, each from the previous run's last key
        (``StartAfter``) until a page passes its own last key. As many pages as one paginated
        listing needs (fewer when the prefix holds keys past ``keys``), in parallel."""
        runs = [
            (keys[i - 1] if i else "", keys[min(i + 1000, len(keys)) - 1]) for i in range(0, len(keys), 1000)
        ]

        def list_run(run: tuple[str, str]) -> list[ObjectInfo]:
            after, last = run
            found: list[ObjectInfo] = []
            while True:
                start = {"StartAfter": after} if after else {}  # the first run starts at the prefix
                with _lean_listing(self.client):
                    page = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, **start)
                found += _listed_objects(bucket, prefix, page)
                contents = page.get("Contents") or []
                if not (page.get("IsTruncated") and contents) or contents[-1]["Key"] >= last:
                    return found
                after = contents[-1]["Key"]

        return {split_s3_uri(o.uri)[1]: o for run in self._pool_map(list_run, runs) for o in run}

    def _unchanged_remote(self, digest: FileDigest, bucket: str, key: str, remote: ObjectInfo) -> bool:
        if remote.size != digest.size:
            return False
        if remote.etag and remote.etag == digest.etag:
            return True
        # Multipart-sized, or not an MD5 ETag (SSE-KMS): compare the hash stored at upload.
        return self._remote_sha256(bucket, key) == digest.sha256

    def _remote_sha256(self, bucket: str, key: str) -> str | None:
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
        except _client_error():
            return None
        sha: str | None = head.get("Metadata", {}).get(SHA256_METADATA_KEY)
        return sha

    def _upload_many(
        self,
        jobs: Sequence[tuple[Path, str, str]],
        listing: Callable[[], dict[str, ObjectInfo]],
        skip_unchanged: bool,
        extra_args: dict[str, Any] | None,
        label: str,
        stats: Sequence[os.stat_result] | None = None,
    ) -> TransferSummary:
        """Upload ``jobs`` (path, bucket, key), skipping those unchanged against ``listing()``, the
        destination's objects by key (called once, after the local files are hashed). ``stats``:
        the files' ``os.stat`` results when the caller has them (else taken here)."""
        started = time.monotonic()
        summary = TransferSummary()
        # Cache hits inline (a stat each at most); only files to read go through the pool.
        cached = [
            self.hashes.cached(path, self.multipart_threshold, stats[i] if stats is not None else None)
            for i, (path, _b, _k) in enumerate(jobs)
        ]
        misses = [path for (path, _b, _k), digest in zip(jobs, cached, strict=True) if digest is None]
        read = iter(self._pool_map(self._digest, misses))
        self.hashes.flush()
        digests = [digest if digest is not None else next(read) for digest in cached]
        remote = listing()
        todo: list[tuple[Path, str, str, FileDigest]] = []
        for (path, bucket, key), digest in zip(jobs, digests, strict=True):
            known = remote.get(key)
            if skip_unchanged and known is not None and self._unchanged_remote(digest, bucket, key, known):
                summary.skipped.append(f"s3://{bucket}/{key}")
            else:
                todo.append((path, bucket, key, digest))
        progress = self._progress(sum(d.size for *_, d in todo), label, sum(d.size for d in digests))
        small = [job for job in todo if job[3].size < self.multipart_threshold]
        large = [job for job in todo if job[3].size >= self.multipart_threshold]
        opened = contextlib.ExitStack()
        try:
            futures: list[Future[Any]] = []
            if large:
                from s3transfer.subscribers import BaseSubscriber

                class _Sub(BaseSubscriber):  # type: ignore[misc]
                    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
                        progress(bytes_transferred)

                manager = self._transfer_manager()
                for path, bucket, key, digest in large:
                    args = self._put_args(digest, extra_args)
                    # s3transfer opens the file by name, part by part: give it the name of what was
                    # opened (and checked) here, so nothing swapped in meanwhile is read or waited on.
                    name = _name_of(opened.enter_context(open_source(path)), path)
                    futures.append(manager.upload(name, bucket, key, extra_args=args, subscribers=[_Sub()]))

            def put_small(job: tuple[Path, str, str, FileDigest]) -> None:
                path, bucket, key, digest = job
                with open_source(path) as handle:
                    body = handle.read()
                if len(body) != digest.size or hashlib.sha256(body).hexdigest() != digest.sha256:
                    raise TransferError(f"{path} changed while it was being uploaded")
                self.client.put_object(
                    Bucket=bucket, Key=key, Body=body, **self._put_args(digest, extra_args)
                )
                progress(digest.size)

            self._pool_map(put_small, small)
            for future in futures:
                future.result()
        finally:
            opened.close()
            progress.close()
        for _path, bucket, key, digest in todo:
            summary.transferred.append(f"s3://{bucket}/{key}")
            summary.bytes += digest.size
        summary.seconds = time.monotonic() - started
        progress.report(summary.line(label))
        return summary

    @staticmethod
    def _put_args(digest: FileDigest, extra_args: dict[str, Any] | None) -> dict[str, Any]:
        args = dict(extra_args or {})
        args["Metadata"] = {**args.get("Metadata", {}), SHA256_METADATA_KEY: digest.sha256}
        return args

    # -- downloads

    def download_file(self, uri: str, path: str | Path, *, skip_unchanged: bool = True) -> TransferSummary:
        """Download (or copy) one object to ``path``, verified."""
        path = Path(path)
        if not is_s3(uri):
            return self._copy_files([(local_path(uri), path)], skip_unchanged, "copy")
        bucket, key = split_s3_uri(uri)
        head = self.client.head_object(Bucket=bucket, Key=key)
        info = ObjectInfo(uri, path.name, int(head["ContentLength"]), str(head.get("ETag", "")).strip('"'))
        return self.download_objects([info], path.parent, skip_unchanged=skip_unchanged, dest_paths=[path])

    def download_prefix(
        self,
        uri: str,
        directory: str | Path,
        *,
        skip_unchanged: bool = True,
        include: Callable[[str], bool] | None = None,
    ) -> TransferSummary:
        """Download every object under ``uri`` into ``directory`` at its relative path."""
        objects = [o for o in self.list(uri) if include is None or include(o.rel)]
        return self.download_objects(objects, Path(directory), skip_unchanged=skip_unchanged)

    def download_objects(
        self,
        objects: Iterable[ObjectInfo],
        directory: Path,
        *,
        skip_unchanged: bool = True,
        dest_paths: Sequence[Path] | None = None,
        on_done: Callable[[ObjectInfo, Path], None] | None = None,
        cancel: threading.Event | None = None,
        label: str = "download",
    ) -> TransferSummary:
        """Download listed objects into ``directory / rel`` (or ``dest_paths``), in parallel.

        ``on_done(info, path)`` is called (from a worker thread) as each file lands, verified, under
        its final name. Local sources (``file://``) are copied the same way. Once ``cancel`` is
        set, objects not started yet are left out (and not counted as transferred).
        """
        started = time.monotonic()
        objects = list(objects)
        dests = dest_paths or [contract.child_path(directory, o.rel, f"object {o.uri}") for o in objects]
        summary = TransferSummary()
        pairs = list(zip(objects, dests, strict=True))
        local_pairs = [(local_path(o.uri), d) for o, d in pairs if not is_s3(o.uri)]
        if local_pairs:
            summary.merge(self._copy_files(local_pairs, skip_unchanged, "copy"))
            if on_done is not None:
                for o, d in zip(objects, dests, strict=True):
                    if not is_s3(o.uri):
                        on_done(o, d)
        remote = [(o, d) for o, d in zip(objects, dests, strict=True) if is_s3(o.uri)]
        todo: list[tuple[ObjectInfo, Path]] = []
        for info, dest in remote:
            if skip_unchanged and dest.is_file() and dest.stat().st_size == info.size:
                local = self._digest(dest)
                if (info.etag and info.etag == local.etag) or (
                    local.etag is None and self._remote_sha256(*split_s3_uri(info.uri)) == local.sha256
                ):
                    summary.skipped.append(info.uri)
                    if on_done is not None:
                        on_done(info, dest)
                    continue
            todo.append((info, dest))
        self.hashes.flush()
        progress = self._progress(sum(o.size for o, _ in todo), label, sum(o.size for o in objects))

        def fetch(job: tuple[ObjectInfo, Path]) -> None:
            info, dest = job
            if cancel is not None and cancel.is_set():
                return
            self._download_verified(info, dest, progress)
            if on_done is not None:
                on_done(info, dest)

        try:
            small = [job for job in todo if job[0].size < self.multipart_threshold]
            large = [job for job in todo if job[0].size >= self.multipart_threshold]
            # Large objects are already parallel inside (multipart ranges); run a few side by side.
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="smlaunch-large") as big_pool:
                big = [big_pool.submit(fetch, job) for job in large]
                self._pool_map(fetch, small)
                for future in big:
                    future.result()
        finally:
            progress.close()
        for info, dest in todo:
            if dest.is_file():
                summary.transferred.append(info.uri)
                summary.bytes += info.size
        summary.seconds = time.monotonic() - started
        progress.report(summary.line(label))
        return summary

    def _download_verified(self, info: ObjectInfo, dest: Path, progress: ProgressBar | ProgressFile) -> None:
        bucket, key = split_s3_uri(info.uri)
        dest.parent.mkdir(parents=True, exist_ok=True)
        last_problem = ""
        for attempt in range(self.retries + 1):
            fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=PARTIAL_SUFFIX, dir=dest.parent)
            os.fchmod(fd, created_mode(0o666))  # private while partial; then as any new file
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                expected_sha, expected_size, etag = self._fetch_to(bucket, key, info, tmp, progress)
                problem = self._verify(tmp, expected_size, expected_sha, etag)
                if problem is None:
                    os.replace(tmp, dest)
                    return
                last_problem = problem
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk: no retry will fit
                    raise OSError(exc.errno, exc.strerror, str(dest)) from exc
                last_problem = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # network errors, truncated streams: retry the whole object
                last_problem = f"{type(exc).__name__}: {exc}"
            finally:
                tmp.unlink(missing_ok=True)
            logger.warning(
                "download of %s failed verification (attempt %d/%d): %s",
                info.uri,
                attempt + 1,
                self.retries + 1,
                last_problem,
            )
        raise TransferVerificationError(
            f"download of {info.uri} failed after {self.retries + 1} attempts: {last_problem}"
        )

    def _fetch_to(
        self, bucket: str, key: str, info: ObjectInfo, tmp: Path, progress: ProgressBar | ProgressFile
    ) -> tuple[str | None, int, str]:
        """Fetch one object into ``tmp``; return (declared sha256, declared size, ETag)."""
        if info.size < self.multipart_threshold:
            response = self.client.get_object(Bucket=bucket, Key=key)
            body = response["Body"].read()
            tmp.write_bytes(body)
            progress(len(body))
            return (
                response.get("Metadata", {}).get(SHA256_METADATA_KEY),
                int(response.get("ContentLength", info.size)),
                str(response.get("ETag", "")).strip('"'),
            )
        head = self.client.head_object(Bucket=bucket, Key=key)
        from s3transfer.subscribers import BaseSubscriber

        class _Sub(BaseSubscriber):  # type: ignore[misc]
            def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
                progress(bytes_transferred)

        future = self._transfer_manager().download(bucket, key, str(tmp), subscribers=[_Sub()])
        future.result()
        return (
            head.get("Metadata", {}).get(SHA256_METADATA_KEY),
            int(head["ContentLength"]),
            str(head.get("ETag", "")).strip('"'),
        )

    def _verify(self, path: Path, size: int, sha256: str | None, etag: str) -> str | None:
        actual = path.stat().st_size
        if actual != size:
            return f"size {actual} != expected {size} (truncated)"
        got: str | None
        if sha256 is not None:
            got = sha256_file(path)
            return None if got == sha256 else f"sha256 {got} != {sha256} (corrupt)"
        if etag and "-" not in etag and len(etag) == 32:
            got = digest_file(path, actual + 1).etag
            return None if got == etag else f"md5 {got} != ETag {etag} (corrupt)"
        return None  # no checksum declared (foreign multipart object): the size check is all we have

    # -- local copies

    def _copy_files(
        self, pairs: Sequence[tuple[Path, Path]], skip_unchanged: bool, label: str
    ) -> TransferSummary:
        started = time.monotonic()
        summary = TransferSummary()

        def copy(pair: tuple[Path, Path]) -> tuple[str, int]:
            src, dest = pair
            if skip_unchanged and dest.is_file() and dest.stat().st_size == src.stat().st_size:
                if self._digest(src).sha256 == self._digest(dest).sha256:
                    return "skipped", 0
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=PARTIAL_SUFFIX, dir=dest.parent)
            os.fchmod(fd, created_mode(src.stat().st_mode))  # as cp: a private source stays private
            os.close(fd)
            try:
                with open_source(src) as source:  # copyfile, by that name, keeps its kernel fast path
                    shutil.copyfile(_name_of(source, src), tmp_name)
                want = self._digest(src)
                if sha256_file(Path(tmp_name)) != want.sha256:
                    raise TransferVerificationError(f"copy of {src} to {dest} does not match its source")
                os.replace(tmp_name, dest)
            finally:
                Path(tmp_name).unlink(missing_ok=True)
            return "transferred", want.size

        sizes = [src.stat().st_size for src, _ in pairs]
        progress = self._progress(sum(sizes), label, sum(sizes))

        def copy_counted(pair: tuple[Path, Path]) -> tuple[str, int]:
            outcome = copy(pair)
            progress(pair[0].stat().st_size)
            return outcome

        try:
            outcomes = self._pool_map(copy_counted, pairs)
        finally:
            progress.close()
            self.hashes.flush()
        for (_src, dest), (outcome, nbytes) in zip(pairs, outcomes, strict=True):
            if outcome == "skipped":
                summary.skipped.append(dest.as_uri())
            else:
                summary.transferred.append(dest.as_uri())
                summary.bytes += nbytes
        summary.seconds = time.monotonic() - started
        progress.report(summary.line(label))
        return summary

    # -- deletions

    def delete(self, uri: str | Path, rels: Iterable[str]) -> builtins.list[str]:
        """Delete the objects ``rels`` (relative paths) under an S3 prefix or local directory;
        return the ones deleted. An object already absent is not an error."""
        rels = sorted(set(rels))
        if not rels:
            return []
        if is_s3(uri):
            bucket, prefix = split_s3_uri(str(uri))
            for start in range(0, len(rels), 1000):  # DeleteObjects takes at most 1000 keys
                batch = rels[start : start + 1000]
                response = self.client.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": join_key(prefix, rel)} for rel in batch], "Quiet": True},
                )
                errors = response.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise TransferError(
                        f"deleting s3://{bucket}/{first.get('Key')} failed: "
                        f"{first.get('Code')} {first.get('Message')}"
                    )
            return rels
        root = local_path(uri)
        for rel in rels:
            (root / rel).unlink(missing_ok=True)
        return rels

    # -- sync

    def sync(self, source: str | Path, destination: str | Path) -> TransferSummary:
        """Make ``destination`` hold every file of ``source`` (new and changed files only).

        Either side may be a local path, ``file://`` or ``s3://`` (S3 to S3 is not supported).
        Nothing is deleted at the destination.
        """
        if is_s3(source) and is_s3(destination):
            raise ValueError("S3-to-S3 sync is not supported; download then upload")
        if is_s3(destination):
            return self.upload_dir(local_path(source), str(destination))
        if is_s3(source):
            return self.download_prefix(str(source), local_path(destination))
        return self.upload_dir(local_path(source), local_path(destination).as_uri())
