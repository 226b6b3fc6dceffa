"""Credentials never reach a file or a log: planted AWS credentials are grepped for in everything a
local job writes (job directory, logs, host trees, artifacts, decompressed), in ``describe()`` and
``plan()``. The ranks still see them (through the process environment), a local MPI job's hosts meet
in a private scratch directory inside the job directory (0700, removed at the end), and nothing is
left in the system temp directory. Container definitions are covered with a fake Docker client in
``tests/unit/test_docker_backend.py``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, PyTorch, contract
from tests.functional._local_helpers import kill_leftover_jobs

PLANTED = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTEDKEYID0042",
    "AWS_SECRET_ACCESS_KEY": "planted/Secret+Access/Key0042",
    "AWS_SESSION_TOKEN": "planted-session-token-0042",
}

SCRIPT = textwrap.dedent("""
    import argparse, os
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.parse_args()
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    print("credentials visible:", all(os.environ.get(k) for k in keys), flush=True)
    scratch = os.environ.get("SMLAUNCH_MPI_DIR")
    if scratch and os.path.isdir(scratch):
        print("scratch mode", oct(os.stat(scratch).st_mode & 0o777), "at", scratch, flush=True)
        # While the ranks run, the hosts' rendezvous files (env-<host>.json, ranks.json) are there.
        names = sorted(os.listdir(scratch))
        held = [n for n in names for k in keys if os.environ[k] in open(os.path.join(scratch, n)).read()]
        print("scratch files", names, "holding credentials", held, flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "done.txt"), "w") as handle:
        handle.write(os.environ["SM_CURRENT_HOST"])
""")


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    yield PLANTED


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    jobs = tmp_path / "jobs"
    yield jobs
    kill_leftover_jobs(jobs)


def _contents(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data += gzip.decompress(data)  # the archives' members, as a reader of model.tar.gz sees them
    return data


def _assert_nowhere(values: dict[str, str], root: Path, *documents: Any) -> None:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files, "the job wrote nothing?"
    for path in files:
        data = _contents(path)
        for name, value in values.items():
            assert value.encode() not in data, f"{name} written to {path}"
    text = json.dumps(documents, default=str)
    for name, value in values.items():
        assert value not in text, f"{name} in describe()/plan()"


def _temp_entries() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("smlaunch-mpi-*")}


def _run(tmp_path: Path, root: Path, **kwargs: Any) -> tuple[PyTorch, dict[str, Any]]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text(SCRIPT)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"epochs": 1},
        sagemaker_session=LocalSession(root=root),
        **kwargs,
    )
    plan = estimator.plan().to_request()
    estimator.fit(wait=True, logs=False)
    description = estimator.latest_training_job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    return estimator, {"plan": plan, "describe": description}


def _log(root: Path, estimator: PyTorch) -> str:
    return (root / estimator.latest_training_job.name / "logs" / "job.log").read_text()


def test_process_job_writes_no_credentials(tmp_path: Path, root: Path, planted: dict[str, str]) -> None:
    estimator, documents = _run(tmp_path, root, instance_type="local", instance_count=1)
    assert "credentials visible: True" in _log(root, estimator)
    _assert_nowhere(planted, root, documents)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun")
def test_local_mpi_job_writes_no_credentials_and_meets_in_a_private_scratch_dir(
    tmp_path: Path, root: Path, planted: dict[str, str]
) -> None:
    before = _temp_entries()
    estimator, documents = _run(
        tmp_path,
        root,
        instance_type="ml.c5.xlarge",
        instance_count=2,
        distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
    )
    job_dir = root / estimator.latest_training_job.name
    log = _log(root, estimator)
    assert log.count("credentials visible: True") == 2  # one rank per emulated host
    scratch = [line for line in log.splitlines() if "scratch mode" in line]
    assert len(scratch) == 2 and all(f"0o700 at {job_dir}/scratch-" in line for line in scratch), scratch
    files = [line for line in log.splitlines() if "scratch files" in line]
    assert len(files) == 2 and all("ranks.json" in line for line in files), files
    assert all(line.endswith("holding credentials []") for line in files), files
    assert not list(job_dir.glob("scratch-*")), "the scratch directory outlived the job"
    assert _temp_entries() == before, "something was left in the system temp directory"
    _assert_nowhere(planted, root, documents)
