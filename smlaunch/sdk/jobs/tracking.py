"""Each finished job as an MLflow run (the ``mlflow`` extra), on every backend.

Tracking is on when the session names a tracking URI (``LocalSession(mlflow="...")``,
``Session(mlflow="...")``) or ``MLFLOW_TRACKING_URI`` is set. When :meth:`TrainingJob.wait
<smlaunch.sdk.jobs.job.TrainingJob.wait>` sees the job end, :func:`log_job` records one run in the experiment
``$MLFLOW_EXPERIMENT_NAME`` (default ``smlaunch``), named after the job:

- params: the job's hyperparameters (SageMaker's own ``sagemaker_*`` keys left out);
- metrics: every value of its ``metric_definitions`` with its time and its step (the value's index in
  its series); a metric several hosts printed is one series per host, ``<name>/<host>``;
- tags: ``smlaunch.job_name``, ``smlaunch.backend``, ``smlaunch.instance_type``,
  ``smlaunch.instance_count``, ``smlaunch.distribution``, ``smlaunch.status`` and
  ``smlaunch.model_artifact`` (the model's URI);
- status FINISHED, FAILED or KILLED (Stopped), start and end times from the job.

A job already logged (a run tagged with its name exists) is not logged again. Logging problems never
change the job's outcome: they become a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError, MissingExtraError
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.distribution import Distribution

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
DEFAULT_EXPERIMENT = "smlaunch"
EXTRA = "mlflow"
_RUN_STATUS = {
    contract.STATUS_COMPLETED: "FINISHED",
    contract.STATUS_FAILED: "FAILED",
    contract.STATUS_STOPPED: "KILLED",
}


def check_tracking_uri(uri: Any) -> str | None:
    """Validate a session's ``mlflow=`` argument: a tracking URI string, with mlflow installed."""
    if uri is None:
        return None
    if not isinstance(uri, str) or not uri:
        raise ConfigurationError(
            "mlflow",
            uri,
            "must be an MLflow tracking URI",
            "pass e.g. mlflow='http://localhost:5000' or mlflow='file:///path/mlruns'",
        )
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise MissingExtraError("mlflow= (MLflow tracking)", "mlflow", EXTRA) from None
    return uri


def tracking_uri(session: Any) -> str | None:
    """The session's ``mlflow`` URI, else ``$MLFLOW_TRACKING_URI``, else None (tracking off)."""
    return getattr(session, "mlflow", None) or os.environ.get(TRACKING_URI_ENV) or None


def _millis(value: Any) -> int | None:
    if isinstance(value, datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    return None


def metric_series(records: Sequence[MetricRecord]) -> list[tuple[str, float, int | None, int]]:
    """``(key, value, timestamp ms, step)`` per value: key ``name``, or ``name/host`` when several
    hosts printed that metric; step = position in the key's series."""
    hosts: dict[str, set[str | None]] = {}
    for record in records:
        hosts.setdefault(record.name, set()).add(record.host)
    steps: dict[str, int] = {}
    out = []
    for record in records:
        key = record.name if len(hosts[record.name]) < 2 else f"{record.name}/{record.host}"
        step = steps.get(key, 0)
        steps[key] = step + 1
        out.append((key, record.value, _millis(record.time), step))
    return out


def job_tags(description: dict[str, Any], backend_name: str) -> dict[str, str]:
    """The run's ``smlaunch.*`` tags, from a DescribeTrainingJob description."""
    resources = description.get("ResourceConfig") or {}
    hyperparameters = hp.decode(description.get("HyperParameters") or {})
    model = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    tags = {
        "smlaunch.job_name": description["TrainingJobName"],
        "smlaunch.backend": backend_name,
        "smlaunch.instance_type": str(resources.get("InstanceType", "")),
        "smlaunch.instance_count": str(resources.get("InstanceCount", "")),
        "smlaunch.distribution": Distribution.from_hyperparameters(hyperparameters).strategy.value,
        "smlaunch.status": description["TrainingJobStatus"],
    }
    if model:
        tags["smlaunch.model_artifact"] = model
    return tags


def experiment_id(client: Any) -> str:
    """The id of the experiment runs go to (``$MLFLOW_EXPERIMENT_NAME``, default ``smlaunch``),
    created when missing."""
    experiment_name = os.environ.get(EXPERIMENT_ENV) or DEFAULT_EXPERIMENT
    experiment = client.get_experiment_by_name(experiment_name)
    return str(experiment.experiment_id if experiment else client.create_experiment(experiment_name))


def log_job(
    uri: str,
    description: dict[str, Any],
    records: Sequence[MetricRecord],
    backend_name: str,
    tags: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
) -> str | None:
    """Record the ended job as an MLflow run at ``uri`` (module docstring), with ``tags`` and the
    single-valued ``metrics`` added (a tuning job's trial: its parent run and objective); returns
    its run id, or None when the job was logged before."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(tracking_uri=uri)
    name = description["TrainingJobName"]
    experiment = experiment_id(client)
    if client.search_runs([experiment], filter_string=f"tags.`smlaunch.job_name` = '{name}'", max_results=1):
        return None
    started = _millis(description.get("TrainingStartTime") or description.get("CreationTime"))
    run = client.create_run(
        experiment,
        start_time=started,
        run_name=name,
        tags={**job_tags(description, backend_name), **(tags or {})},
    )
    params = [
        Param(key, value if isinstance(value, str) else json.dumps(value))
        for key, value in sorted(hp.decode(description.get("HyperParameters") or {}).items())
        if not key.startswith("sagemaker_")
    ]
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    logged = [
        Metric(key, value, stamp if stamp is not None else now, step)
        for key, value, stamp, step in metric_series(records)
    ] + [Metric(key, float(value), now, 0) for key, value in (metrics or {}).items()]
    for start in range(0, max(len(logged), 1), 1000):  # log_batch takes at most 1000 metrics
        client.log_batch(
            run.info.run_id, metrics=logged[start : start + 1000], params=params if start == 0 else []
        )
    client.set_terminated(
        run.info.run_id,
        _RUN_STATUS.get(description["TrainingJobStatus"], "FINISHED"),
        end_time=_millis(description.get("TrainingEndTime")),
    )
    return str(run.info.run_id)


def track(session: Any, backend: Any, description: dict[str, Any]) -> None:
    """Log the ended job when tracking is on (see the module docstring); never raises."""
    uri = tracking_uri(session)
    if uri is None:
        return
    try:
        records = backend.metric_records(description["TrainingJobName"])
        log_job(uri, description, records, backend.capabilities.name)
    except ImportError:
        warnings.warn(
            f"{TRACKING_URI_ENV} is set but mlflow is not installed; the job was not logged. "
            f"Fix: pip install 'smlaunch[{EXTRA}]'",
            stacklevel=3,
        )
    except Exception as exc:  # the job's outcome matters more than its record
        warnings.warn(
            f"logging job {description.get('TrainingJobName')} to MLflow at {uri} failed: "
            f"{type(exc).__name__}: {exc}",
            stacklevel=3,
        )
