"""A tuning job's records wherever it runs: a ``LocalSession``'s, ``SlurmSession``'s or
``KubernetesSession``'s job store (:func:`smlaunch.sdk.tuning.platform.store_root`), or SageMaker.

Every reader of a tuning job (the tuner's ``describe``/``stop_tuning_job``, its analytics, the
``smlaunch`` command, MLflow tracking) comes here, so the local store and SageMaker answer in one
shape: DescribeHyperParameterTuningJob, ListTrainingJobsForHyperParameterTuningJob's
``TrainingJobSummaries`` and ListHyperParameterTuningJobs' ``HyperParameterTuningJobSummaries``.
SageMaker is asked with the calls the SageMaker Python SDK makes (the same paging); the local
store is read through :mod:`smlaunch.sdk.tuning.local`. Nothing here starts a tuning job.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from smlaunch.contract import PathEscapeError
from smlaunch.sdk.backends.sagemaker.credentials import aws_errors
from smlaunch.sdk.errors import UnsupportedByBackendError
from smlaunch.sdk.tuning import local, platform

logger = logging.getLogger(__name__)

MAX_PAGES = 100
"""Pages of 100 summaries read at most, as the SDK's ``HyperparameterTuningJobAnalytics``."""

SUMMARY_FIELDS = (
    "HyperParameterTuningJobName",
    "HyperParameterTuningJobArn",
    "HyperParameterTuningJobStatus",
    "Strategy",
    "CreationTime",
    "HyperParameterTuningEndTime",
    "LastModifiedTime",
    "TrainingJobStatusCounters",
    "ObjectiveStatusCounters",
    "ResourceLimits",
)
"""ListHyperParameterTuningJobs' ``HyperParameterTuningJobSummary`` members (botocore's model)."""


def session_for(name: str, session: Any | None = None) -> Any:
    """``session``, else where the tuning job ``name`` is: the default ``LocalSession()``'s store
    when it holds a tuning job of that name, else SageMaker (``Session()``), the rule a training
    job's name follows."""
    if session is not None:
        return session
    from smlaunch.sdk.sessions.local import LocalSession

    here = LocalSession()
    if exists_locally(here.root, name):
        return here
    from smlaunch.sdk.sessions.sagemaker import Session

    return Session()


def exists_locally(root: Path, name: str) -> bool:
    """Whether the local store ``root`` holds a tuning job named ``name``."""
    try:
        return local.tuning_dir(Path(root), name).agent_file.exists()
    except (PathEscapeError, OSError):  # a name that cannot be a tuning job's directory is none
        return False


def _refuse_elsewhere(session: Any) -> None:
    """Tuning jobs are SageMaker's or a job store's: another platform's session has none."""
    if getattr(session, "is_local", False) and not local.in_local_store(session):
        raise UnsupportedByBackendError(*platform.refusal(session))


def describe(session: Any, name: str) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob of ``name``: from the local job store on a ``LocalSession``,
    else from SageMaker."""
    _refuse_elsewhere(session)
    if local.in_local_store(session):
        return local.describe(platform.store_root(session), name)
    with aws_errors(f"describe the tuning job {name}"):
        answer = session.sagemaker_client().describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name
        )
    answer.pop("ResponseMetadata", None)
    return dict(answer)


def training_job_summaries(session: Any, name: str) -> list[dict[str, Any]]:
    """Every trial of ``name`` as ListTrainingJobsForHyperParameterTuningJob summarises it, paged
    as the SDK pages it (100 a page, 100 pages at most)."""
    _refuse_elsewhere(session)
    if local.in_local_store(session):
        return local.training_job_summaries(platform.store_root(session), name)
    client = session.sagemaker_client()
    summaries: list[dict[str, Any]] = []
    paging: dict[str, str] = {}
    for _ in range(MAX_PAGES):
        with aws_errors(f"list the training jobs of the tuning job {name}"):
            page = client.list_training_jobs_for_hyper_parameter_tuning_job(
                HyperParameterTuningJobName=name, MaxResults=100, **paging
            )
        new = page["TrainingJobSummaries"]
        summaries.extend(new)
        if "NextToken" not in page or not new:
            break
        paging["NextToken"] = page["NextToken"]
    return summaries


def stop(session: Any, name: str) -> bool:
    """Stop the tuning job ``name`` and its running trials; False when it had already ended (it is
    left as is)."""
    _refuse_elsewhere(session)
    if local.in_local_store(session):
        if describe(session, name)["HyperParameterTuningJobStatus"] in local.TERMINAL:
            return False
        local.stop(platform.store_root(session), name)
        return True
    try:
        with aws_errors(f"stop the tuning job {name}"):
            session.sagemaker_client().stop_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ValidationException":
            raise
        logger.info("Tuning job %s is already stopped or not running", name)
        return False
    return True


def local_tuning_jobs(root: Path) -> list[dict[str, Any]]:
    """ListHyperParameterTuningJobs' summaries of the local store ``root``'s tuning jobs, newest
    first."""
    root = Path(root).expanduser()
    names = sorted(path.parent.name for path in (root / local.TUNING_DIR).glob("*/agent.json"))
    return newest_first([summary(local.describe(root, name)) for name in names])


def sagemaker_tuning_jobs(session: Any, status: str | None, limit: int) -> list[dict[str, Any]]:
    """ListHyperParameterTuningJobs' summaries on SageMaker, newest first, ``limit`` at most."""
    arguments: dict[str, Any] = {
        "SortBy": "CreationTime",
        "SortOrder": "Descending",
        "MaxResults": min(limit, 100),
    }
    if status is not None:
        arguments["StatusEquals"] = status
    with aws_errors("list tuning jobs"):
        answer = session.sagemaker_client().list_hyper_parameter_tuning_jobs(**arguments)
    return list(answer["HyperParameterTuningJobSummaries"])[:limit]


def objective(description: dict[str, Any]) -> dict[str, str]:
    """The tuning job's objective (``Type``, ``MetricName``): its config's, or for a tuning job of
    several training job definitions, theirs (the metric names joined when they differ)."""
    config = description.get("HyperParameterTuningJobConfig") or {}
    if config.get("HyperParameterTuningJobObjective"):
        return dict(config["HyperParameterTuningJobObjective"])
    objectives = [d["TuningObjective"] for d in description.get("TrainingJobDefinitions") or []]
    names = list(dict.fromkeys(o["MetricName"] for o in objectives))
    return {"Type": objectives[0]["Type"] if objectives else "Maximize", "MetricName": ", ".join(names)}


def parameter_ranges(description: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every tuned range by name (``<definition name>.<name>`` for a tuning job of several
    training job definitions), each as the wire gives it."""
    config = description.get("HyperParameterTuningJobConfig") or {}
    groups = [("", config.get("ParameterRanges") or {})] + [
        (f"{d['DefinitionName']}.", d.get("HyperParameterRanges") or {})
        for d in description.get("TrainingJobDefinitions") or []
    ]
    return {
        f"{prefix}{parameter['Name']}": parameter
        for prefix, ranges in groups
        for kind in ranges.values()
        for parameter in kind
    }


def summary(description: dict[str, Any]) -> dict[str, Any]:
    """A DescribeHyperParameterTuningJob answer as ListHyperParameterTuningJobs summarises it."""
    config = description.get("HyperParameterTuningJobConfig") or {}
    merged = {
        **description,
        "Strategy": config.get("Strategy"),
        "ResourceLimits": config.get("ResourceLimits"),
    }
    return {key: merged[key] for key in SUMMARY_FIELDS if merged.get(key) is not None}


def newest_first(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``summaries`` sorted by ``CreationTime``, newest first."""
    return sorted(summaries, key=lambda s: s["CreationTime"].timestamp(), reverse=True)
