"""The local tuning agent's loop over a fake platform: each trial prints a scripted objective series,
one value per poll, so early stopping, the completion criteria, the runtime limit, the seed and
warm starts are decided exactly as on real jobs, in milliseconds."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.tuning import local, warm
from smlaunch.sdk.tuning.agent import TuningAgent

optuna = pytest.importorskip("optuna")

Script = Callable[[dict[str, str]], tuple[list[float], str]]
"""A trial's tuned hyperparameters -> the objective values it prints and how it ends."""


@dataclass
class FakeJob:
    hyperparameters: dict[str, str]
    series: list[float]
    outcome: str
    printed: int = 0
    status: str = "InProgress"
    stop_asked: bool = False


@dataclass
class FakePlatform:
    """The backend the agent talks to: every ``describe`` of a running job is one more step of it
    (a value printed, or its end); ``stop`` ends it Stopped at its next step."""

    script: Script
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)

    def submit(self, request: JobRequest) -> None:
        tuned = dict(request.spec.HyperParameters)
        series, outcome = self.script(tuned)
        self.jobs[request.spec.TrainingJobName] = FakeJob(tuned, series, outcome)

    def describe(self, name: str) -> dict[str, Any]:
        job = self.jobs[name]
        if job.status == "InProgress":
            if job.stop_asked:
                job.status = "Stopped"
            elif job.printed < len(job.series):
                job.printed += 1
            else:
                job.status = job.outcome
        description: dict[str, Any] = {
            "TrainingJobStatus": job.status,
            "CreationTime": datetime(2026, 1, 1, tzinfo=timezone.utc),
        }
        if job.printed:
            description["FinalMetricDataList"] = [{"MetricName": "obj", "Value": job.series[job.printed - 1]}]
        if job.status == "Failed":
            description["FailureReason"] = "AlgorithmError: scripted"
        return description

    def metric_records(self, name: str, names: list[str]) -> list[MetricRecord]:
        job = self.jobs[name]
        return [
            MetricRecord(name="obj", value=v, time=None, host="algo-1") for v in job.series[: job.printed]
        ]

    def stop(self, name: str) -> None:
        if self.jobs[name].status == "InProgress":
            self.jobs[name].stop_asked = True
            self.stopped.append(name)


class Clock:
    """Time that moves only when the agent sleeps."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _spec() -> TrainingJobSpec:
    return TrainingJobSpec(
        TrainingJobName="base",
        AlgorithmSpecification={"TrainingImage": "smlaunch-local", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": "file:///tmp/out"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        HyperParameters={"epochs": "4"},
    )


def _job(root: Path, name: str, clock: Clock, strategy: str = "Random", **config: Any) -> JobDir:
    limits = {
        "MaxParallelTrainingJobs": config.pop("parallel", 1),
        "MaxNumberOfTrainingJobs": config.pop("jobs", 6),
    }
    limits.update(config.pop("limits", {}))
    ranges = config.pop(
        "ranges", {"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "10"}]}
    )
    request = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy,
            "ResourceLimits": limits,
            "HyperParameterTuningJobObjective": {
                "Type": config.pop("objective", "Maximize"),
                "MetricName": "obj",
            },
            "ParameterRanges": ranges,
            "RandomSeed": config.pop("seed", 11),
            **config.pop("config", {}),
        },
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"MetricDefinitions": [{"Name": "obj", "Regex": "obj=(.*)"}]},
            "StaticHyperParameters": {"epochs": "4"},
        },
        **config,
    }
    job = local.tuning_dir(root, name)
    job.path.mkdir(parents=True)
    write_json_atomic(job.spec_file, request)
    write_json_atomic(
        job.path / local.TRIAL_FILE, {"spec": _spec().to_request(), "strategy": "none", "settings": {}}
    )
    write_json_atomic(job.agent_file, {"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    job.write_state(
        {
            "HyperParameterTuningJobStatus": "InProgress",
            "CreationTime": clock(),
            **local.counters([]),
            local.SUMMARIES: [],
        }
    )
    return job


def _run(
    root: Path, name: str, script: Script, strategy: str = "Random", **config: Any
) -> tuple[dict[str, Any], FakePlatform]:
    clock = Clock()
    platform = FakePlatform(script)
    job = _job(root, name, clock, strategy, **config)
    assert TuningAgent(job, backend=platform, clock=clock, sleep=clock.sleep).run() == 0
    return local.raw_state(root, name), platform


def quadratic(steps: int = 4, outcome: str = "Completed") -> Script:
    """Objective -(x - 3)^2 at every step: the nearer x is to 3, the better the trial."""

    def script(hyperparameters: dict[str, str]) -> tuple[list[float], str]:
        return [-((float(hyperparameters["x"]) - 3.0) ** 2)] * steps, outcome

    return script


def _values(state: dict[str, Any]) -> dict[str, float]:
    return {
        s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        for s in state[local.SUMMARIES]
        if "FinalHyperParameterTuningJobObjectiveMetric" in s
    }


def test_early_stopping_auto_stops_worse_trials_through_the_stop_path(tmp_path: Path) -> None:
    state, platform = _run(
        tmp_path, "auto", quadratic(), jobs=10, config={"TrainingJobEarlyStoppingType": "Auto"}
    )
    assert state["HyperParameterTuningJobStatus"] == "Completed"
    counters = state["TrainingJobStatusCounters"]
    assert counters["Stopped"] == len(platform.stopped) >= 1
    assert counters["Completed"] + counters["Stopped"] == 10
    assert state["ObjectiveStatusCounters"] == {"Succeeded": 10, "Pending": 0, "Failed": 0}
    values = _values(state)
    summaries = state[local.SUMMARIES]
    for index, summary in enumerate(summaries):
        name = summary["TrainingJobName"]
        earlier = sorted(values[s["TrainingJobName"]] for s in summaries[:index])
        if name in platform.stopped:
            assert summary["TrainingJobStatus"] == "Stopped"
            assert platform.jobs[name].printed == 1  # stopped at its first step
            assert index >= 3 and values[name] < earlier[len(earlier) // 2]
        elif index >= 3:
            assert values[name] >= sorted(earlier)[(len(earlier) - 1) // 2]
    assert state["BestTrainingJob"]["TrainingJobName"] not in platform.stopped


def test_hyperband_stops_every_trial_at_max_resource_and_counts_it_stopped(tmp_path: Path) -> None:
    # MinResource == MaxResource: no trial may be stopped before 2 steps, and each is at 2.
    hyperband = {"StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 2, "MaxResource": 2}}}
    state, platform = _run(
        tmp_path, "band", quadratic(steps=5), "Hyperband", jobs=4, parallel=2, config=hyperband
    )
    assert state["HyperParameterTuningJobStatus"] == "Completed"
    assert state["TrainingJobStatusCounters"]["Stopped"] == 4
    assert state["ObjectiveStatusCounters"]["Succeeded"] == 4
    assert all(job.printed == 2 for job in platform.jobs.values())
    assert "BestTrainingJob" in state


def test_hyperband_prunes_worse_trials_before_max_resource(tmp_path: Path) -> None:
    hyperband = {"StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 9}}}
    state, platform = _run(tmp_path, "prune", quadratic(steps=12), "Hyperband", jobs=12, config=hyperband)
    steps = sorted(job.printed for job in platform.jobs.values())
    assert steps[0] < 9 and steps[-1] == 9
    assert state["TrainingJobStatusCounters"]["Stopped"] == 12


@pytest.mark.parametrize(
    ("criteria", "expected"),
    [
        ({"TargetObjectiveMetricValue": -1.0}, "target"),
        ({"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}, "patience"),
    ],
)
def test_completion_criteria_end_the_tuning_job_before_max_jobs(
    tmp_path: Path, criteria: dict[str, Any], expected: str
) -> None:
    state, _ = _run(tmp_path, "crit", quadratic(), jobs=40, config={"TuningJobCompletionCriteria": criteria})
    assert state["HyperParameterTuningJobStatus"] == "Completed"
    values = list(_values(state).values())
    assert len(state[local.SUMMARIES]) < 40
    if expected == "target":
        assert max(values) >= -1.0 and all(v < -1.0 for v in values[:-1])
        assert state["TuningJobCompletionDetails"]["NumberOfTrainingJobsObjectiveNotImproving"] == 0
    else:
        best_at = values.index(max(values))
        assert len(values) - 1 - best_at == 3
        assert state["TuningJobCompletionDetails"]["NumberOfTrainingJobsObjectiveNotImproving"] == 3


def test_max_runtime_stops_the_running_trials_and_completes(tmp_path: Path) -> None:
    # One step per poll (0.5 s of the fake clock): a trial runs ~50 s, the tuning job 120 s.
    state, platform = _run(
        tmp_path, "slow", quadratic(steps=100), jobs=8, parallel=2, limits={"MaxRuntimeInSeconds": 120}
    )
    assert state["HyperParameterTuningJobStatus"] == "Completed"
    counters = state["TrainingJobStatusCounters"]
    assert counters["Completed"] == 4 and counters["Stopped"] == 2 == len(platform.stopped)
    assert len(state[local.SUMMARIES]) == 6
    assert 120 <= state["HyperParameterTuningEndTime"] - state["CreationTime"] < 122
    # Stopped by the tuning job, not by its search: their objective is not counted.
    assert state["ObjectiveStatusCounters"] == {"Succeeded": 4, "Pending": 0, "Failed": 2}


def test_a_failing_trial_is_counted_failed_and_the_tuning_job_goes_on(tmp_path: Path) -> None:
    def script(hyperparameters: dict[str, str]) -> tuple[list[float], str]:
        return ([], "Failed") if float(hyperparameters["x"]) > 5 else ([1.0], "Completed")

    state, platform = _run(tmp_path, "fail", script, jobs=6)
    failed = sum(1 for job in platform.jobs.values() if job.outcome == "Failed")
    assert 0 < failed < 6
    assert state["HyperParameterTuningJobStatus"] == "Completed"
    assert state["TrainingJobStatusCounters"]["NonRetryableError"] == failed
    assert state["ObjectiveStatusCounters"] == {"Succeeded": 6 - failed, "Pending": 0, "Failed": failed}


@pytest.mark.parametrize("strategy", ["Random", "Bayesian", "Hyperband"])
def test_a_seed_repeats_the_trials_hyperparameters(tmp_path: Path, strategy: str) -> None:
    def tuned(name: str, seed: int) -> list[dict[str, str]]:
        state, _ = _run(tmp_path, name, quadratic(), strategy, jobs=12, seed=seed)
        return [s["TunedHyperParameters"] for s in state[local.SUMMARIES]]

    first = tuned("one", 5)
    assert tuned("two", 5) == first
    assert tuned("three", 6) != first


def test_a_warm_start_teaches_the_child_its_parents_trials(tmp_path: Path) -> None:
    parent, _ = _run(tmp_path, "parent", quadratic(), "Bayesian", jobs=12)
    parent_best = parent["BestTrainingJob"]
    wide = {"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "20"}]}
    for kind, overall in (("IdenticalDataAndAlgorithm", True), ("TransferLearning", False)):
        start = {
            "WarmStartType": kind,
            "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
        }
        clock = Clock()
        job = _job(
            tmp_path, f"child-{kind.lower()}", clock, "Bayesian", jobs=2, ranges=wide, WarmStartConfig=start
        )
        agent = TuningAgent(
            job, backend=FakePlatform(lambda hp: ([-1000.0], "Completed")), clock=clock, sleep=clock.sleep
        )
        taught = agent.study.get_trials()
        assert len(taught) == 12 and all(t.state == optuna.trial.TrialState.COMPLETE for t in taught)
        assert (
            max(t.value for t in taught)
            == parent_best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        )
        assert agent.run() == 0
        state = local.raw_state(tmp_path, job.path.name)
        assert len(state[local.SUMMARIES]) == 2  # the parents' trials are not the child's
        assert state["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == -1000.0
        if overall:
            assert state["OverallBestTrainingJob"] == parent_best
        else:
            assert "OverallBestTrainingJob" not in state


def test_warm_start_parents_are_checked_before_anything_starts(tmp_path: Path) -> None:
    clock = Clock()
    _run(tmp_path, "done", quadratic(), jobs=1)
    _job(tmp_path, "running", clock)
    _run(tmp_path, "other", quadratic(), jobs=1, objective="Minimize")

    def request(parent: str) -> dict[str, Any]:
        return {
            "HyperParameterTuningJobConfig": {
                "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "obj"}
            },
            "WarmStartConfig": {"ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": parent}]},
        }

    warm.check_parents(tmp_path, request("done"))
    for parent, problem in (
        ("missing", "no local tuning job"),
        ("running", "still InProgress"),
        ("other", "Minimize"),
    ):
        with pytest.raises(ConfigurationError, match=problem) as caught:
            warm.check_parents(tmp_path, request(parent))
        assert caught.value.field == "warm_start_config.parents" and caught.value.value == parent
