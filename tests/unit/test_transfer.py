"""smlaunch.contract.transfer (the engine and the hash cache) against moto (in-process and a server on
127.0.0.1): parallel, verified, incremental."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from moto import mock_aws

from smlaunch import contract
from smlaunch.contract.transfer.engine import SHA256_METADATA_KEY, TransferEngine
from smlaunch.contract.transfer.errors import TransferError, TransferVerificationError
from smlaunch.contract.transfer.hashes import FileDigest, HashCache, default_hash_cache_path, digest_file
from smlaunch.contract.transfer.uris import relative_key

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)


@pytest.fixture(autouse=True)
def _private_hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Engines built without a hash cache keep theirs here, not in the user's ~/.cache."""
    monkeypatch.setenv(contract.SMLAUNCH_HASH_CACHE, str(tmp_path / "cache" / "hashes.sqlite"))


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bucket")
        yield client


def _tree(root: Path, n: int = 30) -> dict[str, bytes]:
    files = {}
    for i in range(n):
        rel = f"d{i % 3}/f{i:03d}.bin"
        data = os.urandom(100 + i)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files[rel] = data
    return files


def test_upload_download_round_trip_with_sha256_metadata(s3: Any, tmp_path: Path) -> None:
    files = _tree(tmp_path / "src")
    engine = TransferEngine(s3, max_concurrency=8, progress=False)
    up = engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert len(up.transferred) == len(files) and not up.skipped
    head = s3.head_object(Bucket="bucket", Key="pre/d0/f000.bin")
    assert head["Metadata"][SHA256_METADATA_KEY] == hashlib.sha256(files["d0/f000.bin"]).hexdigest()
    down = engine.download_prefix("s3://bucket/pre", tmp_path / "dst")
    assert len(down.transferred) == len(files)
    for rel, data in files.items():
        assert (tmp_path / "dst" / rel).read_bytes() == data
    assert not list((tmp_path / "dst").rglob("*.smlaunch-partial"))


def test_unchanged_files_are_not_transferred_again(s3: Any, tmp_path: Path) -> None:
    files = _tree(tmp_path / "src")
    TransferEngine(s3, progress=False).upload_dir(tmp_path / "src", "s3://bucket/pre")
    (tmp_path / "src" / "d1" / "f001.bin").write_bytes(b"changed")
    (tmp_path / "src" / "new.txt").write_bytes(b"new")
    # A fresh engine (no hash cache) still skips: it compares S3's ETags from one listing.
    again = TransferEngine(s3, progress=False).upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert sorted(again.transferred) == ["s3://bucket/pre/d1/f001.bin", "s3://bucket/pre/new.txt"]
    assert len(again.skipped) == len(files) - 1
    engine = TransferEngine(s3, progress=False)
    engine.download_prefix("s3://bucket/pre", tmp_path / "dst")
    second = engine.download_prefix("s3://bucket/pre", tmp_path / "dst")
    assert not second.transferred and len(second.skipped) == len(files) + 1


def _count_requests(client: Any) -> dict[str, int]:
    """Count every S3 operation ``client`` sends, by name, through botocore's event hooks."""
    counts: dict[str, int] = {}

    def hook(model: Any, **kwargs: Any) -> None:
        counts[model.name] = counts.get(model.name, 0) + 1

    client.meta.events.register("before-call.s3", hook)
    return counts


def test_unchanged_reupload_sends_no_put_and_lists_once(s3: Any, tmp_path: Path) -> None:
    _tree(tmp_path / "src", 40)
    TransferEngine(s3, progress=False).upload_dir(tmp_path / "src", "s3://bucket/pre")
    counts = _count_requests(s3)
    again = TransferEngine(s3, max_concurrency=8, progress=False).upload_dir(
        tmp_path / "src", "s3://bucket/pre"
    )
    assert len(again.skipped) == 40 and not again.transferred
    assert counts == {"ListObjectsV2": 1}  # one listing page; no PutObject, no HeadObject per file
    (tmp_path / "src" / "d2" / "f002.bin").write_bytes(b"changed")
    counts.clear()
    third = TransferEngine(s3, progress=False).upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert third.transferred == ["s3://bucket/pre/d2/f002.bin"]
    assert counts == {"ListObjectsV2": 1, "PutObject": 1}


def test_a_listing_of_many_keys_in_parallel_runs_misses_nothing(s3: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2050):  # three runs of at most 1,000 keys, listed side by side
        (src / f"f{i:04d}").write_bytes(b"%d" % i)
    changed, missing = "f1000", "f1999"
    for i in range(2050):
        name = f"f{i:04d}"
        if name != missing:
            body = b"%d" % (i + 1) if name == changed else (src / name).read_bytes()
            s3.put_object(Bucket="bucket", Key=f"pre/{name}", Body=body)
    # Keys the local tree lacks: before, between and after the local ones, a folder marker, and one
    # outside the prefix that shares its first letters.
    for key in ("pre/a", "pre/f0999x", "pre/f1500/", "pre/zzz", "prefix-other/f0001"):
        s3.put_object(Bucket="bucket", Key=key, Body=b"1")
    counts = _count_requests(s3)
    result = TransferEngine(s3, progress=False).upload_dir(src, "s3://bucket/pre")
    assert sorted(result.transferred) == [f"s3://bucket/pre/{changed}", f"s3://bucket/pre/{missing}"]
    assert len(result.skipped) == 2048
    # One HeadObject: an MD5 ETag that differs may still be SSE-KMS's, so smlaunch-sha256 decides.
    assert counts["PutObject"] == 2 and counts["HeadObject"] == 1
    # Three runs; the keys the tree lacks push the first two over 1,000 keys: a second page each.
    assert counts["ListObjectsV2"] == 5


def test_the_engine_lists_without_timestamps_and_the_clients_other_calls_keep_them(
    s3: Any, tmp_path: Path
) -> None:
    """The lean-listing hook strips LastModified (and the other unread fields) from the engine's own
    listings only: a listing by the user on the same client, also from another thread while the
    engine lists, is parsed whole."""
    _tree(tmp_path / "src", 12)
    engine = TransferEngine(s3, progress=False)
    engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    pages: list[tuple[str, dict[str, Any]]] = []

    def record(parsed: dict[str, Any], **_: Any) -> None:
        pages.append((threading.current_thread().name, parsed))

    s3.meta.events.register("after-call.s3.ListObjectsV2", record)
    listed = engine.list("s3://bucket/pre")
    assert [o.rel for o in listed] == sorted(f"d{i % 3}/f{i:03d}.bin" for i in range(12))
    assert all(o.size > 0 and o.etag for o in listed)
    user_pages: list[dict[str, Any]] = []
    users = threading.Thread(
        target=lambda: user_pages.extend(
            s3.list_objects_v2(Bucket="bucket", Prefix="pre") for _ in range(20)
        ),
        name="user",
    )
    users.start()
    for _ in range(20):
        assert engine.upload_dir(tmp_path / "src", "s3://bucket/pre").transferred == []
    users.join()
    mine = [page for thread, page in pages if thread != "user"]
    assert mine and all("LastModified" not in obj for page in mine for obj in page["Contents"])
    assert all("ETag" in obj and "Size" in obj for page in mine for obj in page["Contents"])
    assert len(user_pages) == 20
    assert all(isinstance(obj["LastModified"], datetime) for page in user_pages for obj in page["Contents"])
    assert isinstance(s3.list_objects_v2(Bucket="bucket")["Contents"][0]["LastModified"], datetime)


def test_a_failed_listing_uploads_nothing(s3: Any, tmp_path: Path) -> None:
    _tree(tmp_path / "src", 5)
    counts = _count_requests(s3)
    with pytest.raises(s3.exceptions.NoSuchBucket):
        TransferEngine(s3, progress=False).upload_dir(tmp_path / "src", "s3://absent-bucket/pre")
    assert "PutObject" not in counts


def test_multipart_objects_round_trip_and_skip(s3: Any, tmp_path: Path) -> None:
    big = tmp_path / "src" / "big.bin"
    big.parent.mkdir()
    big.write_bytes(os.urandom(11 * MiB))
    engine = TransferEngine(s3, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, progress=False)
    engine.upload_dir(tmp_path / "src", "s3://bucket/big")
    head = s3.head_object(Bucket="bucket", Key="big/big.bin")
    assert head["ETag"].strip('"').endswith("-3")
    assert digest_file(big, 5 * MiB).etag is None  # no MD5 pass over multipart-sized files
    assert head["Metadata"][SHA256_METADATA_KEY] == hashlib.sha256(big.read_bytes()).hexdigest()
    engine.download_file("s3://bucket/big/big.bin", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == big.read_bytes()
    assert (
        TransferEngine(s3, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, progress=False)
        .upload_dir(tmp_path / "src", "s3://bucket/big")
        .skipped
    )
    engine.close()


def _tamper(client: Any, how: str, times: int) -> list[int]:
    """Make the next ``times`` GetObject responses truncated or corrupt (same length)."""
    calls = [0]

    def hook(http_response: Any, parsed: dict[str, Any], **kwargs: Any) -> None:
        if "Body" not in parsed or calls[0] >= times:
            return
        calls[0] += 1
        data = parsed["Body"].read()
        if how == "truncated":
            data = data[: len(data) // 2]
        else:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        parsed["Body"] = StreamingBody(io.BytesIO(data), len(data))

    client.meta.events.register("after-call.s3.GetObject", hook)
    return calls


@pytest.mark.parametrize("how", ["truncated", "corrupt"])
@pytest.mark.parametrize("size", [1000, 6 * MiB])
def test_bad_download_is_detected_and_retried(s3: Any, tmp_path: Path, how: str, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f.bin").write_bytes(data)
    engine = TransferEngine(
        s3, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, progress=False, retries=2
    )
    engine.upload_file(tmp_path / "f.bin", "s3://bucket/f.bin")
    calls = _tamper(s3, how, times=1)
    engine.download_file("s3://bucket/f.bin", tmp_path / "out.bin")
    assert calls[0] == 1, "the tampering hook never fired"
    assert (tmp_path / "out.bin").read_bytes() == data
    engine.close()


def test_persistent_corruption_fails_and_leaves_nothing(s3: Any, tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"payload" * 100)
    engine = TransferEngine(s3, progress=False, retries=2)
    engine.upload_file(tmp_path / "f.bin", "s3://bucket/f.bin")
    calls = _tamper(s3, "corrupt", times=100)
    with pytest.raises(TransferVerificationError, match=r"3 attempts.*sha256"):
        engine.download_file("s3://bucket/f.bin", tmp_path / "out" / "f.bin")
    assert calls[0] == 3
    assert not list((tmp_path / "out").iterdir()), "a partial or corrupt file was left behind"


def test_file_uri_copy_is_incremental(tmp_path: Path) -> None:
    files = _tree(tmp_path / "src", 10)
    engine = TransferEngine(progress=False)
    first = engine.sync(tmp_path / "src", (tmp_path / "dst").as_uri())
    assert len(first.transferred) == 10
    (tmp_path / "src" / "d0" / "f000.bin").write_bytes(b"x")
    second = engine.sync((tmp_path / "src").as_uri(), tmp_path / "dst")
    assert len(second.transferred) == 1 and len(second.skipped) == 9
    assert {o.rel for o in engine.list(tmp_path / "dst")} == set(files)


def test_prefix_semantics() -> None:
    assert relative_key("data/train/", "data/train/a/b.csv") == "a/b.csv"
    assert relative_key("data/train", "data/train/a.csv") == "a.csv"
    assert relative_key("data/train.csv", "data/train.csv") == "train.csv"


def test_against_a_moto_server_on_loopback(tmp_path: Path) -> None:
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        client.create_bucket(Bucket="served")
        files = _tree(tmp_path / "src", 40)
        engine = TransferEngine(client, progress=False)
        assert len(engine.upload_dir(tmp_path / "src", "s3://served/x").transferred) == 40
        assert len(engine.upload_dir(tmp_path / "src", "s3://served/x").skipped) == 40
        engine.download_prefix("s3://served/x/", tmp_path / "dst")
        assert {rel: (tmp_path / "dst" / rel).read_bytes() for rel in files} == files
    finally:
        server.stop()


def test_cancelled_download_starts_nothing_more(s3: Any, tmp_path: Path) -> None:
    import threading

    _tree(tmp_path / "src", 10)
    engine = TransferEngine(s3, progress=False)
    engine.upload_dir(tmp_path / "src", "s3://bucket/c")
    cancel = threading.Event()
    cancel.set()
    summary = engine.download_objects(engine.list("s3://bucket/c"), tmp_path / "dst", cancel=cancel)
    assert not summary.transferred and not (tmp_path / "dst").exists()


def test_upload_dir_accepts_a_relative_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a")
    monkeypatch.chdir(tmp_path)
    dest = tmp_path / "dest"
    TransferEngine(progress=False).upload_dir("data", dest.as_uri())
    assert (dest / "a.txt").read_text() == "a"


def test_delete_in_batches_of_1000_and_absent_objects_are_fine(s3: Any) -> None:
    for i in range(1001):
        s3.put_object(Bucket="bucket", Key=f"ckpt/f{i:04d}", Body=b"x")
    calls: list[int] = []
    original = s3.delete_objects

    def counting(**kwargs: Any) -> Any:
        calls.append(len(kwargs["Delete"]["Objects"]))
        return original(**kwargs)

    s3.delete_objects = counting
    rels = [f"f{i:04d}" for i in range(1001)] + ["never-there"]
    deleted = TransferEngine(s3, progress=False).delete("s3://bucket/ckpt", rels)
    assert deleted == sorted(rels) and calls == [1000, 2]
    assert "Contents" not in s3.list_objects_v2(Bucket="bucket", Prefix="ckpt/")


def test_a_refused_delete_names_the_key_and_the_error() -> None:
    class Refusing:
        def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
            return {"Errors": [{"Key": "ckpt/a", "Code": "AccessDenied", "Message": "Access Denied"}]}

    with pytest.raises(TransferError, match="deleting s3://bucket/ckpt/a failed: AccessDenied Access Denied"):
        TransferEngine(Refusing(), progress=False).delete("s3://bucket/ckpt/", ["a"])


# --- the persistent hash cache ------------------------------------------------------------------


def _later() -> int:
    """A clock 10 s ahead: files written by the test look settled, not racily fresh, to the cache."""
    return time.time_ns() + 10_000_000_000


class _CountingHasher:
    """The cache's hasher, counting the files it reads."""

    def __init__(self) -> None:
        self.read: list[Path] = []

    def __call__(self, path: Path, multipart_threshold: int) -> FileDigest:
        self.read.append(path)
        return digest_file(path, multipart_threshold)


def _cache(path: Path, hasher: _CountingHasher, **kwargs: Any) -> HashCache:
    return HashCache(path, hasher=hasher, clock=_later, **kwargs)


def test_a_fresh_engine_reuses_persisted_hashes_and_reads_no_file(s3: Any, tmp_path: Path) -> None:
    files = _tree(tmp_path / "src", 40)
    cache_file, hasher = tmp_path / "c" / "hashes.sqlite", _CountingHasher()
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as first:
        assert len(first.upload_dir(tmp_path / "src", "s3://bucket/pre").transferred) == 40
    assert len(hasher.read) == 40
    assert cache_file.stat().st_mode & 0o777 == 0o600 and cache_file.parent.stat().st_mode & 0o777 == 0o700
    hasher.read.clear()
    counts = _count_requests(s3)
    # A new cache object reads only the file: what a new process (a new notebook kernel) sees.
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as second:
        again = second.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert len(again.skipped) == 40 and not again.transferred
    assert hasher.read == [] and counts == {"ListObjectsV2": 1}
    stored = b"".join(
        Path(f"{cache_file}{suffix}").read_bytes()
        for suffix in ("", "-wal")
        if Path(f"{cache_file}{suffix}").exists()
    )
    assert hashlib.sha256(files["d0/f000.bin"]).hexdigest().encode() in stored
    assert not [rel for rel, data in files.items() if data in stored], "file contents reached the cache"


def test_a_changed_file_of_the_same_size_is_uploaded_again(s3: Any, tmp_path: Path) -> None:
    _tree(tmp_path / "src", 10)
    cache_file, hasher = tmp_path / "c" / "hashes.sqlite", _CountingHasher()
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as engine:
        engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    edited, restored = tmp_path / "src" / "d0" / "f000.bin", tmp_path / "src" / "d1" / "f001.bin"
    edited.write_bytes(os.urandom(edited.stat().st_size))  # same size, new mtime
    before = restored.stat()
    restored.write_bytes(os.urandom(before.st_size))  # same size, mtime put back (``touch -r``)
    os.utime(restored, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert restored.stat().st_mtime_ns == before.st_mtime_ns
    hasher.read.clear()
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as engine:
        again = engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert sorted(again.transferred) == ["s3://bucket/pre/d0/f000.bin", "s3://bucket/pre/d1/f001.bin"]
    assert sorted(hasher.read) == sorted([edited, restored])  # the ctime gives the second one away
    assert s3.get_object(Bucket="bucket", Key="pre/d1/f001.bin")["Body"].read() == restored.read_bytes()


def test_files_changed_just_before_hashing_are_not_trusted(s3: Any, tmp_path: Path) -> None:
    _tree(tmp_path / "src", 5)
    cache_file, hasher = tmp_path / "c" / "hashes.sqlite", _CountingHasher()
    # The real clock: every file was written within the racy window, so none is kept (another write
    # in the same clock tick, of the same size, would leave size and timestamps as they were).
    cache = HashCache(cache_file, hasher=hasher)
    with TransferEngine(s3, progress=False, hash_cache=cache) as engine:
        engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
        engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert len(hasher.read) == 10, "a racily fresh file was trusted by the same engine"
    with sqlite3.connect(cache_file) as db:
        assert db.execute("SELECT count(*) FROM hashes").fetchone() == (0,)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other schema"])
def test_a_corrupt_cache_file_is_replaced(
    s3: Any, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    _tree(tmp_path / "src", 10)
    cache_file, hasher = tmp_path / "c" / "hashes.sqlite", _CountingHasher()
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as engine:
        engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    if damage == "garbage":
        cache_file.write_bytes(os.urandom(8192))
    elif damage == "truncated":
        with open(cache_file, "r+b") as handle:
            handle.truncate(cache_file.stat().st_size // 2 or 100)
    else:
        cache_file.unlink()
        with sqlite3.connect(cache_file) as db:
            db.execute("CREATE TABLE hashes (path TEXT, digest TEXT)")
    hasher.read.clear()
    with caplog.at_level(logging.WARNING, "smlaunch.contract.transfer.hashes"):
        with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as engine:
            again = engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert len(again.skipped) == 10 and len(hasher.read) == 10  # hashed again, nothing re-sent
    if damage != "other schema":  # an older layout is replaced silently
        assert any("is corrupt" in r.getMessage() for r in caplog.records)
    hasher.read.clear()
    with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, hasher)) as engine:
        engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
    assert hasher.read == [], "the replaced cache does not work"


@pytest.mark.parametrize("where", ["under a file", "a directory"])
def test_an_unusable_cache_location_warns_and_uploads(
    s3: Any, tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    _tree(tmp_path / "src", 5)
    (tmp_path / "blocker").write_text("not a directory")
    (tmp_path / "dir.sqlite").mkdir()
    cache_file = (
        tmp_path / "blocker" / "hashes.sqlite" if where == "under a file" else tmp_path / "dir.sqlite"
    )
    with caplog.at_level(logging.WARNING, "smlaunch.contract.transfer.hashes"):
        with TransferEngine(s3, progress=False, hash_cache=_cache(cache_file, _CountingHasher())) as engine:
            assert len(engine.upload_dir(tmp_path / "src", "s3://bucket/pre").transferred) == 5
            assert len(engine.upload_dir(tmp_path / "src", "s3://bucket/pre").skipped) == 5
    warnings = [r.getMessage() for r in caplog.records if "hash cache" in r.getMessage()]
    assert len(warnings) == 1 and contract.SMLAUNCH_HASH_CACHE in warnings[0]  # once, with the way out
    assert (tmp_path / "blocker").read_text() == "not a directory" and (tmp_path / "dir.sqlite").is_dir()


_WRITER = """
import sys, time
from pathlib import Path
from smlaunch.contract.transfer.hashes import HashCache
cache = HashCache(Path(sys.argv[1]), clock=lambda: time.time_ns() + 10_000_000_000)
for path in sorted(Path(sys.argv[2]).iterdir()):
    cache.digest(path, 1 << 30)
    cache.flush()  # one transaction a file: as many chances to collide as there can be
cache.close()
"""


def test_two_processes_writing_the_cache_at_once_do_not_corrupt_it(tmp_path: Path) -> None:
    cache_file = tmp_path / "c" / "hashes.sqlite"
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        for i in range(150):
            (tmp_path / side / f"{i:03d}.bin").write_bytes(f"{side}{i}".encode() * 50)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(cache_file), str(tmp_path / side)], env=env)
        for side in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with sqlite3.connect(cache_file) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM hashes").fetchone() == (300,)
    hasher = _CountingHasher()
    cache = _cache(cache_file, hasher)
    for path in (tmp_path / "b").iterdir():
        assert cache.digest(path, 1 << 30).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert hasher.read == []


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    cache_file, hasher = tmp_path / "c" / "hashes.sqlite", _CountingHasher()
    for i in range(25):
        (tmp_path / f"{i}.txt").write_text(str(i))
    cache = _cache(cache_file, hasher, max_entries=10)
    for i in range(25):
        cache.digest(tmp_path / f"{i}.txt", 1 << 30)
        cache.flush()
    cache.close()
    with sqlite3.connect(cache_file) as db:
        assert db.execute("SELECT count(*) FROM hashes").fetchone()[0] <= 10


def test_where_the_cache_lives_and_turning_it_off(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = {"HOME": str(tmp_path / "home")}
    assert (
        default_hash_cache_path(home) == tmp_path / "home" / ".cache" / "smlaunch" / "transfer-hashes.sqlite"
    )
    xdg = {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert default_hash_cache_path(xdg) == tmp_path / "xdg" / "smlaunch" / "transfer-hashes.sqlite"
    assert default_hash_cache_path({**xdg, "SMLAUNCH_HASH_CACHE": "/x/h.db"}) == Path("/x/h.db")
    assert default_hash_cache_path({**xdg, "SMLAUNCH_HASH_CACHE": ""}) is None
    _tree(tmp_path / "src", 5)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for off in ("0", ""):
        monkeypatch.setenv(contract.SMLAUNCH_HASH_CACHE, off)
        with TransferEngine(s3, progress=False) as engine:
            assert engine.hashes.path is None
            engine.upload_dir(tmp_path / "src", "s3://bucket/pre")
            assert len(engine.upload_dir(tmp_path / "src", "s3://bucket/pre").skipped) == 5
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "cache").exists()


@pytest.mark.timeout(60)  # opening a FIFO by name used to block the upload for ever
def test_a_fifo_where_a_file_was_listed_fails_the_upload_instead_of_blocking(s3: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.bin").write_bytes(b"ok")
    os.mkfifo(src / "pipe")  # listed as a file by the caller, then replaced: no writer will ever come
    files = [("ok.bin", src / "ok.bin"), ("later/pipe", src / "pipe")]
    engine = TransferEngine(s3, progress=False, hash_cache=HashCache())
    with pytest.raises(TransferError, match="pipe is not a regular file"):
        engine.upload_dir(src, "s3://bucket/pre", files=files)
    with pytest.raises(TransferError, match="pipe is not a regular file"):
        engine.upload_dir(src, (tmp_path / "dest").as_uri(), files=files)
    summary = engine.upload_dir(src, "s3://bucket/pre", files=[*files[:1], ("gone", src / "absent")])
    assert summary.transferred == ["s3://bucket/pre/ok.bin"]  # a file gone since it was listed: left out


def test_upload_dir_sends_the_files_given_under_their_names(s3: Any, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w.pt").write_bytes(b"w" * (6 * MiB))
    files = [("latest/w.pt", tmp_path / "real" / "w.pt"), ("step-3/w.pt", tmp_path / "real" / "w.pt")]
    engine = TransferEngine(s3, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, progress=False)
    engine.upload_dir(tmp_path / "real", "s3://bucket/ckpt", files=files)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="bucket", Prefix="ckpt/")["Contents"])
    assert keys == ["ckpt/latest/w.pt", "ckpt/step-3/w.pt"]
    body = s3.get_object(Bucket="bucket", Key="ckpt/latest/w.pt")["Body"].read()
    assert body == b"w" * (6 * MiB)  # multipart, read through the descriptor opened and checked
    engine.upload_dir(tmp_path / "real", (tmp_path / "copy").as_uri(), files=files)
    assert (tmp_path / "copy" / "step-3" / "w.pt").read_bytes() == body


@pytest.fixture
def umask_027() -> Iterator[None]:
    """This process's umask at 027 for one test (a shared group directory's usual setting)."""
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_downloaded_file_has_the_mode_a_new_file_gets_under_the_umask(
    s3: Any, tmp_path: Path, umask_027: None
) -> None:
    """As ``aws s3 cp`` writes it: 0o666 less the umask, not the temporary file's 0o600."""
    s3.put_object(Bucket="bucket", Key="pre/model.tar.gz", Body=b"weights")
    TransferEngine(s3, progress=False).download_prefix("s3://bucket/pre", tmp_path / "dst")
    assert (tmp_path / "dst" / "model.tar.gz").stat().st_mode & 0o777 == 0o640


def test_a_copied_file_keeps_its_sources_mode_under_the_umask(tmp_path: Path, umask_027: None) -> None:
    """As ``cp`` copies: the source's mode less the umask, so a private source stays private."""
    (tmp_path / "src").mkdir()
    for name, mode in (("shared.bin", 0o664), ("script.sh", 0o755), ("secret.key", 0o600)):
        (tmp_path / "src" / name).write_bytes(name.encode())
        (tmp_path / "src" / name).chmod(mode)
    TransferEngine(progress=False).sync(tmp_path / "src", (tmp_path / "dst").as_uri())
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "dst").iterdir()}
    assert modes == {"shared.bin": 0o640, "script.sh": 0o750, "secret.key": 0o600}
