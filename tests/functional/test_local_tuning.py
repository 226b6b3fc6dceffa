"""Local tuning jobs end to end: a real tuning agent launching real training jobs on a LocalSession
(process executor), the objective read from each trial's log with the metric definitions."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch import CategoricalParameter, ContinuousParameter, HyperparameterTuner, LocalSession
from smlaunch.sdk.tuning import local
from tests.functional._local_helpers import kill_leftover_jobs, local_pytorch

pytestmark = pytest.mark.slow

SCRIPT = """
import argparse, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--xv", type=float, default=0.0)
parser.add_argument("--mode", default="ok")
parser.add_argument("--sleep", type=float, default=0.0)
args, _ = parser.parse_known_args()
time.sleep(args.sleep)
if args.mode == "fail":
    sys.exit("this trial fails on purpose")
print(f"objective={-(args.xv - 3.0) ** 2}", flush=True)
"""
METRICS = [{"Name": "objective", "Regex": r"objective=([-0-9.e]+)"}]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    return source


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    jobs = tmp_path / "jobs"
    yield jobs
    for agent_file in (jobs / local.TUNING_DIR).glob("*/agent.json"):  # the tuning agents first
        with contextlib.suppress(psutil.Error, OSError, ValueError, KeyError):
            psutil.Process(int(json.loads(agent_file.read_text())["pid"])).kill()
    kill_leftover_jobs(jobs)


def _tuner(src: Path, root: Path, ranges: dict[str, Any], **kwargs: Any) -> HyperparameterTuner:
    estimator = local_pytorch(src, root)
    estimator.set_hyperparameters(**kwargs.pop("hyperparameters", {}))
    return HyperparameterTuner(estimator, "objective", ranges, METRICS, **kwargs)


def _wait(tuner: HyperparameterTuner, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        description = tuner.describe()
        if description["HyperParameterTuningJobStatus"] in local.TERMINAL:
            return description
        time.sleep(0.5)
    raise AssertionError(f"tuning job still running: {tuner.describe()}")


def test_eight_trials_two_at_a_time_find_the_optimum_and_each_is_a_real_job(src: Path, root: Path) -> None:
    tuner = _tuner(
        src,
        root,
        {"xv": ContinuousParameter(0.0, 10.0)},
        strategy="Random",
        max_jobs=8,
        max_parallel_jobs=2,
        random_seed=7,
    )
    tuner.fit(job_name="tune-eight", wait=False)
    most_at_once = 0
    while True:
        description = tuner.describe()
        most_at_once = max(most_at_once, description["TrainingJobStatusCounters"]["InProgress"])
        if description["HyperParameterTuningJobStatus"] in local.TERMINAL:
            break
        time.sleep(0.2)
    description = tuner.wait(poll=0.1)
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert 1 <= most_at_once <= 2
    assert description["TrainingJobStatusCounters"] == {
        "Completed": 8,
        "InProgress": 0,
        "RetryableError": 0,
        "NonRetryableError": 0,
        "Stopped": 0,
    }
    assert description["ObjectiveStatusCounters"] == {"Succeeded": 8, "Pending": 0, "Failed": 0}
    summaries = local.training_job_summaries(root, "tune-eight")
    assert len(summaries) == 8
    values = [s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries]
    best = description["BestTrainingJob"]
    assert (
        best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        == max(values)
        > statistics.median(values)
    )
    distances = [abs(float(s["TunedHyperParameters"]["xv"]) - 3.0) for s in summaries]
    assert abs(float(best["TunedHyperParameters"]["xv"]) - 3.0) < statistics.median(distances)
    assert tuner.best_training_job() == best["TrainingJobName"]
    backend = LocalSession(root=root).backend()
    listed = {entry.name for entry in backend.entries()}  # type: ignore[attr-defined]
    for summary in summaries:
        name = summary["TrainingJobName"]
        assert name.startswith("tune-eight-") and len(name.split("-")[-1]) == 8
        assert name in listed
        job = backend.describe(name)
        assert job["TrainingJobStatus"] == "Completed"
        assert job["HyperParameters"]["xv"] == summary["TunedHyperParameters"]["xv"]
        assert any(line.startswith("objective=") or "objective=" in line for line in backend.log_lines(name))
    estimator = tuner.best_estimator()
    assert estimator.latest_training_job is not None
    assert estimator.latest_training_job.name == best["TrainingJobName"]

    # Another process attaches to the same tuning job and reads the same description.
    code = (
        "import json, sys\n"
        "from smlaunch import HyperparameterTuner, LocalSession\n"
        "t = HyperparameterTuner.attach(sys.argv[1], sagemaker_session=LocalSession(root=sys.argv[2]))\n"
        "d = t.describe()\n"
        "print(json.dumps({'status': d['HyperParameterTuningJobStatus'], 'counters': "
        "d['TrainingJobStatusCounters'], 'best': t.best_training_job(), 'max_jobs': t.max_jobs}))\n"
    )
    attached = subprocess.run(
        [sys.executable, "-c", code, "tune-eight", str(root)], capture_output=True, text=True, timeout=60
    )
    assert attached.returncode == 0, attached.stderr
    assert json.loads(attached.stdout.strip().splitlines()[-1]) == {
        "status": "Completed",
        "counters": description["TrainingJobStatusCounters"],
        "best": best["TrainingJobName"],
        "max_jobs": 8,
    }


def test_a_failing_trial_is_counted_and_the_tuning_job_goes_on(src: Path, root: Path) -> None:
    tuner = _tuner(
        src,
        root,
        {"mode": CategoricalParameter(["ok", "fail", "fine"])},
        strategy="Grid",
        max_parallel_jobs=2,
        random_seed=1,
    )
    tuner.fit(job_name="tune-fail", wait=False)
    description = _wait(tuner)
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["TrainingJobStatusCounters"]["Completed"] == 2
    assert description["TrainingJobStatusCounters"]["NonRetryableError"] == 1
    assert description["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 1}
    failed = [
        s for s in local.training_job_summaries(root, "tune-fail") if s["TrainingJobStatus"] == "Failed"
    ]
    assert [s["TunedHyperParameters"]["mode"] for s in failed] == [json.dumps("fail")]
    assert "fails on purpose" in failed[0]["FailureReason"]


def test_stop_tuning_job_stops_the_running_trials(src: Path, root: Path) -> None:
    tuner = _tuner(
        src,
        root,
        {"xv": ContinuousParameter(0.0, 10.0)},
        hyperparameters={"sleep": 120},
        strategy="Random",
        max_jobs=4,
        max_parallel_jobs=2,
    )
    tuner.fit(job_name="tune-stop", wait=False)
    deadline = time.monotonic() + 60
    while tuner.describe()["TrainingJobStatusCounters"]["InProgress"] < 2:
        assert time.monotonic() < deadline, tuner.describe()
        time.sleep(0.2)
    tuner.stop_tuning_job()
    description = _wait(tuner, timeout=120)
    assert description["HyperParameterTuningJobStatus"] == "Stopped"
    assert description["TrainingJobStatusCounters"]["Stopped"] == 2
    assert description["TrainingJobStatusCounters"]["InProgress"] == 0
    backend = LocalSession(root=root).backend()
    for summary in local.training_job_summaries(root, "tune-stop"):
        assert backend.describe(summary["TrainingJobName"])["TrainingJobStatus"] == "Stopped"
