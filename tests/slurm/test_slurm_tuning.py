"""Tuning jobs on the real two-node test cluster (``conftest.py``): a ``HyperparameterTuner`` over a
``SlurmSession`` keeps its tuning job in ``<shared_dir>/jobs/.tuning/``, its agent detached on the
submitting machine, and submits each trial as a normal Slurm job (one ``sbatch``), two at a time.

Covered: 3 trials, 2 in parallel, over a script whose objective has a known optimum: the best
trial is the one nearest it, every trial is a Slurm job of its own whose ``smlaunch list --slurm``
row names the tuning job, ``list/describe --tuning --slurm`` and ``attach`` from a fresh session
read it; ``smlaunch stop slurm:SHARED_DIR:NAME`` (what ``stop_tuning_job()`` does) stops the
running trials through the Slurm stop path (``scancel --signal=TERM``). After each test Slurm
runs nothing of the trials and the tuning agent is gone (the ``session`` fixture checks the
trials' processes).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch import ContinuousParameter, HyperparameterTuner, PyTorch
from smlaunch.sdk.cli import main as cli
from smlaunch.sdk.sessions.slurm import SlurmSession
from smlaunch.sdk.tuning import local
from tests.slurm._cluster import Cluster
from tests.slurm.conftest import squeue

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300)]

SCRIPT = """
import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--xv", type=float, default=0.0)
parser.add_argument("--sleep", type=float, default=0.0)
args, _ = parser.parse_known_args()
print(f"on {os.environ['SLURMD_NODENAME']}", flush=True)
time.sleep(args.sleep)
print(f"objective={-(args.xv - 3.0) ** 2}", flush=True)
"""
METRICS = [{"Name": "objective", "Regex": r"objective=([-0-9.e]+)"}]


def _tuner(session: SlurmSession, tmp_path: Path, **kwargs: Any) -> HyperparameterTuner:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(SCRIPT)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        hyperparameters=kwargs.pop("hyperparameters", {}),
        sagemaker_session=session,
    )
    ranges = {"xv": ContinuousParameter(0.0, 10.0)}
    return HyperparameterTuner(estimator, "objective", ranges, METRICS, **kwargs)


def _agent_gone(session: SlurmSession, name: str, timeout: float = 20) -> bool:
    agent = json.loads(local.tuning_dir(session.root, name).agent_file.read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(int(agent["pid"]))
            if abs(proc.create_time() - float(agent["create_time"])) < 1.0 and proc.status() != "zombie":
                time.sleep(0.2)
                continue
        return True
    return False


def _job_log(session: SlurmSession, trial: str) -> str:
    try:
        return (session.root / trial / "logs" / "job.log").read_text()
    except FileNotFoundError:
        return ""


def _most_at_once(summaries: list[dict[str, Any]]) -> int:
    spans = [(s["TrainingStartTime"], s["TrainingEndTime"]) for s in summaries]
    return max(sum(1 for start, end in spans if start <= moment < end) for moment, _ in spans)


def test_three_trials_two_at_a_time_are_slurm_jobs_of_the_tuning_job(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "slurm-tuning"
    tuner = _tuner(session, tmp_path, strategy="Random", max_jobs=3, max_parallel_jobs=2, random_seed=3)
    tuner.fit(job_name=name)  # waits
    assert _agent_gone(session, name)
    described = tuner.describe()
    assert described["HyperParameterTuningJobStatus"] == "Completed", described.get("FailureReason")
    assert described["TrainingJobStatusCounters"]["Completed"] == 3
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 3, "Pending": 0, "Failed": 0}
    summaries = tuner.analytics().training_job_summaries()
    assert len(summaries) == 3 and _most_at_once(summaries) <= 2
    values = {
        s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries
    }
    best = tuner.best_training_job()
    assert values[best] == max(values.values())
    tuned = {s["TrainingJobName"]: float(s["TunedHyperParameters"]["xv"]) for s in summaries}
    assert values[best] == pytest.approx(-((tuned[best] - 3.0) ** 2), abs=1e-6)  # read from its log
    for trial in values:  # each trial its own sbatch, on a node of the cluster
        slurm = json.loads((session.root / trial / "slurm.json").read_text())
        assert f"--job-name={trial}" in slurm["sbatch"] and slurm["job_id"].isdigit()
        job_log = _job_log(session, trial)
        assert "on node" in job_log, job_log[-2000:]
        assert squeue(slurm_cluster, trial) == ""

    capsys.readouterr()
    assert cli.main(["list", "--slurm", str(session.shared_dir), "--output", "table"]) == 0
    table = capsys.readouterr().out
    assert "TUNING_JOB" in table and all(f"{trial}" in table for trial in values), table
    assert sum(line.split()[-1] == name for line in table.splitlines()[1:]) == 3, table
    assert cli.main(["list", "--tuning", "--slurm", str(session.shared_dir), "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["HyperParameterTuningJobSummaries"]
    assert [(s["HyperParameterTuningJobName"], s["HyperParameterTuningJobStatus"]) for s in listed] == [
        (name, "Completed")
    ]
    assert cli.main(["describe", "--tuning", f"slurm:{session.shared_dir}:{name}", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["BestTrainingJob"]["TrainingJobName"] == best

    attached = HyperparameterTuner.attach(name, sagemaker_session=SlurmSession(shared_dir=session.shared_dir))
    assert attached.best_training_job() == best and attached.max_parallel_jobs == 2
    assert attached.best_estimator().latest_training_job.name == best


def test_smlaunch_stop_stops_the_running_trials_through_slurm(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "slurm-tuning-stop"
    tuner = _tuner(
        session, tmp_path, strategy="Random", max_jobs=4, max_parallel_jobs=2, hyperparameters={"sleep": 120}
    )
    tuner.fit(job_name=name, wait=False)
    deadline = time.monotonic() + 90
    running: list[str] = []
    while time.monotonic() < deadline and len(running) < 2:  # both scripts started, on their nodes
        summaries = tuner.analytics().training_job_summaries()
        names = [s["TrainingJobName"] for s in summaries]
        running = [trial for trial in names if "on node" in _job_log(session, trial)]
        time.sleep(0.5)
    assert len(running) == 2, tuner.describe()
    assert all(squeue(slurm_cluster, trial) == "RUNNING" for trial in running)
    # As tuner.stop_tuning_job() does, from a terminal: a bare name at the Slurm place is the
    # tuning job, there being no training job of that name.
    assert cli.main(["stop", f"slurm:{session.shared_dir}:{name}"]) == 0
    assert f"Stopping tuning job {name}" in capsys.readouterr().err
    described = tuner.wait(poll=0.5)
    summaries = tuner.analytics().training_job_summaries()
    assert described["HyperParameterTuningJobStatus"] == "Stopped", described
    assert described["TrainingJobStatusCounters"]["Stopped"] == 2, summaries
    assert len(summaries) == 2 and {s["TrainingJobStatus"] for s in summaries} == {"Stopped"}
    for trial in running:
        assert squeue(slurm_cluster, trial) == ""
        assert "Stopped" in session.backend().describe(trial)["TrainingJobStatus"]
    assert _agent_gone(session, name)
