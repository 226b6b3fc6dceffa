"""What users see of a tuning job, piece by piece: which tuning job a store's training job is a trial
of, ``smlaunch list --tuning``'s row, and MLflow runs of a SageMaker tuning job (trials read
through the session's backend). A real local tuning job drives all of it end to end in
``tests/functional/test_tuning_surface.py``."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from smlaunch.sdk.cli.tuning import tuning_row
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.tuning import trials
from smlaunch.sdk.tuning.tracking import log_tuning_job, track_tuning_job

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


def _store(root: Path, tuning: str, trial_names: list[str]) -> None:
    job = root / trials.TUNING_DIR / tuning
    job.mkdir(parents=True)
    summaries = [{"TrainingJobName": name} for name in trial_names]
    (job / "state.json").write_text(json.dumps({trials.SUMMARIES: summaries}))


def test_a_trial_is_the_tuning_job_s_only_when_that_tuning_job_lists_it(tmp_path: Path) -> None:
    _store(tmp_path, "lr-search", ["lr-search-001-0123abcd", "lr-search-002-89abcdef"])
    _store(tmp_path, "other", ["other-001-00000000"])
    assert trials.tuning_job_of(tmp_path, "lr-search-002-89abcdef") == "lr-search"
    assert trials.tuning_job_of(tmp_path, "lr-search-003-0123abcd") is None  # looks like one, is not
    assert trials.tuning_job_of(tmp_path, "lr-search") is None
    assert trials.tuning_job_of(tmp_path, "nowhere-001-0123abcd") is None  # no such tuning job
    (tmp_path / trials.TUNING_DIR / "other" / "state.json").write_text("{truncat")
    assert trials.tuning_job_of(tmp_path, "other-001-00000000") is None  # a damaged record: none
    assert trials.trials_of_store(tmp_path) == {
        "lr-search-001-0123abcd": "lr-search",
        "lr-search-002-89abcdef": "lr-search",
    }
    assert trials.trials_of_store(tmp_path / "empty") == {}


def _description(status: str = "Completed", **more: Any) -> dict[str, Any]:
    return {
        "HyperParameterTuningJobName": "lr-search",
        "HyperParameterTuningJobStatus": status,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Bayesian",
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 8, "MaxParallelTrainingJobs": 2},
            "ParameterRanges": {
                "ContinuousParameterRanges": [
                    {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}
                ]
            },
        },
        "TrainingJobStatusCounters": {
            "Completed": 2,
            "InProgress": 1,
            "RetryableError": 0,
            "NonRetryableError": 1,
            "Stopped": 0,
        },
        "CreationTime": T0,
        **more,
    }


def test_list_tuning_row() -> None:
    best = {
        "TrainingJobName": "lr-search-002-89abcdef",
        "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "loss", "Value": 0.125},
    }
    row = tuning_row(
        _description(
            "Completed", BestTrainingJob=best, HyperParameterTuningEndTime=T0 + timedelta(seconds=75)
        )
    )
    assert {k: row[k] for k in ("name", "status", "strategy", "trials", "best", "duration")} == {
        "name": "lr-search",
        "status": "Completed",
        "strategy": "Bayesian",
        "trials": "4/8",
        "best": "loss=0.125",
        "duration": "0:01:15",
    }
    assert tuning_row(_description("InProgress"))["best"] == "-"


TRIALS = {
    "lr-search-001-0123abcd": ("Completed", 0.5, "0.01"),
    "lr-search-002-89abcdef": ("Completed", 0.125, "0.003"),
    "lr-search-003-00000000": ("InProgress", None, "0.05"),  # not ended: not logged yet
}


class FakeBackend:
    """A SageMaker backend's describe and metric records for ``TRIALS``."""

    capabilities = SimpleNamespace(name="sagemaker")

    def describe(self, name: str) -> dict[str, Any]:
        status, _, lr = TRIALS[name]
        return {
            "TrainingJobName": name,
            "TrainingJobStatus": status,
            "HyperParameters": {"lr": lr, "epochs": "3", "sagemaker_program": '"train.py"'},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1},
            "TrainingStartTime": T0,
            "TrainingEndTime": T0 + timedelta(seconds=30),
        }

    def metric_records(self, name: str) -> list[MetricRecord]:
        value = TRIALS[name][1]
        return [] if value is None else [MetricRecord("loss", value, T0 + timedelta(seconds=29), None)]


class FakeSageMakerSession:
    """A SageMaker session (no ``mlflow`` of its own) listing ``TRIALS`` and reading them through
    :class:`FakeBackend`."""

    is_local = False

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken

    def backend(self) -> FakeBackend:
        if self.broken:
            raise RuntimeError("the backend is down")
        return FakeBackend()

    def sagemaker_client(self) -> Any:
        return self

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **_: Any) -> dict[str, Any]:
        summaries = []
        for name, (status, value, lr) in TRIALS.items():
            summary: dict[str, Any] = {"TrainingJobName": name, "TrainingJobStatus": status}
            summary["TunedHyperParameters"] = {"lr": lr}
            if value is not None:
                summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                    "MetricName": "loss",
                    "Value": value,
                }
            summaries.append(summary)
        return {"TrainingJobSummaries": summaries}


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return (tmp_path / "mlruns").as_uri()


@pytest.mark.slow  # MLflow's import and file store take seconds
def test_a_sagemaker_tuning_job_s_ended_trials_become_child_runs(mlflow_store: str) -> None:
    from mlflow import MlflowClient

    best = {
        "TrainingJobName": "lr-search-002-89abcdef",
        "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "loss", "Value": 0.125},
    }
    description = _description(
        "Stopped", BestTrainingJob=best, HyperParameterTuningEndTime=T0 + timedelta(minutes=5)
    )
    parent_id = log_tuning_job(mlflow_store, FakeSageMakerSession(), description)
    client = MlflowClient(tracking_uri=mlflow_store)
    experiment = client.get_experiment_by_name("smlaunch").experiment_id
    runs = {run.info.run_id: run for run in client.search_runs([experiment])}
    parent = runs.pop(parent_id)
    assert parent.info.status == "KILLED" and parent.info.run_name == "lr-search"
    assert parent.data.params == {
        "strategy": "Bayesian",
        "objective_metric": "loss",
        "objective_type": "Minimize",
        "max_jobs": "8",
        "max_parallel_jobs": "2",
        "range.lr": '{"MaxValue": "0.1", "MinValue": "0.0001", "ScalingType": "Logarithmic"}',
    }
    assert parent.data.metrics == {"BestObjectiveValue": 0.125}
    assert parent.data.tags["smlaunch.best_training_job"] == "lr-search-002-89abcdef"
    children = {run.data.tags["smlaunch.job_name"]: run for run in runs.values()}
    assert set(children) == {"lr-search-001-0123abcd", "lr-search-002-89abcdef"}
    for name, child in children.items():
        assert child.data.tags["mlflow.parentRunId"] == parent_id
        assert child.data.tags["smlaunch.tuning_job_name"] == "lr-search"
        assert child.data.params == {"lr": TRIALS[name][2], "epochs": "3"}
        assert child.data.metrics == {"loss": TRIALS[name][1], "FinalObjectiveValue": TRIALS[name][1]}
    assert log_tuning_job(mlflow_store, FakeSageMakerSession(), description) == parent_id
    assert len(client.search_runs([experiment])) == 3  # logged once


@pytest.mark.slow  # MLflow's import
def test_tracking_off_logs_nothing_and_a_failure_is_a_warning(mlflow_store: str) -> None:
    session = FakeSageMakerSession(broken=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        track_tuning_job(session, _description())  # tracking off: nothing is tried
    session.mlflow = mlflow_store  # type: ignore[attr-defined]
    with pytest.warns(UserWarning, match="logging tuning job lr-search to MLflow at .* failed: RuntimeError"):
        track_tuning_job(session, _description())
