"""Hostile code archives handed to the launcher: ``python -m smlaunch.runtime`` with
``sagemaker_submit_directory`` pointing at the archive, and a real local ``fit()`` (process backend).

For every archive of ``hostile.CASES`` (``test_archive_extraction.py`` proves that each escapes a
plain extraction): the host fails with a ClientError naming the refused member, the archive's
``train.py`` never runs, the code directory stays empty, nothing appears outside it and no
existing file changes. The cases run side by side (one host or one job each) to keep the suite fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from smlaunch import PyTorch, contract
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._runtime_tree import write_host_tree
from tests.security import hostile

RUNTIME_TIMEOUT = 180


def test_python_m_runtime_refuses_every_hostile_archive(tmp_path: Path) -> None:
    outside = tmp_path / "victim"
    hostile.make_outside(outside)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_", "SAGEMAKER_"))}
    hosts = {}
    for case in hostile.CASES:
        archive = hostile.write_archive(
            case, tmp_path / case.name / "sourcedir.tar.gz", PurePosixPath(outside)
        )
        hps = {contract.HP_PROGRAM: '"train.py"', contract.HP_SUBMIT_DIRECTORY: json.dumps(str(archive))}
        hosts[case.name] = write_host_tree(tmp_path / case.name / "ml", "algo-1", ["algo-1"], hps)
    before = hostile.snapshot(tmp_path)
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "smlaunch.runtime"],
            env={**env, contract.BASE_DIR_ENV: str(p.base)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, p in hosts.items()
    }
    for case in hostile.CASES:
        paths = hosts[case.name]
        output, _ = procs[case.name].communicate(timeout=RUNTIME_TIMEOUT)
        assert procs[case.name].returncode == 1, (case.name, output)
        failure = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())["reason"]
        assert failure.startswith("ClientError: refusing archive member"), (case.name, failure)
        assert case.refusal(outside) in failure, (case.name, failure)
        assert "SHOULD NOT RUN" not in output, case.name
        assert os.listdir(paths.code_dir) == [], case.name
    hostile.assert_untouched(before, tmp_path, [p.code_dir for p in hosts.values()])


@pytest.mark.slow
def test_a_local_fit_refuses_every_hostile_archive(tmp_path: Path) -> None:
    outside = tmp_path / "victim"
    hostile.make_outside(outside)
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    estimators = {}
    for case in hostile.CASES:
        archive = hostile.write_archive(
            case, tmp_path / "code" / case.name / "sourcedir.tar.gz", PurePosixPath(outside)
        )
        estimators[case.name] = PyTorch(
            entry_point="train.py",
            source_dir=archive.as_uri(),
            role="arn:aws:iam::111122223333:role/r",
            instance_type="ml.c5.xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            output_path=(tmp_path / "out").as_uri(),
            sagemaker_session=session,
        )
    before = hostile.snapshot(tmp_path)
    for name, estimator in estimators.items():
        estimator.fit(job_name=f"hostile-{name}", wait=False)
    code_dirs = []
    for case in hostile.CASES:
        job = estimators[case.name].latest_training_job
        assert job is not None
        with pytest.raises(JobFailedError) as failed:
            job.wait(logs=False)
        reason = str(failed.value)
        assert "ClientError: refusing archive member" in reason, (case.name, reason)
        assert case.refusal(outside) in reason, (case.name, reason)
        job_dir = tmp_path / "jobs" / f"hostile-{case.name}"
        found = list(job_dir.glob("hosts/*/code"))
        assert found and all(os.listdir(c) == [] for c in found), case.name
        assert "SHOULD NOT RUN" not in "".join(p.read_text() for p in job_dir.rglob("*.log")), case.name
        code_dirs += found
    hostile.assert_untouched(before, tmp_path, code_dirs)
