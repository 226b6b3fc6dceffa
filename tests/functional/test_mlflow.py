"""A real local job becomes an MLflow run in a real MLflow file store, read back with mlflow.search_runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch import LocalSession, PyTorch
from tests.functional._local_helpers import kill_leftover_jobs

mlflow = pytest.importorskip("mlflow")

SCRIPT = """\
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
args, _ = parser.parse_known_args()
index = int(os.environ["SM_CURRENT_HOST"].split("-")[1])
for epoch in range(args.epochs):
    print(f"epoch {epoch} loss={args.lr * index / (epoch + 1):.4f}", flush=True)
    if index == 1:
        print(f"epoch {epoch} accuracy={0.5 + epoch / 10:.2f}", flush=True)
"""


@pytest.mark.slow
def test_job_becomes_an_mlflow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 keeps the file store opt-in
    # mlflow.set_tracking_uri() below writes os.environ["MLFLOW_TRACKING_URI"]; setting it through
    # monkeypatch first makes teardown remove it, so later tests (the SDK oracle's fit() forwards
    # metrics to MLflow whenever the variable is set) never see this test's store.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    store = (tmp_path / "mlruns").as_uri()
    session = LocalSession(root=tmp_path / "jobs", mlflow=store)
    est = PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path / "src"),
        role="r",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"epochs": 3, "lr": 0.1},
        base_job_name="mlflow",
        metric_definitions=[
            {"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
            {"Name": "accuracy", "Regex": r"accuracy=([0-9.]+)"},
        ],
        sagemaker_session=session,
    )
    try:
        est.fit()
    finally:
        kill_leftover_jobs(tmp_path / "jobs")
    job = est.latest_training_job
    assert job is not None

    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["smlaunch"])
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["status"] == "FINISHED"
    assert run["tags.mlflow.runName"] == job.name
    assert (run["params.epochs"], run["params.lr"]) == ("3", "0.1")
    assert not any(column.startswith("params.sagemaker_") for column in runs.columns)
    assert {
        key: run[f"tags.smlaunch.{key}"]
        for key in (
            "job_name",
            "backend",
            "instance_type",
            "instance_count",
            "distribution",
            "model_artifact",
        )
    } == {
        "job_name": job.name,
        "backend": "local",
        "instance_type": "ml.c5.xlarge",
        "instance_count": "2",
        "distribution": "none",
        "model_artifact": est.model_data,
    }

    client = mlflow.MlflowClient(tracking_uri=store)
    history = {
        key: client.get_metric_history(run["run_id"], key)
        for key in ("train:loss/algo-1", "train:loss/algo-2", "accuracy")
    }
    assert [m.value for m in history["train:loss/algo-1"]] == [0.1, 0.05, 0.0333]
    assert [m.value for m in history["train:loss/algo-2"]] == [0.2, 0.1, 0.0667]
    assert [m.value for m in history["accuracy"]] == [0.5, 0.6, 0.7]
    for series in history.values():
        assert [m.step for m in series] == [0, 1, 2]
        stamps = [m.timestamp for m in series]
        assert stamps == sorted(stamps)
    description = job.describe()
    start, end = (description[k].timestamp() * 1000 for k in ("TrainingStartTime", "TrainingEndTime"))
    assert all(start <= m.timestamp <= end for series in history.values() for m in series)

    # Waiting again logs nothing twice; MLFLOW_TRACKING_URI alone turns tracking on for any session.
    job.wait(logs=False)
    assert len(mlflow.search_runs(experiment_names=["smlaunch"])) == 1
    other = (tmp_path / "other").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    PyTorch.attach(job.name, sagemaker_session=LocalSession(root=tmp_path / "jobs")).latest_training_job.wait(
        logs=False
    )
    mlflow.set_tracking_uri(other)
    assert list(mlflow.search_runs(experiment_names=["smlaunch"])["tags.smlaunch.job_name"]) == [job.name]
