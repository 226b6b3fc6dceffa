"""Fetching and safely extracting the user's code, resolving its entry point."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import boto3
import pytest

from smlaunch import contract
from smlaunch.contract.archive import UnsafeArchiveError, create_tarball
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.runtime.code import CodeFetcher, entry_point_command, resolve_entry_point


def source_dir(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('train')\n")
    (src / "pkg" / "util.py").write_text("X = 1\n")
    return src


def tarball_of(src: Path, dest: Path) -> Path:
    create_tarball([(p, p.name) for p in sorted(src.iterdir())], dest)
    return dest


def evil_tarball(path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("train.py")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"#\n"))
        if member.isfile():
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        else:
            tar.addfile(member)
    return path


@pytest.mark.parametrize("form", ["dir", "dir-uri", "tarball", "tarball-uri"])
def test_fetch_local_directory_or_tarball(tmp_path: Path, form: str) -> None:
    src = source_dir(tmp_path)
    tarball = tarball_of(src, tmp_path / "sourcedir.tar.gz")
    location = {
        "dir": str(src),
        "dir-uri": f"file://{src}",
        "tarball": str(tarball),
        "tarball-uri": f"file://{tarball}",
    }
    code = tmp_path / "code"
    assert CodeFetcher().fetch(location[form], code) is True
    assert (code / "train.py").read_text() == "print('train')\n"
    assert (code / "pkg" / "util.py").read_text() == "X = 1\n"


def test_fetch_from_s3_through_the_injected_client(tmp_path: Path) -> None:
    moto = pytest.importorskip("moto")
    src = source_dir(tmp_path)
    tarball = tarball_of(src, tmp_path / "sourcedir.tar.gz")
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bucket")
        client.upload_file(str(tarball), "bucket", "job/source/sourcedir.tar.gz")
        code = tmp_path / "code"
        fetcher = CodeFetcher(s3_client_factory=lambda: client)
        assert fetcher.fetch("s3://bucket/job/source/sourcedir.tar.gz", code)
    assert (code / "pkg" / "util.py").exists()


def test_no_client_is_created_for_local_code(tmp_path: Path) -> None:
    def explode() -> None:
        raise AssertionError("S3 client created for local code")

    CodeFetcher(s3_client_factory=explode).fetch(str(source_dir(tmp_path)), tmp_path / "code")


def test_a_non_empty_code_dir_is_kept(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("baked into the image\n")
    assert CodeFetcher().fetch(str(source_dir(tmp_path)), code) is False
    assert (code / "train.py").read_text() == "baked into the image\n"
    assert not (code / "pkg").exists()


def test_missing_or_unsupported_sources_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(HostConfigurationError, match="does not exist"):
        CodeFetcher().fetch(str(tmp_path / "nope.tar.gz"), tmp_path / "code")
    with pytest.raises(HostConfigurationError, match="unsupported scheme"):
        CodeFetcher().fetch("https://example.com/code.tar.gz", tmp_path / "code")
    with pytest.raises(HostConfigurationError, match="full S3 object URI"):
        CodeFetcher(s3_client_factory=object).fetch("s3://bucket", tmp_path / "code")


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "member",
    [
        tarfile.TarInfo("../escaped.py"),
        tarfile.TarInfo("pkg/../../escaped.py"),
        tarfile.TarInfo("/tmp/absolute.py"),
        _symlink("link", "../../outside"),
        _symlink("abs-link", "/etc/passwd"),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "relative-link-out", "absolute-link"],
)
def test_unsafe_tarballs_are_refused_before_anything_is_written(
    tmp_path: Path, member: tarfile.TarInfo
) -> None:
    tarball = evil_tarball(tmp_path / "evil.tar.gz", member)
    code = tmp_path / "deep" / "code"
    with pytest.raises(UnsafeArchiveError):
        CodeFetcher().fetch(str(tarball), code)
    assert not (code / "train.py").exists()
    assert not (tmp_path / "deep" / "escaped.py").exists() and not (tmp_path / "escaped.py").exists()


def test_entry_point_commands(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "sub").mkdir(parents=True)
    (code / "train.py").write_text("")
    (code / "sub" / "main.py").write_text("")
    (code / "run.sh").write_text("#!/bin/bash\necho hi\n")
    (code / "plain.sh").write_text("echo hi\n")
    assert entry_point_command(code, "train.py", "py") == ["py", "train.py"]
    assert entry_point_command(code, "sub/main.py", "py") == ["py", "sub/main.py"]
    assert entry_point_command(code, "run.sh", "py") == [str((code / "run.sh").resolve())]
    assert os.access(code / "run.sh", os.X_OK)  # made executable, as the toolkit does
    assert entry_point_command(code, "plain.sh", "py") == ["/bin/sh", "plain.sh"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("../train.py", "'..' path segments"),
        ("./train.py", "'..' path segments"),  # as the toolkit: "'.' or '..'"
        ("/etc/passwd", "leading '/'"),
        ("-c.py", "leading '-'"),
        ("my train.py", "' '"),
        ("link.py", "resolves outside"),
        ("missing.py", "not found"),
        ("", "no entry point"),
        (None, "no entry point"),
    ],
)
def test_entry_points_that_escape_or_are_missing_are_refused(
    tmp_path: Path, entry: str | None, problem: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "outside.py").write_text("")
    (code / "link.py").symlink_to(tmp_path / "outside.py")
    with pytest.raises(HostConfigurationError, match=problem) as error:
        resolve_entry_point(code, entry)
    assert error.value.field == contract.HP_PROGRAM
