"""A tuning job as an MLflow parent run, each of its trials a child run (the ``mlflow`` extra).

Tracking is on as for training jobs (:mod:`smlaunch.sdk.jobs.tracking`: the session's ``mlflow=``
or ``MLFLOW_TRACKING_URI``). When :meth:`HyperparameterTuner.wait
<smlaunch.sdk.tuning.tuner.HyperparameterTuner.wait>` sees the tuning job end, :func:`log_tuning_job`
records, in the same experiment:

- one parent run named after the tuning job: params ``strategy``, ``objective_metric``,
  ``objective_type``, ``max_jobs``, ``max_parallel_jobs`` and one ``range.<hyperparameter>`` per
  tuned range (``range.<definition>.<hyperparameter>`` for several training job definitions; its
  wire form as JSON); metric ``BestObjectiveValue``; tags
  ``smlaunch.tuning_job_name``, ``smlaunch.status``, ``smlaunch.best_training_job``; its status
  FINISHED, FAILED or KILLED (Stopped) and its times the tuning job's;
- one child run per ended trial (tag ``mlflow.parentRunId``), logged as any training job is (its
  hyperparameters, every metric value, the ``smlaunch.*`` tags), with the tag
  ``smlaunch.tuning_job_name`` and the metric ``FinalObjectiveValue`` (the objective SageMaker
  scored it by) added.

Runs already there (a parent run tagged with the tuning job's name, a child tagged with the trial's
job name) are not logged again, so waiting twice logs once. The trials are read through the
session's backend, so a SageMaker tuning job's trials are logged as a local one's. Logging problems
never change the tuning job's outcome: they become a warning.
"""

from __future__ import annotations

import json
import warnings
from datetime import datetime
from typing import Any

from smlaunch import contract
from smlaunch.sdk.jobs import tracking
from smlaunch.sdk.tuning import records

TUNING_TAG = "smlaunch.tuning_job_name"
KIND_TAG = "smlaunch.kind"
_RUN_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Stopped": "KILLED"}


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


def _parent_params(description: dict[str, Any]) -> dict[str, str]:
    config = description.get("HyperParameterTuningJobConfig") or {}
    objective = records.objective(description)
    limits = config.get("ResourceLimits") or {}
    params = {
        "strategy": config.get("Strategy"),
        "objective_metric": objective.get("MetricName"),
        "objective_type": objective.get("Type"),
        "max_jobs": limits.get("MaxNumberOfTrainingJobs"),
        "max_parallel_jobs": limits.get("MaxParallelTrainingJobs"),
    }
    for name, parameter in records.parameter_ranges(description).items():
        params[f"range.{name}"] = json.dumps(
            {k: v for k, v in parameter.items() if k != "Name"}, sort_keys=True
        )
    return {key: str(value) for key, value in params.items() if value is not None}


def _parent_run(client: Any, experiment: str, description: dict[str, Any]) -> str:
    """The tuning job's run: the one logged before, else a new one with its params."""
    name = description["HyperParameterTuningJobName"]
    found = client.search_runs(
        [experiment],
        filter_string=f"tags.`{TUNING_TAG}` = '{name}' and tags.`{KIND_TAG}` = 'tuning_job'",
        max_results=1,
    )
    if found:
        return str(found[0].info.run_id)
    from mlflow.entities import Param

    run = client.create_run(
        experiment,
        start_time=_millis(description.get("CreationTime")),
        run_name=name,
        tags={TUNING_TAG: name, KIND_TAG: "tuning_job"},
    )
    params = [Param(key, value) for key, value in sorted(_parent_params(description).items())]
    client.log_batch(run.info.run_id, params=params)
    return str(run.info.run_id)


def log_tuning_job(uri: str, session: Any, description: dict[str, Any]) -> str:
    """Record the tuning job ``description`` describes and its ended trials at ``uri`` (module
    docstring); returns the parent run's id."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = tracking.experiment_id(client)
    name = description["HyperParameterTuningJobName"]
    parent = _parent_run(client, experiment, description)
    backend = session.backend()
    for summary in records.training_job_summaries(session, name):
        if summary["TrainingJobStatus"] not in contract.TERMINAL_STATUSES:
            continue
        trial = summary["TrainingJobName"]
        objective = (summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
        tracking.log_job(
            uri,
            backend.describe(trial),
            backend.metric_records(trial),
            backend.capabilities.name,
            tags={"mlflow.parentRunId": parent, TUNING_TAG: name},
            metrics={"FinalObjectiveValue": objective} if objective is not None else None,
        )
    best = description.get("BestTrainingJob") or {}
    status = description["HyperParameterTuningJobStatus"]
    client.set_tag(parent, "smlaunch.status", status)
    if best:
        client.set_tag(parent, "smlaunch.best_training_job", best["TrainingJobName"])
        if "BestObjectiveValue" not in client.get_run(parent).data.metrics:  # logged once
            value = best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
            client.log_metric(parent, "BestObjectiveValue", float(value))
    if status in _RUN_STATUS:
        client.set_terminated(
            parent, _RUN_STATUS[status], end_time=_millis(description.get("HyperParameterTuningEndTime"))
        )
    return parent


def track_tuning_job(session: Any, description: dict[str, Any]) -> None:
    """Log the ended tuning job when tracking is on (module docstring); never raises."""
    uri = tracking.tracking_uri(session)
    if uri is None:
        return
    name = description.get("HyperParameterTuningJobName")
    try:
        log_tuning_job(uri, session, description)
    except ImportError:
        warnings.warn(
            f"{tracking.TRACKING_URI_ENV} is set but mlflow is not installed; the tuning job {name} "
            f"was not logged. Fix: pip install 'smlaunch[{tracking.EXTRA}]'",
            stacklevel=3,
        )
    except Exception as exc:  # the tuning job's outcome matters more than its record
        warnings.warn(
            f"logging tuning job {name} to MLflow at {uri} failed: {type(exc).__name__}: {exc}",
            stacklevel=3,
        )
