"""smlaunch.contract.channels: ShardedByS3Key assignment, ManifestFile expansion, Pipe order, RecordIO
framing,
Gzip decompression."""

from __future__ import annotations

import gzip
import json
import random

import pytest

from smlaunch.contract import channels as rules


def _keys(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    keys = [f"data/part-{i:05d}.bin" for i in range(n)]
    rng.shuffle(keys)
    return keys


@pytest.mark.parametrize("n_objects,n_hosts", [(0, 1), (1, 3), (10, 3), (1000, 7), (16, 4), (5, 8)])
def test_sharding_is_disjoint_complete_balanced(n_objects: int, n_hosts: int) -> None:
    keys = _keys(n_objects)
    shares = [rules.shard(keys, i, n_hosts) for i in range(n_hosts)]
    flat = [k for share in shares for k in share]
    assert len(flat) == len(set(flat)), "a key went to two hosts"
    assert set(flat) == set(keys), "a key went to no host"
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def test_sharding_is_stable_whatever_the_listing_order() -> None:
    first = [rules.shard(_keys(100, seed=1), i, 3) for i in range(3)]
    again = [rules.shard(_keys(100, seed=2), i, 3) for i in range(3)]
    assert first == again
    # The documented rule: sorted keys dealt round-robin.
    ordered = sorted(_keys(100))
    assert first[1] == ordered[1::3]


def test_select_for_host_fully_replicated_and_unknown() -> None:
    keys = _keys(9)
    assert rules.select_for_host(keys, "FullyReplicated", 2, 3) == sorted(keys)
    assert rules.select_for_host(keys, "ShardedByS3Key", 2, 3) == sorted(keys)[2::3]
    with pytest.raises(rules.ChannelError, match="unknown S3DataDistributionType"):
        rules.select_for_host(keys, "Sharded", 0, 1)
    with pytest.raises(rules.ChannelError):
        rules.shard(keys, 3, 3)


def test_manifest_expansion() -> None:
    text = json.dumps([{"prefix": "s3://bucket/data/"}, "a/1.csv", "b.csv", "a/1.csv"])
    entries = rules.parse_manifest(text)
    assert [(e.uri, e.rel) for e in entries] == [
        ("s3://bucket/data/a/1.csv", "a/1.csv"),
        ("s3://bucket/data/b.csv", "b.csv"),
    ]


@pytest.mark.parametrize(
    "text,match",
    [
        ("not json", "not JSON"),
        ("{}", "must be a JSON list"),
        (json.dumps(["s3://b/x"]), "first element"),
        (json.dumps([{"prefix": "http://x/"}, "a"]), "must start with s3://"),
        (json.dumps([{"prefix": "s3://b/p/"}, "../etc/passwd"]), "escapes"),
        (json.dumps([{"prefix": "s3://b/p/"}, 3]), "non-empty string"),
    ],
)
def test_bad_manifests_are_refused(text: str, match: str) -> None:
    with pytest.raises(rules.ChannelError, match=match):
        rules.parse_manifest(text, "s3://b/m.json")


def test_epoch_order_is_deterministic_and_changes_per_epoch() -> None:
    items = sorted(_keys(50))
    assert rules.epoch_order(items, 0, None) == items == rules.epoch_order(items, 5, None)
    e0, e1 = rules.epoch_order(items, 0, 42), rules.epoch_order(items, 1, 42)
    assert sorted(e0) == items and e0 != items and e0 != e1
    assert e0 == rules.epoch_order(items, 0, 42)


def test_recordio_round_trip() -> None:
    records = [b"", b"x", b"abcd", b"hello world"]
    stream = b"".join(rules.recordio_header(len(r)) + r + rules.recordio_padding(len(r)) for r in records)
    assert len(stream) % 4 == 0
    assert rules.read_recordio(stream) == records
    with pytest.raises(rules.ChannelError):
        rules.read_recordio(b"\0" * 8)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1 << 20])
def test_gunzip_any_chunking_and_several_members(chunk_size: int) -> None:
    data = gzip.compress(b"first member, ") + gzip.compress(b"") + gzip.compress(b"second" * 100)
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    assert b"".join(rules.gunzip(chunks)) == b"first member, " + b"second" * 100
    assert b"".join(rules.gunzip([])) == b""  # an empty object stays empty


def test_gunzip_refuses_plain_and_truncated_data() -> None:
    with pytest.raises(rules.ChannelError, match=r"s3://b/x\.gz: not valid gzip data"):
        b"".join(rules.gunzip([b"plain text"], "s3://b/x.gz"))
    with pytest.raises(rules.ChannelError, match=r"s3://b/x\.gz: gzip data ends before its end marker"):
        b"".join(rules.gunzip([gzip.compress(b"abc" * 100)[:-4]], "s3://b/x.gz"))
