"""A source_dir's requirements.txt in local process jobs: installed once per job into a cached
environment layered over the user's interpreter, never into the interpreter itself; reused by the next
job with the same file; skipped with ``LocalSession(install_requirements=False)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from estimator import PyTorch
from estimator.session import LocalSession
from runtime import contract
from tests._wheels import make_wheel
from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs

SCRIPT = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
try:
    import smlaunch_probe
    probe = smlaunch_probe.VALUE
except ImportError:
    probe = None
host = os.environ["SM_CURRENT_HOST"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}.json"), "w") as out:
    json.dump({"probe": probe, "python": sys.executable}, out)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _freeze() -> str:
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    ).stdout


def _fit(tmp_path: Path, session: LocalSession, job_name: str, instance_count: int) -> tuple[dict, str]:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path / "src"),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=instance_count,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"epochs": 1},
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )
    estimator.fit(logs=False, job_name=job_name)
    description = session.backend().describe(job_name)
    log = "\n".join(session.backend().log_lines(job_name))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        reports = {
            m.name: json.loads(tar.extractfile(m).read())  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    assert_no_job_processes(job_name, tmp_path / "jobs" / job_name)
    return reports, log


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    wheel = make_wheel(tmp_path / "wheels", "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'v1'\n"})
    (src / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{wheel}\n")
    return wheel


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_requirements_install_once_per_job_never_into_the_interpreter_and_are_reused(tmp_path: Path) -> None:
    wheel = _source(tmp_path)
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    before = _freeze()

    reports, log = _fit(tmp_path, session, "reqs-first", instance_count=2)
    assert {r["probe"] for r in reports.values()} == {"v1"}
    assert len(reports) == 2
    pythons = {r["python"] for r in reports.values()}
    assert len(pythons) == 1 and pythons != {sys.executable}  # both hosts: one layered environment
    assert log.count("building the environment") == 1, log  # pip ran once for the job, not per host
    assert log.count("reusing the environment") == 1, log  # the other host waited, then reused it
    assert "pip: Successfully installed smlaunch_probe-1.0" in log.replace("smlaunch-probe", "smlaunch_probe")
    assert _freeze() == before

    wheel.unlink()  # pip would fail now: the second job must install nothing
    reports, log = _fit(tmp_path, session, "reqs-second", instance_count=2)
    assert {r["probe"] for r in reports.values()} == {"v1"}
    assert {r["python"] for r in reports.values()} == pythons
    assert "pip:" not in log and "building the environment" not in log, log
    assert log.count("reusing the environment") == 2, log
    assert _freeze() == before


@pytest.mark.timeout(120)
def test_install_requirements_false_skips_them(tmp_path: Path) -> None:
    wheel = _source(tmp_path)
    wheel.unlink()  # pip would fail: it must not run
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5, install_requirements=False)
    reports, log = _fit(tmp_path, session, "reqs-off", instance_count=1)
    assert reports["algo-1.json"] == {"probe": None, "python": sys.executable}
    assert "requirements.txt not installed" in log and "pip:" not in log, log
