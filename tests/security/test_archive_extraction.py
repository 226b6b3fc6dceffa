"""``smlaunch.contract.archive.safe_extract`` against hostile code archives, and what it still accepts.

Each archive of ``hostile.CASES`` is first shown to escape a plain ``tarfile`` extraction (no
filter, as Debian bookworm's Python 3.11.2 extracts), so the refusals below are of real attacks;
then ``safe_extract`` must refuse it naming the member, write nothing (the code directory stays
empty), and leave every file outside unchanged. Legitimate archives (inner links, hardlinks,
``./`` names, duplicates) still extract; the size and member bounds stop tar bombs at the header.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from smlaunch import contract
from smlaunch.contract.archive import ArchiveLimits, UnsafeArchiveError, create_tarball, safe_extract
from smlaunch.contract.errors import HostConfigurationError
from tests.security import hostile


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "victim"
    hostile.make_outside(outside)
    return tmp_path / "ml" / "code", outside


@pytest.mark.parametrize("case", [c for c in hostile.CASES if c.escapes_naively], ids=lambda c: c.name)
def test_the_archive_escapes_a_plain_tarfile_extraction(tmp_path: Path, case: hostile.Hostile) -> None:
    code, outside = _layout(tmp_path)
    archive = hostile.write_archive(case, tmp_path / "evil.tar.gz", PurePosixPath(outside))
    before = hostile.snapshot(tmp_path / "victim")
    code.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        try:
            tar.extractall(code, **kwargs)  # the point: a plain extraction escapes
        except OSError:
            pass  # some later member may fail once the damage is done
    with pytest.raises(AssertionError):
        hostile.assert_untouched(before, tmp_path / "victim", [code])


@pytest.mark.parametrize("case", hostile.CASES, ids=lambda c: c.name)
def test_hostile_archives_are_refused_naming_the_member(tmp_path: Path, case: hostile.Hostile) -> None:
    code, outside = _layout(tmp_path)
    archive = hostile.write_archive(case, tmp_path / "evil.tar.gz", PurePosixPath(outside))
    before = hostile.snapshot(tmp_path)
    with pytest.raises(UnsafeArchiveError) as error:
        safe_extract(archive, code)
    assert case.refusal(outside) in str(error.value)
    assert not code.exists()  # refused before anything was written
    hostile.assert_untouched(before, tmp_path, [])


def _tar(path: Path, members: list[tuple[str, bytes | str | None, bytes]]) -> Path:
    """(name, data for a file | link target | None for a directory, type)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, payload, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = str(payload)
                tar.addfile(info)
            elif kind == tarfile.DIRTYPE:
                info.mode = 0o755
                tar.addfile(info)
            else:
                assert isinstance(payload, bytes)
                info.size, info.mode = len(payload), 0o755
                tar.addfile(info, io.BytesIO(payload))
    return path


def test_inner_links_hardlinks_dot_names_and_duplicates_extract(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "ok.tar.gz",
        [
            (".", None, tarfile.DIRTYPE),
            ("./pkg", None, tarfile.DIRTYPE),
            ("./pkg/util.py", b"X = 1\n", tarfile.REGTYPE),
            ("./pkg/alias.py", "util.py", tarfile.SYMTYPE),
            ("./lib", "pkg", tarfile.SYMTYPE),
            ("./up", "pkg/..", tarfile.SYMTYPE),
            ("./train.py", b"print('v1')\n", tarfile.REGTYPE),
            ("./copy.py", "train.py", tarfile.LNKTYPE),
            ("./copy.py", b"print('replaced')\n", tarfile.REGTYPE),  # replaces the link, not train.py
            ("./run.sh", b"#!/bin/sh\n", tarfile.REGTYPE),
            ("./lib", b"now a file\n", tarfile.REGTYPE),  # a later member replaces the link itself
        ],
    )
    code = tmp_path / "code"
    names = safe_extract(archive, code)
    assert "pkg/util.py" in names and "train.py" in names
    assert (code / "train.py").read_text() == "print('v1')\n"
    assert (code / "copy.py").read_text() == "print('replaced')\n"
    assert (code / "pkg" / "alias.py").read_text() == "X = 1\n"
    assert os.readlink(code / "up") == "pkg/.."
    assert (code / "lib").read_text() == "now a file\n" and not (code / "lib").is_symlink()
    assert os.access(code / "run.sh", os.X_OK)


def test_a_created_tarball_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('train')\n")
    (src / "pkg" / "util.py").write_text("X = 1\n")
    create_tarball([(p, p.name) for p in sorted(src.iterdir())], tmp_path / "s.tar.gz")
    safe_extract(tmp_path / "s.tar.gz", tmp_path / "code")
    assert (tmp_path / "code" / "pkg" / "util.py").read_text() == "X = 1\n"


def test_a_non_empty_destination_is_refused(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar.gz", [("train.py", b"x\n", tarfile.REGTYPE)])
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "keep.py").write_text("mine\n")
    with pytest.raises(UnsafeArchiveError, match="not empty"):
        safe_extract(archive, tmp_path / "code")
    assert os.listdir(tmp_path / "code") == ["keep.py"]


def test_a_size_bomb_is_refused_at_its_header(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "bomb.tar.gz",
        [("train.py", b"x\n", tarfile.REGTYPE), ("zeros.bin", bytes(2 << 20), tarfile.REGTYPE)],
    )
    with pytest.raises(UnsafeArchiveError, match=r"'zeros.bin'.*more than 1048576 bytes"):
        safe_extract(archive, tmp_path / "code", ArchiveLimits(max_bytes=1 << 20))
    assert not (tmp_path / "code").exists()


def test_the_default_bound_stops_a_20_gib_member_without_reading_it(tmp_path: Path) -> None:
    """A header announcing 21 GiB: refused before its data is read (the archive is 1 KiB)."""
    info = tarfile.TarInfo("huge.bin")
    info.size = 21 << 30
    with tarfile.open(tmp_path / "bomb.tar.gz", "w:gz") as tar:
        tar.fileobj.write(info.tobuf(tarfile.GNU_FORMAT))  # type: ignore[union-attr]
    with pytest.raises(UnsafeArchiveError, match=r"'huge.bin'.*more than 21474836480 bytes"):
        safe_extract(tmp_path / "bomb.tar.gz", tmp_path / "code", ArchiveLimits())


def test_a_member_bomb_is_refused(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "many.tar.gz", [(f"f{i}", b"", tarfile.REGTYPE) for i in range(11)])
    expected = f"more than 10 members.*{contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS}"
    with pytest.raises(UnsafeArchiveError, match=expected):
        safe_extract(archive, tmp_path / "code", ArchiveLimits(max_members=10))
    assert not (tmp_path / "code").exists()


def test_limits_come_from_the_environment_and_bad_values_are_named() -> None:
    limits = ArchiveLimits.from_environ(
        {contract.SMLAUNCH_ARCHIVE_MAX_BYTES: "1000", contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS: "7"}
    )
    assert limits == ArchiveLimits(max_bytes=1000, max_members=7)
    assert ArchiveLimits.from_environ({}) == ArchiveLimits(20 << 30, 1_000_000)
    with pytest.raises(HostConfigurationError, match=f"{contract.SMLAUNCH_ARCHIVE_MAX_BYTES}='lots'"):
        ArchiveLimits.from_environ({contract.SMLAUNCH_ARCHIVE_MAX_BYTES: "lots"})


def test_the_estimator_refuses_bad_limits_at_construction(tmp_path: Path) -> None:
    from smlaunch import PyTorch
    from smlaunch.sdk.errors import ConfigurationError

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('train')\n")
    field = re.escape(f"environment['{contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS}']='-1'")
    with pytest.raises(ConfigurationError, match=field):
        PyTorch(
            entry_point="train.py",
            source_dir=str(src),
            role="arn:aws:iam::111122223333:role/r",
            instance_type="ml.c5.xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            environment={contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS: "-1"},
        )


def test_a_corrupt_archive_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(UnsafeArchiveError, match="not a readable tar archive"):
        safe_extract(tmp_path / "bad.tar.gz", tmp_path / "code")


def test_an_os_error_names_the_member_and_leaves_nothing(tmp_path: Path) -> None:
    """A symlink target longer than the OS allows passes every check but cannot be created; what
    the second pass wrote before it (``train.py``) is removed."""
    target = "/".join(["x" * 200] * 25)  # 5,024 characters, inside: longer than PATH_MAX
    archive = _tar(
        tmp_path / "long.tar.gz", [("train.py", b"x\n", tarfile.REGTYPE), ("far", target, tarfile.SYMTYPE)]
    )
    with pytest.raises(OSError, match="cannot extract archive member 'far'") as error:
        safe_extract(archive, tmp_path / "code")
    assert not isinstance(error.value, UnsafeArchiveError)
    assert os.listdir(tmp_path / "code") == []


def test_a_hardlink_to_itself_is_refused(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "self.tar.gz", [("h", b"x\n", tarfile.REGTYPE), ("h", "h", tarfile.LNKTYPE)])
    with pytest.raises(UnsafeArchiveError, match="'h': hardlink to 'h'"):
        safe_extract(archive, tmp_path / "code")
