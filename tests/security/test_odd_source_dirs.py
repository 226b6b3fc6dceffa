"""A ``source_dir`` in an odd state still packs its code, promptly, naming what it leaves out.

``sourcedir.tar.gz`` follows :mod:`smlaunch.contract.artifact_tree`'s rule: regular files, and links to them
inside the directory as what they point to. A link loop (``latest -> .``, ``up -> ..``), a FIFO, a
socket, a dangling link and a link out of the directory (``-> /etc``) are left out, each named in
one warning; packing opens no FIFO and walks no loop (the pytest timeouts only guard the hangs these
cases used to cause: ``os.walk(followlinks=True)`` multiplied the loop, ``open()`` blocked on the
FIFO). The SageMaker SDK (``sagemaker.utils.create_tar_file``, ``dereference=True``) dies on the
loop and on the dangling link, packs the FIFO as a FIFO member and packs ``/etc``.
"""

from __future__ import annotations

import os
import socket
import tarfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import PyTorch, contract
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.packaging import build_and_stage, build_sourcedir
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import kill_leftover_jobs

ODD = {
    # entry: the words the warning gives for it
    "latest": "loop",
    "pkg/up": "loop",
    "progress.pipe": "FIFO",
    "ipc.sock": "a socket",
    "checkpoint-latest": "dangling",
    "etc": "outside the directory",
    "hostname": "outside the directory",
}


@pytest.fixture
def odd_source(tmp_path: Path) -> Iterator[Path]:
    """Code beside every odd entry: a loop, a FIFO, a socket, a dangling link, links out."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("import pkg.util\nprint('trained', pkg.util.X, flush=True)\n")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "util.py").write_text("X = 42\n")
    (src / "alias.py").symlink_to("train.py")  # inside: packed as the file it points to
    (src / "latest").symlink_to(".")
    (src / "pkg" / "up").symlink_to("..")
    os.mkfifo(src / "progress.pipe")
    (src / "checkpoint-latest").symlink_to("checkpoint-9")
    (src / "etc").symlink_to("/etc")
    (src / "hostname").symlink_to("/etc/hostname")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(src / "ipc.sock"))
    yield src
    server.close()


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {member.name: member for member in tar.getmembers()}


def _skip_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [line for w in caught for line in str(w.message).splitlines() if ": skipped " in line]


@pytest.mark.timeout(60)
def test_odd_entries_are_left_out_and_named(odd_source: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        archive = build_sourcedir("train.py", odd_source, None, tmp_path / "out")
    members = _members(archive.path)
    assert sorted(members) == ["alias.py", "pkg/__init__.py", "pkg/util.py", "train.py"]
    assert all(member.isfile() for member in members.values())  # no link, no FIFO member
    lines = _skip_lines(caught)
    assert len(lines) == len(ODD), lines
    for name, why in ODD.items():
        line = next(line for line in lines if f"skipped {name!r}" in line)
        assert line.startswith("WARNING: source_dir") and why in line, line
    assert any("dependencies=" in str(w.message) for w in caught)  # the fix for code out of it


@pytest.mark.timeout(60)
def test_the_hash_ignores_what_is_left_out(odd_source: Path, tmp_path: Path) -> None:
    """Unchanged code is not uploaded twice: the odd entries do not change the archive's bytes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, sent = build_and_stage("train.py", odd_source, None, (tmp_path / "a.tar.gz").as_uri())
        (odd_source / "latest").unlink()
        os.unlink(odd_source / "progress.pipe")
        again = build_sourcedir("train.py", odd_source, None, tmp_path / "b")
    assert sent and again.sha256 == first.sha256


@pytest.mark.timeout(60)
def test_ignored_entries_are_silent_and_ignored_directories_unread(odd_source: Path, tmp_path: Path) -> None:
    (odd_source / "data").mkdir()
    os.mkfifo(odd_source / "data" / "feed")
    os.chmod(odd_source / "data", 0o300)  # listing it would fail: it must not be listed at all
    (odd_source / ".smlaunchignore").write_text("data/\nlatest/\n*.pipe\netc/\n")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            archive = build_sourcedir("train.py", odd_source, None, tmp_path / "out")
    finally:
        os.chmod(odd_source / "data", 0o755)
    assert ".smlaunchignore" in archive.members and not any(m.startswith("data") for m in archive.members)
    named = " ".join(_skip_lines(caught))
    assert all(f"{name!r}" not in named for name in ("latest", "progress.pipe", "etc", "data", "data/feed"))
    assert "'pkg/up'" in named and "'hostname'" in named


@pytest.mark.timeout(60)
def test_a_dependency_directory_follows_the_same_rule(odd_source: Path, tmp_path: Path) -> None:
    lib = tmp_path / "mylib"
    lib.mkdir()
    (lib / "__init__.py").write_text("")
    (lib / "self").symlink_to(".")
    os.mkfifo(lib / "pipe")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        archive = build_sourcedir("train.py", code, [str(lib)], tmp_path / "out")
    assert list(archive.members) == ["mylib/__init__.py", "train.py"]
    lines = _skip_lines(caught)
    assert any("dependencies[0]" in line and "'mylib/self'" in line for line in lines), lines
    assert any("dependencies[0]" in line and "'mylib/pipe'" in line for line in lines), lines


@pytest.mark.timeout(60)
def test_a_named_file_that_is_not_regular_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "run.py")
    with pytest.raises(ConfigurationError) as info:
        build_sourcedir(str(tmp_path / "run.py"), None, None, tmp_path / "out")
    assert info.value.field == "entry_point" and "FIFO" in str(info.value)
    (tmp_path / "train.py").write_text("")
    with pytest.raises(ConfigurationError) as info:
        build_sourcedir(str(tmp_path / "train.py"), None, [str(tmp_path / "run.py")], tmp_path / "out")
    assert info.value.field == "dependencies[0]"
    assert not (tmp_path / "out").exists()


def test_an_entry_point_left_out_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "train.py").write_text("")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").symlink_to("../elsewhere/train.py")
    with pytest.raises(ConfigurationError) as info:
        build_sourcedir("train.py", tmp_path / "src", None, tmp_path / "out")
    assert info.value.field == "entry_point" and "outside the directory" in str(info.value)
    (tmp_path / "src" / "train.py").unlink()
    (tmp_path / "src" / "train.py").write_text("")
    (tmp_path / "src" / ".smlaunchignore").write_text("*.py\n")
    with pytest.raises(ConfigurationError, match=r"listed in \.smlaunchignore"):
        build_sourcedir("./train.py", tmp_path / "src", None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.usefixtures("_no_leftovers")
def test_fit_with_an_odd_source_dir_runs_the_code(odd_source: Path, tmp_path: Path) -> None:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(odd_source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=LocalSession(tmp_path / "jobs"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(job_name="odd-source", logs=False)
    job = estimator.latest_training_job
    assert job is not None and job.describe()["TrainingJobStatus"] == contract.STATUS_COMPLETED
    log = (tmp_path / "jobs" / "odd-source" / "logs" / "job.log").read_text()
    assert "trained 42" in log
    assert len(_skip_lines(caught)) == len(ODD)
