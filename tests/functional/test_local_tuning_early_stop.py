"""Early stopping of real trials: a local tuning job whose trials print their objective once per
epoch; the median stopping rule (``early_stopping_type='Auto'``) and Hyperband's ``max_resource``
stop trials through the training jobs' own stop path."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch import ContinuousParameter, HyperparameterTuner, LocalSession
from smlaunch.sdk.tuning import local
from smlaunch.sdk.tuning.configs import HyperbandStrategyConfig, StrategyConfig
from tests.functional._local_helpers import kill_leftover_jobs, local_pytorch

pytestmark = pytest.mark.slow

SCRIPT = """
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--xv", type=float, default=0.0)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--pause", type=float, default=1.0)
args, _ = parser.parse_known_args()
for epoch in range(args.epochs):
    print(f"epoch {epoch} objective={-(args.xv - 3.0) ** 2}", flush=True)
    time.sleep(args.pause)
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


def _fit(src: Path, root: Path, name: str, hyperparameters: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    estimator = local_pytorch(src, root)
    estimator.set_hyperparameters(**hyperparameters)
    tuner = HyperparameterTuner(
        estimator, "objective", {"xv": ContinuousParameter(0.0, 10.0)}, METRICS, **kwargs
    )
    tuner.fit(job_name=name, wait=False)
    deadline = time.monotonic() + 240
    while tuner.describe()["HyperParameterTuningJobStatus"] not in local.TERMINAL:
        assert time.monotonic() < deadline, tuner.describe()
        time.sleep(0.5)
    return tuner.wait(poll=0.1)


def test_the_median_rule_stops_worse_trials_through_their_stop_path(src: Path, root: Path) -> None:
    # Seed 3 draws xv = 5.5, 7.1, 3.0, 5.1, 8.9, 9.0: the last two are worse than the median of the
    # trials before them at their first epoch.
    description = _fit(
        src,
        root,
        "tune-auto",
        {"epochs": 4, "pause": 1.0},
        strategy="Random",
        max_jobs=6,
        max_parallel_jobs=2,
        random_seed=3,
        early_stopping_type="Auto",
    )
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    counters = description["TrainingJobStatusCounters"]
    assert counters["Stopped"] >= 1 and counters["Completed"] + counters["Stopped"] == 6
    assert description["ObjectiveStatusCounters"] == {"Succeeded": 6, "Pending": 0, "Failed": 0}
    backend = LocalSession(root=root).backend()
    summaries = local.training_job_summaries(root, "tune-auto")
    stopped = [s for s in summaries if s["TrainingJobStatus"] == "Stopped"]
    for summary in stopped:
        job = backend.describe(summary["TrainingJobName"])
        assert job["TrainingJobStatus"] == "Stopped"  # the training job's own stop path
        printed = [line for line in backend.log_lines(summary["TrainingJobName"]) if "objective=" in line]
        assert 1 <= len(printed) < 4
        assert float(summary["TunedHyperParameters"]["xv"]) > 8.0
    best = description["BestTrainingJob"]
    assert best["TrainingJobName"] not in {s["TrainingJobName"] for s in stopped}
    assert agent_log_mentions(root, "tune-auto", "stopped early")


def test_hyperband_stops_each_trial_at_max_resource(src: Path, root: Path) -> None:
    description = _fit(
        src,
        root,
        "tune-band",
        {"epochs": 8, "pause": 1.0},
        strategy="Hyperband",
        strategy_config=StrategyConfig(HyperbandStrategyConfig(max_resource=2, min_resource=2)),
        max_jobs=2,
        max_parallel_jobs=2,
        random_seed=1,
    )
    assert description["HyperParameterTuningJobStatus"] == "Completed"
    assert description["TrainingJobStatusCounters"]["Stopped"] == 2
    assert description["ObjectiveStatusCounters"]["Succeeded"] == 2
    backend = LocalSession(root=root).backend()
    for summary in local.training_job_summaries(root, "tune-band"):
        printed = [line for line in backend.log_lines(summary["TrainingJobName"]) if "objective=" in line]
        assert 2 <= len(printed) < 8  # stopped at its second epoch, give or take one poll


def agent_log_mentions(root: Path, name: str, text: str) -> bool:
    """Whether the tuning agent's log says ``text``."""
    return text in local.tuning_dir(root, name).agent_log.read_text()
