"""``smlaunch``'s tuning jobs: ``list --tuning``, and ``describe``/``stop`` of a tuning job.

A tuning job is named as a training job is (``JOB``, ``local:NAME``, ``slurm:SHARED_DIR:NAME``,
``kubernetes:NAMESPACE:NAME``, ``sagemaker:NAME``): a bare name is a local tuning job when the
local store holds one of that name and no training job of that name (so is a name at a Slurm
place, in ``<SHARED_DIR>/jobs``, and at a Kubernetes place, in the ``tuning_root`` of
``KubernetesSession(namespace=NAMESPACE)`` when the cluster has no training job of that name);
``--tuning`` says the name is a tuning job's outright (and is how a SageMaker tuning job is named:
``smlaunch describe --tuning --sagemaker NAME``). What is printed has the shapes of
ListHyperParameterTuningJobs and DescribeHyperParameterTuningJob (:mod:`smlaunch.sdk.tuning.records`);
the table of ``list --tuning`` shows name, status, strategy, trials, best objective, start and
duration; ``list --tuning --slurm SHARED_DIR`` lists a Slurm store's, ``list --tuning --kubernetes
NAMESPACE`` the tuning jobs this machine keeps for that namespace (a session's ``tuning_root``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from smlaunch.sdk.cli.output import duration_text, emit, print_columns, started_text, when
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs import jobref
from smlaunch.sdk.tuning import local, platform, records

TERMINAL = local.TERMINAL
STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
"""ListHyperParameterTuningJobs' ``StatusEquals`` values (but ``Deleting``, which local jobs never are)."""
COLUMNS = ("name", "status", "strategy", "trials", "best", "started", "duration")


def tuning_session(ref: jobref.JobRef, args: Any, local_store: Any) -> Any | None:
    """The session holding the tuning job ``ref`` names, when ``describe``/``stop`` act on a tuning
    job (module docstring), else None. ``local_store``: the local session a bare name is looked
    for in."""
    flag = bool(getattr(args, "tuning", False))
    if ref.scheme == jobref.KUBERNETES:
        return _kubernetes_tuning_session(ref, args.session, flag)
    if ref.scheme == jobref.SAGEMAKER or getattr(args, "sagemaker", False):
        return args.session if flag else None
    here = args.session if ref.scheme in (jobref.LOCAL, jobref.SLURM) else local_store
    if records.exists_locally(here.root, ref.name):
        if flag or not os.path.lexists(Path(here.root) / ref.name):
            return here
    if not flag:
        return None
    if ref.scheme in (jobref.LOCAL, jobref.SLURM):
        slurm = ref.scheme == jobref.SLURM
        raise ConfigurationError(
            "JOB",
            ref.name,
            f"no {'Slurm' if slurm else 'local'} tuning job of that name under {here.root}",
            f"smlaunch list --tuning{f' --slurm {ref.store}' if slurm else ''}",
        )
    from smlaunch.sdk.sessions.sagemaker import Session

    args.tuning_looked_in = here.root  # a bare name: SageMaker's failure names both places
    return Session()


def _kubernetes_tuning_session(ref: jobref.JobRef, session: Any, flag: bool) -> Any | None:
    """``session`` (a ``KubernetesSession``) when its ``tuning_root`` holds the tuning job ``ref``
    names and, unless ``flag``, the cluster has no training job of that name; else None, or with
    ``flag`` the error naming where it looked."""
    from smlaunch.sdk.backends.emulated.backend import JobNotFoundError

    root = platform.store_root(session)
    if records.exists_locally(root, ref.name):
        if flag:
            return session
        try:
            session.backend().describe(ref.name)
        except JobNotFoundError:
            return session
        return None
    if not flag:
        return None
    raise ConfigurationError(
        "JOB",
        str(ref),
        f"no Kubernetes tuning job of that name under {root} (a KubernetesSession's tuning jobs are "
        "kept on the machine that started them)",
        f"smlaunch list --tuning --kubernetes {session.namespace}",
    )


def newest_tuning_job(args: Any, local_store: Any) -> str:
    """``--last --tuning``: the most recently created tuning job of the place ``list --tuning``
    would show."""
    if getattr(args, "sagemaker", False):
        from smlaunch.sdk.sessions.sagemaker import Session

        summaries = records.sagemaker_tuning_jobs(Session(), None, 1)
    else:
        summaries = records.local_tuning_jobs(local_store.root)
    if not summaries:
        raise ConfigurationError(
            "--last", True, "there is no tuning job yet", "start one with HyperparameterTuner(...).fit()"
        )
    return str(summaries[0]["HyperParameterTuningJobName"])


def _describe(args: Any) -> dict[str, Any]:
    try:
        return records.describe(args.tuning_session, args.job)
    except ConfigurationError as exc:
        looked_in = getattr(args, "tuning_looked_in", None)
        if looked_in is None:
            raise
        raise jobref.not_found_anywhere(
            "JOB",
            args.job,
            looked_in,
            exc,
            "check the name with `smlaunch list --tuning` (or `smlaunch list --tuning --sagemaker`)",
        ) from None


def tuning_row(description: dict[str, Any]) -> dict[str, Any]:
    """A row of ``list --tuning``'s table for a DescribeHyperParameterTuningJob answer."""
    config = description.get("HyperParameterTuningJobConfig") or {}
    counters = description.get("TrainingJobStatusCounters") or {}
    limit = (config.get("ResourceLimits") or {}).get("MaxNumberOfTrainingJobs")
    started = sum(int(value) for value in counters.values())
    best = (description.get("BestTrainingJob") or {}).get("FinalHyperParameterTuningJobObjectiveMetric")
    timing = {
        "TrainingStartTime": description.get("CreationTime"),
        "TrainingEndTime": description.get("HyperParameterTuningEndTime"),
        "TrainingJobStatus": description["HyperParameterTuningJobStatus"],
    }
    return {
        "name": description["HyperParameterTuningJobName"],
        "status": description["HyperParameterTuningJobStatus"],
        "strategy": config.get("Strategy", "-"),
        "trials": f"{started}/{limit}" if limit else str(started),
        "best": f"{best['MetricName']}={best['Value']:g}" if best else "-",
        "started": started_text(when(description.get("CreationTime"))),
        "duration": duration_text(timing),
    }


def cmd_list_tuning(args: Any, out: TextIO) -> int:
    """``smlaunch list --tuning``: ListHyperParameterTuningJobs' response, or its table."""
    from smlaunch.sdk.backends.emulated.store import STORE_STATUSES

    if args.status in STORE_STATUSES:
        raise ConfigurationError(
            "--status",
            args.status,
            "only local store directories have it",
            f"pass one of {', '.join(STATUSES)}",
        )
    table_wanted = (args.output or args.output_default) == "table" and args.query is None
    if args.sagemaker:
        from smlaunch.sdk.sessions.sagemaker import Session

        session: Any = Session()
        summaries = records.sagemaker_tuning_jobs(session, args.status, args.limit)
        descriptions = (
            [records.describe(session, s["HyperParameterTuningJobName"]) for s in summaries]
            if table_wanted
            else []
        )
    else:
        root = args.local_root
        summaries = records.local_tuning_jobs(root)
        summaries = [s for s in summaries if args.status in (None, s["HyperParameterTuningJobStatus"])]
        summaries = summaries[: args.limit]
        descriptions = [local.describe(root, s["HyperParameterTuningJobName"]) for s in summaries]

    def table(out: TextIO) -> None:
        rows = [tuning_row(description) for description in descriptions]
        print_columns([c.upper() for c in COLUMNS], [[str(row[c]) for c in COLUMNS] for row in rows], out)

    emit({"HyperParameterTuningJobSummaries": summaries}, args, out, table)
    return 0


def cmd_describe_tuning(args: Any, out: TextIO) -> int:
    """DescribeHyperParameterTuningJob's response of the tuning job ``args.job``."""
    emit(_describe(args), args, out)
    return 0


def cmd_stop_tuning(args: Any, out: TextIO) -> int:
    """Stop the tuning job ``args.job`` and its running trials; one that ended is left as is."""
    session = args.tuning_session
    status = _describe(args)["HyperParameterTuningJobStatus"]
    if status in TERMINAL or not records.stop(session, args.job):
        print(f"{args.job} already ended {status}", file=sys.stderr)
        return 0
    print(f"Stopping tuning job {args.job} and its running training jobs", file=sys.stderr)
    return 0
