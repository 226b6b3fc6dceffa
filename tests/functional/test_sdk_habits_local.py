"""SDK v2 habits on real local jobs: a job stopped by max_run ends fit() with a warning (as the SDK
ends it), and experiment_config / keep_alive_period_in_seconds are recorded in describe()."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import LocalSession, PyTorch, contract
from tests.functional._local_helpers import kill_leftover_jobs

TRAIN = """
import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=0)
args, _ = parser.parse_known_args()
print(f"training on {os.environ['SM_CURRENT_HOST']}", flush=True)
time.sleep(args.sleep)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write("weights")
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _estimator(tmp_path: Path, **kwargs: object) -> PyTorch:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text(TRAIN)
    return PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.m5.large",
        instance_count=1,
        sagemaker_session=LocalSession(tmp_path / "jobs", stop_grace_seconds=2),
        **kwargs,
    )


def test_max_run_stops_the_job_and_fit_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    est = _estimator(tmp_path, max_run=1, hyperparameters={"sleep": 600})
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.jobs.job"):
        est.fit(job_name="stopped-by-max-run", logs=False)
    assert est.latest_training_job is not None
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert "'Stopped' rather than 'Completed'" in caplog.text and "MaxRuntimeExceeded" in caplog.text


def test_experiment_config_and_keep_alive_are_recorded(tmp_path: Path) -> None:
    est = _estimator(tmp_path, keep_alive_period_in_seconds=1800)
    config = {"ExperimentName": "digits", "TrialName": "baseline"}
    est.fit(job_name="with-experiment", logs=False, experiment_config=config)
    assert est.latest_training_job is not None
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED
    assert description["ExperimentConfig"] == config
    assert description["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800


@pytest.mark.slow
def test_max_retry_attempts_is_recorded_and_a_failing_script_is_not_retried(tmp_path: Path) -> None:
    """As SageMaker: a retry is for the platform's internal errors, never for the script's own."""
    est = _estimator(tmp_path, max_retry_attempts=2, hyperparameters={"sleep": "not-a-number"})
    with pytest.raises(Exception, match="Failed"):
        est.fit(job_name="retry-recorded", logs=False)
    assert est.latest_training_job is not None
    description = est.latest_training_job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert description["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    log = "\n".join(est.sagemaker_session.backend().log_lines("retry-recorded"))
    assert log.count("invalid float value") == 1, log
