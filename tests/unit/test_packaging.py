"""sourcedir.tar.gz: layout, ignore rules, deterministic bytes, staging to file:// and moto S3."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.packaging import build_and_stage, build_sourcedir, stage


def members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "utils").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "requirements.txt").write_text("numpy\n")
    (root / "utils" / "helpers.py").write_text("X = 1\n")
    return root


def test_contents_at_root_plus_dependencies(src: Path, tmp_path: Path) -> None:
    lib = tmp_path / "mylib"
    lib.mkdir()
    (lib / "__init__.py").write_text("")
    single = tmp_path / "extra.py"
    single.write_text("")
    archive = build_sourcedir("train.py", src, [str(lib), str(single)], tmp_path / "out")
    assert archive.path.name == "sourcedir.tar.gz"
    assert members(archive.path) == [
        "extra.py",
        "mylib/__init__.py",
        "requirements.txt",
        "train.py",
        "utils/helpers.py",
    ]
    assert list(archive.members) == members(archive.path)


def test_entry_point_only(tmp_path: Path) -> None:
    script = tmp_path / "dir" / "run.py"
    script.parent.mkdir()
    script.write_text("")
    assert members(build_sourcedir(str(script), None, None, tmp_path / "out").path) == ["run.py"]


def test_smlaunchignore(src: Path, tmp_path: Path) -> None:
    (src / ".git").mkdir()
    (src / ".git" / "config").write_text("secret")
    (src / "data").mkdir()
    (src / "data" / "big.bin").write_bytes(b"0" * 10)
    (src / "notes.log").write_text("")
    (src / "keep.log").write_text("")
    (src / ".smlaunchignore").write_text(".git/\ndata/\n*.log\n!keep.log\n")
    names = members(build_sourcedir("train.py", src, None, tmp_path / "out").path)
    assert names == [".smlaunchignore", "keep.log", "requirements.txt", "train.py", "utils/helpers.py"]


def test_bytes_are_deterministic(src: Path, tmp_path: Path) -> None:
    first = build_sourcedir("train.py", src, None, tmp_path / "a")
    os.utime(src / "train.py", (1, 1))
    os.chmod(src / "utils" / "helpers.py", 0o600)
    second = build_sourcedir("train.py", src, None, tmp_path / "b")
    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()
    (src / "train.py").write_text("print('changed')\n")
    assert build_sourcedir("train.py", src, None, tmp_path / "c").sha256 != first.sha256


def test_unreadable_source_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        build_sourcedir("train.py", tmp_path / "missing", None, tmp_path / "out")
    assert info.value.field == "source_dir" and "no such directory" in str(info.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="not a directory"):
        build_sourcedir("train.py", tmp_path / "file", None, tmp_path / "out")


def test_dangling_symlink_is_left_out_and_named(src: Path, tmp_path: Path) -> None:
    (src / "broken.py").symlink_to(tmp_path / "nowhere.py")
    with pytest.warns(UserWarning, match=r"source_dir: skipped 'broken\.py': a dangling link"):
        archive = build_sourcedir("train.py", src, None, tmp_path / "out")
    assert "broken.py" not in archive.members and "train.py" in archive.members


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied(src: Path, tmp_path: Path) -> None:  # pragma: no cover - non-root CI only
    os.chmod(src, 0)
    try:
        with pytest.raises(ConfigurationError, match="cannot be read"):
            build_sourcedir("train.py", src, None, tmp_path / "out")
    finally:
        os.chmod(src, 0o755)


def test_clashing_dependency_names(src: Path, tmp_path: Path) -> None:
    other = tmp_path / "train.py"
    other.write_text("")
    with pytest.raises(ConfigurationError, match=r"would overwrite 'train\.py'"):
        build_sourcedir("train.py", src, [str(other)], tmp_path / "out")


def test_stage_to_file_uri(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "jobs" / "job-1" / "source" / "sourcedir.tar.gz"
    archive, uploaded = build_and_stage("train.py", src, None, dest.as_uri())
    assert uploaded and dest.read_bytes() and members(dest) == list(archive.members)
    assert not archive.path.exists(), "the temporary build is removed"
    _, again = build_and_stage("train.py", src, None, dest.as_uri())
    assert again is False


def test_stage_to_s3_skips_identical_content(src: Path, tmp_path: Path) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    with moto.mock_aws():
        s3 = boto3.client(
            "s3", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        s3.create_bucket(Bucket="code-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        uri = "s3://code-bucket/prefix/job-1/source/sourcedir.tar.gz"
        archive = build_sourcedir("train.py", src, None, tmp_path / "a")
        assert stage(archive, uri, s3, {"ServerSideEncryption": "aws:kms"}) is True
        head = s3.head_object(Bucket="code-bucket", Key="prefix/job-1/source/sourcedir.tar.gz")
        assert head["Metadata"]["smlaunch-sha256"] == archive.sha256
        assert head["ServerSideEncryption"] == "aws:kms"
        rebuilt = build_sourcedir("train.py", src, None, tmp_path / "b")
        assert stage(rebuilt, uri, s3, {"ServerSideEncryption": "aws:kms"}) is False
        (src / "train.py").write_text("print('v2')\n")
        changed = build_sourcedir("train.py", src, None, tmp_path / "c")
        assert stage(changed, uri, s3) is True
        body = s3.get_object(Bucket="code-bucket", Key="prefix/job-1/source/sourcedir.tar.gz")["Body"].read()
        assert body == changed.path.read_bytes()


def test_the_streamed_archive_keeps_the_format_of_earlier_versions(tmp_path: Path) -> None:
    """The tar bytes and the gzip header are those of the in-memory builder this replaced, so code
    staged by an earlier version is recognised as unchanged (same content, same hash)."""
    import gzip
    import hashlib
    import warnings

    root = tmp_path / "src"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "train.py").write_text("import pkg\nprint('train')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o700)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 8192)
    (root / "link.py").symlink_to("train.py")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # small code: no size warning
        archive = build_sourcedir("train.py", root, None, tmp_path / "out")
    data = archive.path.read_bytes()
    assert data[:10] == bytes.fromhex("1f8b08000000000002ff")  # no mtime, no file name
    assert hashlib.sha256(gzip.decompress(data)).hexdigest() == (
        "5aef370a83701251dee44bc6ccefa5504534905ae2a3cf174cb1d5d5d673c8f5"
    )
