"""The agent of one store-kept tuning job: ``python -m smlaunch.sdk.tuning.agent <tuning job dir>``.

Started detached by :func:`smlaunch.sdk.tuning.local.start` (it outlives the notebook), it runs the
search as optuna's ask-and-tell (:mod:`smlaunch.sdk.tuning.search`): while fewer than
``MaxParallelTrainingJobs`` trials run and fewer than ``MaxNumberOfTrainingJobs`` were started, it
asks for hyperparameters and submits a trial, a normal training job on the same session (through
the session's :class:`~smlaunch.sdk.tuning.platform.TrialPlatform`: this machine's backend for a
``LocalSession``, the Slurm backend's ``sbatch`` for a ``SlurmSession``); once a
trial ends it tells the study the trial's objective, the last value of the objective metric the
trial's logs printed (its ``FinalMetricDataList``, read with the tuner's metric definitions, as
SageMaker reads it). A trial that fails, or ends without an objective value, is counted so and
told to the study as failed; the tuning job goes on. ``stop`` (``stop_tuning_job()``) or SIGTERM
stops the running trials through their own stop path and ends the tuning job Stopped.

While a trial runs, with ``Hyperband`` or early stopping ``Auto``, every new value of its
objective is reported to its optuna trial and the pruner may stop it early
(:mod:`smlaunch.sdk.tuning.pruning`): through the training job's stop path, so the trial ends
Stopped, counted so in ``TrainingJobStatusCounters``; its last objective value was read and used
by the search, so its ``ObjectiveStatus`` is Succeeded (Failed when it printed none). The
completion criteria and ``MaxRuntimeInSeconds`` end the tuning job Completed before
``MaxNumberOfTrainingJobs`` (:mod:`smlaunch.sdk.tuning.completion`); a warm start adds the
parents' trials to the study first (:mod:`smlaunch.sdk.tuning.warm`).

``RandomSeed`` seeds the sampler: a seeded ``Random`` or ``Grid`` tuning job asks the same
hyperparameters again; a seeded ``Bayesian`` one does too when its trials end in the same order
(``max_parallel_jobs=1``), since what it asks depends on what it was told.

Only this process writes ``state.json`` (:mod:`smlaunch.sdk.tuning.local` has its layout).
"""

from __future__ import annotations

import secrets
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.tuning import completion, local, platform, pruning, search, warm
from smlaunch.sdk.tuning.platform import TrialPlatform

POLL_SECONDS = 0.5
STUDY_NAME = "smlaunch-tuning"
STOPPED = "stopped"
"""Why a trial was stopped when the tuning job stopped it: it ended, not its search (its
objective counts as Failed unless it completed)."""


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


@dataclass
class Running:
    """A trial not ended yet: its optuna trial, how many objective values were reported to it, and
    why the agent stopped it (a :mod:`~smlaunch.sdk.tuning.pruning` decision), if it did."""

    trial: Any
    reported: int = 0
    stopped_for: str | None = None


class TuningAgent:
    """Runs one tuning job's trials from its directory; see the module docstring. ``backend`` (the
    platform ``trial.json`` records, by default) and ``clock`` are injected for tests."""

    def __init__(
        self,
        job: JobDir,
        backend: TrialPlatform | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.job = job
        self.clock = clock
        self.sleep = sleep
        self.request = job.read_json(job.spec_file)
        trial = job.read_json(job.path / local.TRIAL_FILE)
        self.base = trial["spec"]
        self.strategy = Strategy(trial["strategy"])
        self.backend = backend if backend is not None else platform.open_platform(trial)
        self.root = job.path.parent.parent
        """The job store: the tuning job is ``<root>/.tuning/<name>``."""
        config = self.request["HyperParameterTuningJobConfig"]
        self.config = config
        ranges = config["ParameterRanges"]
        limits = config["ResourceLimits"]
        self.objective = config["HyperParameterTuningJobObjective"]
        self.max_parallel = int(limits["MaxParallelTrainingJobs"])
        self.max_jobs = int(limits.get("MaxNumberOfTrainingJobs") or search.grid_size(ranges))
        if config["Strategy"] == "Grid":
            self.max_jobs = min(self.max_jobs, search.grid_size(ranges))
        self.distributions = search.distributions(ranges)
        self.maximize = self.objective["Type"] == "Maximize"
        self.pruner = pruning.pruner(self.request)
        self.max_resource = (
            pruning.hyperband_resources(self.request)[1] if config["Strategy"] == "Hyperband" else None
        )
        self.study = optuna.create_study(
            # One name for every tuning job: Hyperband's brackets follow the study's name and the
            # trial's number, so a seeded tuning job assigns them again as it did before.
            study_name=STUDY_NAME,
            direction="maximize" if self.maximize else "minimize",
            sampler=search.sampler(config["Strategy"], ranges, config.get("RandomSeed")),
            pruner=self.pruner,
        )
        for parent_trial in warm.parent_trials(
            self.root, warm.parents(self.request.get("WarmStartConfig")), self.distributions
        ):
            self.study.add_trial(parent_trial)
        self.state = job.read_state()
        self.running: dict[str, Running] = {}
        """Trial job name -> the trial, for the trials not ended yet."""
        self.ended_values: list[float] = []
        """The objective values of the trials that ended with one, in the order they ended."""
        self.summaries: dict[str, dict[str, Any]] = {}
        self.stop_requested = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    def run(self) -> int:
        """Run the tuning job to its end; the exit status is 0 unless the agent itself failed."""
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            status, reason = self._run()
        except BaseException as error:  # the agent's own failure ends the tuning job, named
            traceback.print_exc()
            self._stop_trials()
            self._finish("Failed", f"InternalServerError: the tuning agent failed: {error!r}")
            return 1
        self._finish(status, reason)
        return 0

    def _run(self) -> tuple[str, str | None]:
        started = 0
        while True:
            self._collect()
            if self.stop_requested or self.job.stop_file.exists():
                self._write("Stopping")
                self._stop_trials()
                return "Stopped", None
            reason = completion.end_reason(
                self.config, self.ended_values, self.maximize, self.clock() - self.state["CreationTime"]
            )
            if reason is not None:
                print(f"Tuning job ends: {reason}", flush=True)
                self._stop_trials()
                break
            while len(self.running) < self.max_parallel and started < self.max_jobs:
                started += 1
                self._launch(started)
            if not self.running:
                break
            self._write(local.IN_PROGRESS)
            self.sleep(POLL_SECONDS)
        if not any(s["ObjectiveStatus"] == "Succeeded" for s in self.summaries.values()):
            return "Failed", "No training job completed with a value of the objective metric"
        return "Completed", None

    def _launch(self, number: int) -> None:
        name = f"{self.request['HyperParameterTuningJobName']}-{number:03d}-{secrets.token_hex(4)}"
        trial = self.study.ask(self.distributions)
        tuned = search.wire_values(trial.params)
        wire = dict(
            self.base, TrainingJobName=name, HyperParameters={**self.base["HyperParameters"], **tuned}
        )
        metrics = self.request["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"]
        wire["AlgorithmSpecification"] = dict(wire["AlgorithmSpecification"], MetricDefinitions=metrics)
        summary: dict[str, Any] = {
            "TrainingJobName": name,
            "TuningJobName": self.request["HyperParameterTuningJobName"],
            "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name.lower()}",
            "CreationTime": self.clock(),
            "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
            "TunedHyperParameters": tuned,
            "ObjectiveStatus": "Pending",
        }
        self.summaries[name] = summary
        print(f"Trial {name}: {tuned}", flush=True)
        try:
            self.backend.submit(JobRequest(TrainingJobSpec.model_validate(wire), self.strategy))
        except Exception as error:  # a trial the platform refused is a failed trial, not the end
            summary.update(TrainingJobStatus=contract.STATUS_FAILED, ObjectiveStatus="Failed")
            summary["FailureReason"] = f"ClientError: {error}"
            self.study.tell(trial, state=_failed())
            return
        self.running[name] = Running(trial)

    def _observe(self, name: str, running: Running, decide: bool) -> None:
        """Report the trial's new objective values to its optuna trial; with ``decide``, stop the
        trial through its stop path when the pruner says so."""
        if self.pruner is None or running.stopped_for is not None:
            return
        metric = self.objective["MetricName"]
        series = pruning.objective_series(self.backend.metric_records(name, [metric]), metric)
        running.reported = pruning.report(running.trial, series, running.reported)
        verdict = pruning.decision(running.trial, running.reported, self.max_resource) if decide else None
        if verdict is not None:
            running.stopped_for = verdict
            print(f"Trial {name}: stopped early at step {running.reported} ({verdict})", flush=True)
            self.backend.stop(name)

    def _collect(self) -> None:
        """Read the running trials; tell the study each one that ended."""
        for name, running in list(self.running.items()):
            trial = running.trial
            description = self.backend.describe(name)
            status = description["TrainingJobStatus"]
            summary = self.summaries[name]
            summary["TrainingJobStatus"] = status
            summary["CreationTime"] = _timestamp(description.get("CreationTime"))
            for key in ("TrainingStartTime", "TrainingEndTime"):
                if description.get(key) is not None:
                    summary[key] = _timestamp(description[key])
            terminal = status in contract.TERMINAL_STATUSES
            self._observe(name, running, decide=not terminal)
            if not terminal:
                continue
            del self.running[name]
            if description.get("FailureReason"):
                summary["FailureReason"] = description["FailureReason"]
            metric = self.objective["MetricName"]
            values = [
                m["Value"] for m in description.get("FinalMetricDataList", []) if m["MetricName"] == metric
            ]
            early = running.stopped_for in (pruning.PRUNED, pruning.MAX_RESOURCE)
            if values and (status == contract.STATUS_COMPLETED or early):
                summary["ObjectiveStatus"] = "Succeeded"
                summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                    "Type": self.objective["Type"],
                    "MetricName": metric,
                    "Value": values[0],
                }
                self.ended_values.append(values[0])
                if status != contract.STATUS_COMPLETED and running.stopped_for == pruning.PRUNED:
                    self.study.tell(trial, state=_pruned())
                else:
                    self.study.tell(trial, values[0])
            else:
                summary["ObjectiveStatus"] = "Failed"
                self.study.tell(trial, state=_failed())

    def _stop_trials(self) -> None:
        """Stop every running trial through the training job's stop path; wait until each ended."""
        for name, running in self.running.items():
            running.stopped_for = running.stopped_for or STOPPED
            self.backend.stop(name)
        while self.running:
            self.sleep(POLL_SECONDS)
            self._collect()

    def _best(self) -> dict[str, Any] | None:
        scored = [s for s in self.summaries.values() if s["ObjectiveStatus"] == "Succeeded"]
        if not scored:
            return None
        sign = 1 if self.objective["Type"] == "Maximize" else -1
        return max(scored, key=lambda s: sign * s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])

    def _write(self, status: str, **fields: Any) -> None:
        summaries = list(self.summaries.values())
        state: dict[str, Any] = {
            "HyperParameterTuningJobStatus": status,
            "CreationTime": self.state["CreationTime"],
            **local.counters(summaries),
            local.SUMMARIES: summaries,
            **fields,
        }
        best = self._best()
        if best is not None:
            state["BestTrainingJob"] = best
        overall = warm.overall_best(self.root, self.request.get("WarmStartConfig"), best, self.maximize)
        if overall is not None:
            state["OverallBestTrainingJob"] = overall
        if self.config.get("TuningJobCompletionCriteria"):
            state["TuningJobCompletionDetails"] = {
                "NumberOfTrainingJobsObjectiveNotImproving": completion.not_improving(
                    self.ended_values, self.maximize
                )
            }
        if state != {k: v for k, v in self.state.items() if k != "LastModifiedTime"}:
            self.state = dict(state)
            self.job.write_state(dict(state, LastModifiedTime=self.clock()))

    def _finish(self, status: str, reason: str | None) -> None:
        fields: dict[str, Any] = {"HyperParameterTuningEndTime": self.clock()}
        if reason is not None:
            fields["FailureReason"] = reason
        self._write(status, **fields)
        print(f"Tuning job {status}" + (f": {reason}" if reason else ""), flush=True)


def _failed() -> Any:
    import optuna

    return optuna.trial.TrialState.FAIL


def _pruned() -> Any:
    import optuna

    return optuna.trial.TrialState.PRUNED


def main(argv: list[str] | None = None) -> int:
    """Run the tuning job whose directory is the one argument."""
    args = sys.argv[1:] if argv is None else argv
    return TuningAgent(JobDir(Path(args[0]))).run()


if __name__ == "__main__":
    sys.exit(main())
