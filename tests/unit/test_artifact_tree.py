"""The walk of a directory the user's code wrote: regular files delivered, links resolved once inside,
nothing outside, no loop, and nothing but regular files ever opened."""

from __future__ import annotations

import os
import socket
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch.contract import artifact_tree
from smlaunch.contract.archive import pack_files
from smlaunch.contract.artifact_tree import NotARegularFile, Skipped, open_regular, skip_report, walk


def _names(root: Path) -> list[str]:
    return [item.name for item in walk(root).files]


def _why(root: Path) -> dict[str, str]:
    return {entry.name: entry.why for entry in walk(root).skipped}


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    yield server
    server.close()


def test_regular_files_and_directories_are_delivered_sorted(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "b.pt").write_bytes(b"b")
    (tmp_path / "sub" / "deep" / "a.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    listing = walk(tmp_path)
    assert [f.name for f in listing.files] == ["b.pt", "sub/deep/a.json"]
    assert listing.skipped == []
    assert listing.files[1].path == tmp_path / "sub" / "deep" / "a.json"


def test_links_to_the_directory_itself_or_a_parent_are_skipped_as_loops(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"w")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("x")
    (tmp_path / "a").symlink_to(".")
    (tmp_path / "b").symlink_to(".")
    (tmp_path / "sub" / "up").symlink_to("..")
    (tmp_path / "latest").symlink_to(tmp_path)  # an absolute link to its own directory
    assert _names(tmp_path) == ["model.pt", "sub/x.txt"]
    why = _why(tmp_path)
    assert set(why) == {"a", "b", "latest", "sub/up"}
    assert all("loop" in reason for reason in why.values())


def test_a_cycle_through_several_links_ends(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "to-two").symlink_to("../two")
    (tmp_path / "two" / "to-one").symlink_to("../one")
    (tmp_path / "two" / "w.bin").write_bytes(b"w")
    # two/w.bin is delivered directly and once through the link one/to-two; the cycle is cut where
    # it would enter a directory already on its way.
    assert _names(tmp_path) == ["one/to-two/w.bin", "two/w.bin"]
    assert set(_why(tmp_path)) == {"one/to-two/to-one", "two/to-one/to-two"}


def test_a_link_that_stays_inside_is_delivered_once_as_what_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "weights.pt").write_bytes(b"3")
    (tmp_path / "latest").symlink_to("checkpoint-3")
    (tmp_path / "best.pt").symlink_to(tmp_path / "checkpoint-3" / "weights.pt")
    listing = walk(tmp_path)
    assert [f.name for f in listing.files] == ["best.pt", "checkpoint-3/weights.pt", "latest/weights.pt"]
    assert {f.source for f in listing.files} == {"checkpoint-3/weights.pt"}
    assert listing.skipped == []


def test_links_out_dangling_links_and_link_loops_are_skipped(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (model / "etc").symlink_to("/etc")
    (model / "escape.txt").symlink_to("../secret.txt")
    (model / "checkpoint-latest").symlink_to("checkpoint-9")  # cleaned up since
    (model / "ping").symlink_to("pong")
    (model / "pong").symlink_to("ping")
    (model / "kept.pt").write_bytes(b"k")
    assert _names(model) == ["kept.pt"]
    why = _why(model)
    assert why["etc"] == "a link to '/etc', outside the directory"
    assert why["escape.txt"] == "a link to '../secret.txt', outside the directory"
    assert "dangling" in why["checkpoint-latest"] and "checkpoint-9" in why["checkpoint-latest"]
    assert "loops" in why["ping"] and "loops" in why["pong"]


def test_fifos_and_sockets_are_skipped_without_being_opened(
    tmp_path: Path, unix_socket: socket.socket
) -> None:
    os.mkfifo(tmp_path / "pipe")
    unix_socket.bind(str(tmp_path / "sock"))
    (tmp_path / "to-pipe").symlink_to("pipe")
    (tmp_path / "m.pt").write_bytes(b"m")
    assert _names(tmp_path) == ["m.pt"]
    why = _why(tmp_path)
    assert why == {"pipe": "a FIFO (named pipe)", "sock": "a socket", "to-pipe": "a FIFO (named pipe)"}


def test_devices_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "null").symlink_to("/dev/null")  # outside: skipped before its kind matters
    if os.geteuid() == 0:  # only root can make a device node
        os.mknod(tmp_path / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        (tmp_path / "to-zero").symlink_to("zero")
    why = _why(tmp_path)
    assert why.pop("null") == "a link to '/dev/null', outside the directory"
    assert why == (
        {"zero": "a character device", "to-zero": "a character device"} if os.geteuid() == 0 else {}
    )


def test_a_missing_directory_or_a_file_has_nothing_to_deliver(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert walk(tmp_path / "absent") == walk(tmp_path / "f") == artifact_tree.Listing([], [])


def test_a_link_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    # Each level links twice to the next: 2**20 paths without a single loop.
    for level in range(20):
        (tmp_path / f"d{level}").mkdir()
    (tmp_path / "d20").mkdir()
    (tmp_path / "d20" / "f").write_text("f")
    for level in range(20):
        for side in "ab":
            (tmp_path / f"d{level}" / side).symlink_to(f"../d{level + 1}")
    listing = walk(tmp_path, limit=1000)
    assert len(listing.skipped) == 1 and "past the limit of 1000 entries" in listing.skipped[0].why
    assert listing.files and all(f.name.endswith("/f") and f.source == "d20/f" for f in listing.files)


def test_open_regular_refuses_what_replaced_a_file_after_the_walk(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.pt").write_bytes(b"w")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w.pt").write_bytes(b"other")
    [item] = [f for f in walk(tmp_path).files if f.name == "sub/w.pt"]
    with item.open() as handle:
        assert handle.read() == b"w"
    (tmp_path / "sub" / "w.pt").unlink()
    os.mkfifo(tmp_path / "sub" / "w.pt")  # would block a plain open for ever
    with pytest.raises(NotARegularFile, match="FIFO"):
        item.open()
    (tmp_path / "sub" / "w.pt").unlink()
    (tmp_path / "sub" / "w.pt").symlink_to("/etc/hostname")
    with pytest.raises(NotARegularFile):
        item.open()
    (tmp_path / "sub" / "w.pt").unlink()
    (tmp_path / "sub").rmdir()
    (tmp_path / "sub").symlink_to("elsewhere")  # a parent swapped for a link: never followed
    with pytest.raises(NotARegularFile):
        open_regular(item.root, item.source)


def test_pack_files_skips_what_changed_since_the_walk(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "keep.pt").write_bytes(b"keep")
    (model / "gone.pt").write_bytes(b"gone")
    listing = walk(model)
    (model / "gone.pt").unlink()
    os.mkfifo(model / "gone.pt")
    late: list[Skipped] = []
    pack_files(listing.files, tmp_path / "m.tar.gz", late.append)
    with tarfile.open(tmp_path / "m.tar.gz") as tar:
        assert tar.getnames() == ["keep.pt"]
    assert [entry.name for entry in late] == ["gone.pt"]


def test_skip_report_names_each_entry_on_one_line_and_is_bounded() -> None:
    skipped = [Skipped(f"bad\n{i}", "a socket") for i in range(25)]
    lines = skip_report(skipped, "model directory of algo-1", limit=20)
    assert len(lines) == 22
    assert lines[0] == "WARNING: model directory of algo-1: skipped 'bad\\n0': a socket"
    assert lines[20] == "WARNING: model directory of algo-1: ... and 5 more entries skipped"
    assert all("\n" not in line for line in lines)
    assert skip_report([], "model directory") == []


def test_absolute_links_to_where_the_job_saw_the_directory_are_read_below_it(tmp_path: Path) -> None:
    # A process host's code sees its tree at /opt/ml (mount namespace); the walk sees it here.
    model = tmp_path / "hosts" / "algo-1" / "model"
    (model / "checkpoint-3").mkdir(parents=True)
    (model / "checkpoint-3" / "w.pt").write_bytes(b"3")
    (model / "latest").symlink_to("/opt/ml/model/checkpoint-3")
    (model / "self").symlink_to("/opt/ml/model")
    (model / "config").symlink_to("/opt/ml/input/config")  # the same tree, but outside the model
    listing = walk(model, seen_at="/opt/ml/model")
    assert [f.name for f in listing.files] == ["checkpoint-3/w.pt", "latest/w.pt"]
    why = {entry.name: entry.why for entry in listing.skipped}
    assert "loop" in why["self"] and "dangling" in why["config"]
    assert "dangling" in _why(model)["latest"]  # without seen_at, the path means this machine's
