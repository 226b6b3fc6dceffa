"""Progress bars and their summary line: shown in a terminal and in a notebook kernel, never in a pipe."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from smlaunch.contract.progress import MiB
from smlaunch.contract.transfer.engine import TransferEngine

PACKAGE = """\
import sys
if sys.argv[1] == "notebook":
    import ipykernel  # noqa: F401 - what a Jupyter kernel process has loaded
from smlaunch.sdk.request.packaging import build_and_stage
build_and_stage("train.py", "src", None, sys.argv[2])
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    with open(tmp_path / "src" / "weights.bin", "wb") as handle:  # sparse: 65 MiB of zeros, no disk
        handle.truncate(65 * MiB)
    (tmp_path / "package.py").write_text(PACKAGE)
    return tmp_path


def package(project: Path, mode: str, stderr: int) -> subprocess.CompletedProcess[bytes]:
    dest = (project / f"out-{mode}" / "sourcedir.tar.gz").as_uri()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "package.py", mode, dest],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=stderr,
        timeout=120,
        env=env,
    )


def test_notebook_like_output_gets_bar_and_summary(project: Path) -> None:
    pytest.importorskip("ipykernel")
    done = package(project, "notebook", subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    text = done.stderr.decode()
    assert "%|" in text  # tqdm.auto drew a bar (a widget inside a real kernel)
    assert "package sourcedir.tar.gz: 2 file(s), 65.0 MiB in " in text
    assert text.rstrip().endswith("0 skipped unchanged")


def test_terminal_gets_bar_and_summary(project: Path) -> None:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size
    try:
        done = package(project, "terminal", follower)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0
    text = b"".join(chunks).decode(errors="replace")
    assert "%|" in text and "package sourcedir.tar.gz: 2 file(s), 65.0 MiB in " in text


def test_pipe_gets_nothing(project: Path) -> None:
    done = package(project, "pipe", subprocess.PIPE)
    assert done.returncode == 0
    assert done.stderr == b""


def test_summary_counts_files_bytes_and_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "data"
    source.mkdir()
    for i in range(3):
        (source / f"part-{i}").write_bytes(bytes(1000 * (i + 1)))
    engine = TransferEngine(progress=True, progress_min_bytes=0)
    engine.upload_dir(source, (tmp_path / "dest").as_uri())
    (source / "part-2").write_bytes(b"changed")
    engine.upload_dir(source, (tmp_path / "dest").as_uri())
    lines = [line for line in capsys.readouterr().err.splitlines() if "skipped unchanged" in line]
    assert [line.split(" in ")[0] for line in lines] == [
        "copy: 3 file(s), 0.0 MiB",
        "copy: 1 file(s), 0.0 MiB",
    ]
    assert lines[0].endswith(", 0 skipped unchanged") and lines[1].endswith(", 2 skipped unchanged")
