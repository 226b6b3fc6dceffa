"""smlaunch.runtime.interpreter: the ranks' interpreter first on PATH, with shims for the names its directory
lacks."""

from __future__ import annotations

import os
import subprocess
import tempfile
import venv
from pathlib import Path

import pytest

from smlaunch.runtime.interpreter import job_path, missing_names


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp dir, for the shims, inside the test's own directory."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def env_bin(tmp_path: Path) -> Path:
    """A virtual environment without pip (as the layered environment of requirements.txt)."""
    root = tmp_path / "env"
    venv.EnvBuilder(symlinks=True, with_pip=False, system_site_packages=True).create(root)
    return root / "bin"


def _fake(directory: Path, name: str, text: str = "#!/bin/sh\nexit 99\n") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    (directory / name).chmod(0o755)


def test_a_complete_directory_goes_first_without_shims(env_bin: Path, private_tmp: Path) -> None:
    python = str(env_bin / "python")
    for name in ("pip", "pip3"):
        _fake(env_bin, name, f"#!{python}\nimport sys\n")
    assert missing_names(python) == []
    path = job_path(python, f"/first:{env_bin}:/usr/bin")
    assert path.split(os.pathsep) == [str(env_bin), "/first", "/usr/bin"]
    assert list(private_tmp.iterdir()) == []


def test_missing_and_foreign_names_get_shims_that_run_this_interpreter(
    tmp_path: Path, env_bin: Path, private_tmp: Path
) -> None:
    (env_bin / "python").unlink()  # Debian's /usr/bin: python3 only
    _fake(env_bin, "pip", "#!/usr/bin/python2\n")  # another interpreter's pip
    python = str(env_bin / "python3")
    assert missing_names(python) == ["python", "pip", "pip3"]
    fakes = tmp_path / "fakes"
    for name in ("python", "python3", "pip", "pip3"):
        _fake(fakes, name)
    path = job_path(python, f"{fakes}:/usr/bin:/bin")
    shims, *rest = path.split(os.pathsep)
    assert rest == [str(env_bin), str(fakes), "/usr/bin", "/bin"]
    assert Path(shims).parent == private_tmp and sorted(os.listdir(shims)) == ["pip", "pip3", "python"]
    assert os.stat(shims).st_mode & 0o777 == 0o700
    script = (
        "python -c 'import sys; print(sys.prefix)'; python3 -c 'import sys; print(sys.prefix)'; pip --version"
    )
    done = subprocess.run(
        ["sh", "-c", script], env={"PATH": path}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    prefix, prefix3, pip = done.stdout.splitlines()
    assert prefix == prefix3 == str(env_bin.parent)
    assert pip.startswith("pip ")
    # A second host of the job finds the same directory and rewrites nothing.
    assert job_path(python, f"{fakes}:/usr/bin:/bin") == path


def test_a_shim_directory_that_is_not_private_is_never_used(env_bin: Path, private_tmp: Path) -> None:
    (env_bin / "python").unlink()
    python = str(env_bin / "python3")
    job_path(python, "/usr/bin")
    (shims,) = private_tmp.iterdir()
    shims.chmod(0o777)  # as if someone else had made it first, writable by all
    assert job_path(python, "/usr/bin").split(os.pathsep) == [str(env_bin), "/usr/bin"]


def test_an_unwritable_temp_dir_leaves_the_interpreter_directory_first(
    env_bin: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (env_bin / "python").unlink()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp / "missing" / "deeper"))
    assert job_path(str(env_bin / "python3"), "/usr/bin").split(os.pathsep) == [str(env_bin), "/usr/bin"]
