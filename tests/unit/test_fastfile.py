"""The FastFile mount's file system operations, without FUSE: the tree from the host's share, the
attributes and listings a script sees, fetch-on-first-read into the shared cache, and failures."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from smlaunch.contract.transfer.engine import ObjectInfo
from smlaunch.sdk.backends.emulated.fastfile import ChannelTree, FastFileOperations

OBJECTS = [ObjectInfo(f"s3://b/p/{rel}", rel, len(rel)) for rel in ("a.txt", "d/e/f.bin", "d/g.bin")]


def _operations(tmp_path: Path, fail: bool = False) -> tuple[FastFileOperations, list[str], list[str]]:
    fetched: list[str] = []
    reported: list[str] = []

    def fetch(info: ObjectInfo, dest: Path) -> None:
        fetched.append(info.rel)
        if fail:
            raise ConnectionError("S3 went away")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(info.rel)

    return FastFileOperations(ChannelTree(OBJECTS), tmp_path, fetch, reported.append), fetched, reported


def test_the_whole_tree_is_there_before_any_fetch(tmp_path: Path) -> None:
    ops, fetched, _ = _operations(tmp_path)
    assert ops.readdir("/", 0) == [".", "..", "a.txt", "d"]
    assert ops.readdir("/d", 0) == [".", "..", "e", "g.bin"]
    assert ops.readdir("/d/e", 0) == [".", "..", "f.bin"]
    assert stat.S_ISDIR(ops.getattr("/d/e")["st_mode"])
    attrs = ops.getattr("/d/e/f.bin")
    assert stat.S_ISREG(attrs["st_mode"]) and attrs["st_mode"] & 0o222 == 0 and attrs["st_size"] == 9
    assert fetched == []


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda ops: ops.getattr("/missing"), errno.ENOENT),
        (lambda ops: ops.readdir("/a.txt", 0), errno.ENOTDIR),
        (lambda ops: ops.open("/a.txt", os.O_WRONLY), errno.EROFS),
        (lambda ops: ops.open("/nope", os.O_RDONLY), errno.ENOENT),
    ],
)
def test_refusals_carry_their_errno(tmp_path: Path, call: object, code: int) -> None:
    ops, _, _ = _operations(tmp_path)
    with pytest.raises(OSError) as refused:
        call(ops)  # type: ignore[operator]
    assert refused.value.errno == code


def test_an_object_is_fetched_once_on_first_read(tmp_path: Path) -> None:
    ops, fetched, _ = _operations(tmp_path)
    assert ops.read("/d/g.bin", 4, 2, 0) == b"g.bi"
    assert ops.read("/d/g.bin", 100, 0, 0) == b"d/g.bin"
    assert fetched == ["d/g.bin"]
    (tmp_path / "a.txt").write_text("a.txt")  # another host's mount fetched it already
    assert ops.read("/a.txt", 10, 0, 0) == b"a.txt"
    assert fetched == ["d/g.bin"]
    ops.destroy("/")


def test_a_failed_fetch_is_reported_once_and_answers_eio(tmp_path: Path) -> None:
    ops, fetched, reported = _operations(tmp_path, fail=True)
    for _ in range(3):
        with pytest.raises(OSError) as failed:
            ops.read("/a.txt", 10, 0, 0)
        assert failed.value.errno == errno.EIO
    assert fetched == ["a.txt"]
    assert reported == ["ERROR s3://b/p/a.txt: ConnectionError: S3 went away"]
