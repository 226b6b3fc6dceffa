"""Helpers for the distributed-runtime functional tests: a real ``PyTorch(...).fit()`` on a
``LocalSession`` under the test's tmp dir, waited to a terminal state, with the process tree checked.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smlaunch import LocalSession, PyTorch
from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs, wait_terminal

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"


@dataclass
class JobRun:
    name: str
    description: dict[str, Any]
    log: str
    job_dir: Path

    @property
    def status(self) -> str:
        return str(self.description["TrainingJobStatus"])

    @property
    def reason(self) -> str:
        return str(self.description.get("FailureReason", ""))

    def tar_members(self, which: str = "model.tar.gz") -> dict[str, bytes]:
        path = self.job_dir / "output" / which
        with tarfile.open(path) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def run_job(
    tmp_path: Path,
    script: str,
    *,
    base_name: str,
    distribution: dict[str, Any] | None = None,
    instance_count: int = 2,
    instance_type: str = "ml.c5.xlarge",
    processes_per_host: int | None = None,
    environment: dict[str, str] | None = None,
    hyperparameters: dict[str, Any] | None = None,
    max_run: int = 90,
    timeout: float = 120,
    inputs: dict[str, str] | None = None,
    emulate_cuda: bool | None = None,
    files: dict[str, str] | None = None,
) -> JobRun:
    """Submit ``script`` as ``train.py`` the way a notebook does (with ``files``, name -> text,
    beside it in ``source_dir``), wait for the end, check that no process of the job is left, and
    return what describe and the log say."""
    src = tmp_path / f"src-{base_name}"
    src.mkdir()
    (src / "train.py").write_text(textwrap.dedent(script))
    for name, text in (files or {}).items():
        (src / name).write_text(textwrap.dedent(text))
    root = tmp_path / "jobs"
    session = LocalSession(root, processes_per_host=processes_per_host, emulate_cuda=emulate_cuda)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role=ROLE,
        instance_type=instance_type,
        instance_count=instance_count,
        framework_version="2.1.0",
        py_version="py310",
        distribution=distribution,
        hyperparameters=hyperparameters,
        environment=environment,
        base_job_name=base_name,
        max_run=max_run,
        sagemaker_session=session,
    )
    try:
        estimator.fit(inputs, wait=False)
        job = estimator.latest_training_job
        assert job is not None
        description = wait_terminal(session.backend(), job.name, timeout)
        log = "\n".join(session.backend().log_lines(job.name))
        assert_no_job_processes(job.name, root / job.name)
    finally:
        kill_leftover_jobs(root)
    return JobRun(job.name, description, log, root / job.name)


def read_tar_json(members: dict[str, bytes], name: str) -> Any:
    import json

    return json.load(io.BytesIO(members[name]))
