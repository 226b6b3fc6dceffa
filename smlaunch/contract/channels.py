"""Which objects of a channel reach which host, and in what order. Pure: no I/O, no clients.

One definition used by every backend that delivers data itself (local processes, Docker), so the
rules below hold everywhere smlaunch emulates SageMaker.

ShardedByS3Key
--------------
SageMaker documents only that each instance receives "1/n of the S3 objects" of a sharded channel;
the assignment rule itself is undocumented (and in practice not stable between jobs). smlaunch's rule:
sort the channel's objects by key (after ManifestFile expansion, by their full URI), then host ``i``
(0-based position of ``algo-(i+1)`` in the sorted host list) of ``N`` takes objects ``i, i+N,
i+2N, ...``. So the subsets are disjoint, their union is the whole channel, their sizes differ by at
most one object, and the same objects and hosts give the same assignment in every run. Object
*sizes* are not balanced (neither are SageMaker's). ``FullyReplicated`` gives every host everything.

ManifestFile
------------
A manifest is a JSON list whose first element is ``{"prefix": "s3://bucket/prefix/"}`` and whose
other elements are object keys relative to that prefix: ``[{"prefix": "s3://b/p/"}, "rel1",
"rel2"]``. Each object lands in the channel at its relative path. Duplicates are kept once (in
first-seen order); a relative path with ``..`` or a leading ``/`` is refused.

Pipe order and ShuffleConfig
----------------------------
Without ``ShuffleConfig`` a host streams its objects in key order every epoch. With it, epoch ``e``
streams them in the order of ``random.Random(f"{seed}:{e}").shuffle`` of the key-sorted list: a new
order every epoch, the same order for the same seed in every run. (SageMaker also reshuffles which
host gets which shard between epochs when ``ShuffleConfig`` is combined with ``ShardedByS3Key``;
smlaunch keeps shards fixed, so a host's data never changes mid-job.)

Compression
-----------
``CompressionType="Gzip"`` (Pipe mode only; SageMaker refuses it in File mode): each object is a gzip
stream (several concatenated members are one stream, as ``gzip -d`` reads them) and the pipe carries
its decompressed bytes. An object that is not gzip, or is cut short, fails the channel.

RecordIO
--------
``RecordWrapperType="RecordIO"`` frames each object as one MXNet RecordIO record in the pipe: magic
``0xced7230a`` (little-endian uint32), the length (uint32, upper 3 bits zero), the bytes, zero
padding to a multiple of 4. With Gzip, the record is the decompressed object.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, TypeVar

FULLY_REPLICATED = "FullyReplicated"
SHARDED_BY_S3_KEY = "ShardedByS3Key"
DISTRIBUTIONS = (FULLY_REPLICATED, SHARDED_BY_S3_KEY)
RECORDIO_MAGIC = 0xCED7230A

T = TypeVar("T")


class ChannelError(ValueError):
    """A channel's data cannot be delivered as configured (bad manifest, bad distribution)."""


def shard(items: Sequence[T], host_index: int, host_count: int, key: Any = None) -> list[T]:
    """ShardedByS3Key: the subset of ``items`` host ``host_index`` (0-based) of ``host_count`` gets.

    ``items`` are sorted (by ``key`` when given) and dealt round-robin; see the module docstring.
    """
    if host_count < 1 or not 0 <= host_index < host_count:
        raise ChannelError(f"host index {host_index} is not within {host_count} host(s)")
    ordered = sorted(items, key=key) if key is not None else sorted(items)  # type: ignore[type-var]
    return ordered[host_index::host_count]


def select_for_host(
    items: Sequence[T], distribution: str, host_index: int, host_count: int, key: Any = None
) -> list[T]:
    """The objects of a channel that one host receives under ``distribution``, in key order."""
    if distribution == FULLY_REPLICATED:
        return sorted(items, key=key) if key is not None else sorted(items)  # type: ignore[type-var]
    if distribution == SHARDED_BY_S3_KEY:
        return shard(items, host_index, host_count, key=key)
    raise ChannelError(f"unknown S3DataDistributionType {distribution!r}; use one of {DISTRIBUTIONS}")


@dataclass(frozen=True)
class ManifestEntry:
    """One object named by a manifest: its full URI and its path inside the channel."""

    uri: str
    rel: str


def parse_manifest(text: str, manifest_uri: str = "<manifest>") -> list[ManifestEntry]:
    """Expand a ManifestFile's JSON into its objects. Raises :class:`ChannelError` on a bad manifest."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ChannelError(f"manifest {manifest_uri} is not JSON: {exc}") from exc
    if not isinstance(data, list) or not data:
        raise ChannelError(
            f"manifest {manifest_uri} must be a JSON list "
            '[{"prefix": "s3://bucket/prefix/"}, "relative/key", ...]'
        )
    head = data[0]
    if not isinstance(head, dict) or not isinstance(head.get("prefix"), str):
        raise ChannelError(f'manifest {manifest_uri}: the first element must be {{"prefix": "s3://..."}}')
    prefix: str = head["prefix"]
    if not prefix.startswith(("s3://", "file://")):
        raise ChannelError(f"manifest {manifest_uri}: prefix {prefix!r} must start with s3:// or file://")
    entries: list[ManifestEntry] = []
    seen: set[str] = set()
    for position, rel in enumerate(data[1:], start=1):
        if not isinstance(rel, str) or not rel:
            raise ChannelError(f"manifest {manifest_uri}: element {position} must be a non-empty string")
        parts = PurePosixPath(rel).parts
        if rel.startswith("/") or ".." in parts:
            raise ChannelError(f"manifest {manifest_uri}: element {position} {rel!r} escapes the prefix")
        if rel in seen:
            continue
        seen.add(rel)
        entries.append(ManifestEntry(prefix + rel if prefix.endswith("/") else f"{prefix}{rel}", rel))
    return entries


def epoch_order(items: Sequence[T], epoch: int, shuffle_seed: int | None) -> list[T]:
    """The order a Pipe streams ``items`` (already key-sorted) in epoch ``epoch``."""
    ordered = list(items)
    if shuffle_seed is not None:
        random.Random(f"{shuffle_seed}:{epoch}").shuffle(ordered)
    return ordered


def gunzip(chunks: Iterable[bytes], name: str = "<object>") -> Iterator[bytes]:
    """The decompressed bytes of a gzip stream given in ``chunks`` (any chunking; several members
    are read one after another). Raises :class:`ChannelError` naming ``name`` on bad or cut data."""
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    started = False
    for chunk in chunks:
        while chunk:
            started = True
            try:
                out = decoder.decompress(chunk)
            except zlib.error as exc:
                raise ChannelError(f"{name}: not valid gzip data ({exc}); CompressionType is Gzip") from exc
            if out:
                yield out
            if not decoder.eof:
                break
            # A member ended: what follows is the next member (or trailing bytes to decode as one).
            chunk = decoder.unused_data
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            started = False
    tail = decoder.flush()
    if tail:
        yield tail
    if started and not decoder.eof:
        raise ChannelError(f"{name}: gzip data ends before its end marker (truncated object?)")


def recordio_header(length: int) -> bytes:
    """The 8-byte RecordIO header of one record of ``length`` bytes."""
    if length >= 1 << 29:
        raise ChannelError(f"a RecordIO record holds < 512 MiB; got {length} bytes")
    return struct.pack("<II", RECORDIO_MAGIC, length)


def recordio_padding(length: int) -> bytes:
    return b"\0" * ((4 - length % 4) % 4)


def read_recordio(data: bytes) -> list[bytes]:
    """Split a RecordIO stream back into records (for tests and for scripts that want it)."""
    records: list[bytes] = []
    offset = 0
    while offset < len(data):
        magic, length = struct.unpack_from("<II", data, offset)
        if magic != RECORDIO_MAGIC:
            raise ChannelError(f"bad RecordIO magic at offset {offset}")
        length &= (1 << 29) - 1
        start = offset + 8
        records.append(data[start : start + length])
        offset = start + length + (4 - length % 4) % 4
    return records
