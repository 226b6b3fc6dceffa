"""The job commands of ``smlaunch``: run, list, describe, logs, stop, metrics, rm, gc.

Each command is a function ``(args, out) -> exit status`` called by :func:`estimator.cli.main`, which
turns a :class:`~estimator.errors.ConfigurationError` (bad argument, unknown job, refusal) into exit
status 2 and a :class:`~estimator.errors.JobFailedError` into 1 (``run`` exits 1 for a Stopped job too).

Where a job is: local jobs live under ``$SMLAUNCH_HOME/jobs`` (``LocalSession().root``); a job name
not found there, or any name with ``--sagemaker``, is looked up on SageMaker (``Session()``: your AWS
credentials and region); with ``--slurm SHARED_DIR``, on a Slurm cluster
(``SlurmSession(shared_dir=SHARED_DIR)``). ``list`` shows local jobs, or SageMaker's with
``--sagemaker``, or Slurm's with ``--slurm``. ``rm`` and
``gc`` clean the local job store only, and never touch a job that is still running.

Every command acts on the store directory named, never on the job another directory's record names
(:mod:`estimator.backends.local.store`); a store that cannot be read or written (read-only, a file,
permissions) ends a command with ``error: ...`` and status 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO

from estimator.errors import ConfigurationError, JobFailedError
from runtime import contract

DISTRIBUTIONS: dict[str, dict[str, Any]] = {
    "torch_distributed": {"torch_distributed": {"enabled": True}},
    "pytorchddp": {"pytorchddp": {"enabled": True}},
    "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}},
    "mpi": {"mpi": {"enabled": True}},
    "smp": {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}},
        "mpi": {"enabled": True},
    },
}
"""``--distribution`` names and the ``distribution=`` each stands for (JSON gives any other)."""
_AGE_RE = re.compile(r"^(?P<count>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


# --- where a job is -----------------------------------------------------------------------------


def _local_session(args: Any) -> Any:
    from estimator.local_session import LocalSession
    from estimator.slurm_session import SlurmSession

    if getattr(args, "slurm", None):
        return SlurmSession(shared_dir=args.slurm)
    return LocalSession(executor="docker" if getattr(args, "docker", False) else None)


def _session_for(job_name: str, args: Any) -> Any:
    """``--slurm``'s SlurmSession, else the session that knows the job: local when the job store
    has a directory of that name (a job, or a claim, a damaged record, a copy: each explained by the
    local backend), else SageMaker."""
    from estimator.session import session_for_job

    sagemaker = bool(getattr(args, "sagemaker", False))
    if getattr(args, "slurm", None):
        return _local_session(args)
    local = _local_session(args)
    if not sagemaker and os.path.lexists(local.root / job_name):
        return local
    return session_for_job(job_name, sagemaker=sagemaker)


def _backend_for(job_name: str, args: Any) -> Any:
    return _session_for(job_name, args).backend()


def describe_job(job_name: str, args: Any) -> tuple[Any, dict[str, Any]]:
    """The backend that knows ``job_name`` and its description; unknown names exit 2 naming both
    places looked in."""
    from estimator.backends.local.backend import JobNotFoundError, LocalBackend

    backend = _backend_for(job_name, args)
    try:
        return backend, backend.describe(job_name)
    except JobNotFoundError as exc:
        raise ConfigurationError(
            "JOB", job_name, str(exc).strip('"'), "smlaunch list shows local jobs"
        ) from None
    except ConfigurationError as exc:
        if getattr(args, "sagemaker", False) or isinstance(backend, LocalBackend):
            raise
        root = _local_session(args).root
        raise ConfigurationError(
            "JOB",
            job_name,
            f"no local job of that name under {root}, and on SageMaker: {exc.problem}",
            "check the name with `smlaunch list` (or `smlaunch list --sagemaker`)",
        ) from None


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def print_json(data: Any, out: TextIO) -> None:
    print(json.dumps(data, indent=2, default=_json_default), file=out)


# --- run ----------------------------------------------------------------------------------------


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(flag, item, "expected KEY=VALUE", f"pass e.g. {flag} epochs=10")
        pairs[key] = value
    return pairs


def _hp_value(text: str) -> Any:
    # --hp epochs=10 is the number 10, --hp lr=3e-5 a float, --hp name=resnet a string (as in a notebook).
    try:
        return json.loads(text)
    except ValueError:
        return text


def _distribution(text: str | None, processes_per_host: int | None) -> dict[str, Any] | None:
    if text is None:
        return None
    if text.lstrip().startswith("{"):
        from estimator.cli import _json_arg

        parsed: dict[str, Any] = _json_arg(text, "--distribution")  # JSON text that starts with "{"
        return parsed
    if text not in DISTRIBUTIONS:
        raise ConfigurationError(
            "--distribution",
            text,
            "unknown distribution",
            f"use one of {sorted(DISTRIBUTIONS)} or a JSON object",
        )
    distribution: dict[str, Any] = json.loads(json.dumps(DISTRIBUTIONS[text]))
    if "mpi" in distribution and processes_per_host:
        distribution["mpi"]["processes_per_host"] = processes_per_host
    return distribution


def cmd_run(args: Any, out: TextIO) -> int:
    """Build the estimator from flags, ``fit()``; exit 1 when the job did not complete."""
    from estimator.local_session import LocalSession
    from estimator.pytorch import PyTorch
    from estimator.session import Session

    if args.sagemaker:
        if not args.instance_type:
            raise ConfigurationError(
                "--instance-type",
                None,
                "SageMaker needs an instance type",
                "pass e.g. --instance-type ml.g5.xlarge",
            )
        session: Any = Session()
    else:
        session = LocalSession(
            processes_per_host=args.processes_per_host, executor="docker" if args.docker else None
        )
    metrics = _pairs(args.metric, "--metric")
    estimator = PyTorch(
        entry_point=args.entry_point,
        source_dir=args.source_dir,
        role=args.role,
        instance_type=args.instance_type or contract.LOCAL_INSTANCE_TYPE,
        instance_count=args.instance_count,
        framework_version=None if args.image_uri else args.framework_version,
        py_version=None if args.image_uri else args.py_version,
        image_uri=args.image_uri,
        hyperparameters={k: _hp_value(v) for k, v in _pairs(args.hp, "--hp").items()} or None,
        distribution=_distribution(args.distribution, args.processes_per_host),
        metric_definitions=[{"Name": k, "Regex": v} for k, v in metrics.items()] or None,
        output_path=args.output_path,
        base_job_name=args.base_job_name,
        max_run=args.max_run,
        sagemaker_session=session,
    )
    inputs = _pairs(args.input, "--input") or None
    estimator.fit(inputs, wait=not args.no_wait, job_name=args.job_name)  # JobFailedError: exit 1
    job = estimator.latest_training_job
    assert job is not None
    if args.no_wait:
        print(job.name, file=out)
        return 0
    description = job.describe()
    if description["TrainingJobStatus"] == contract.STATUS_STOPPED:
        # fit() only warns about a Stopped job, as the SDK does; a shell script needs a status.
        raise JobFailedError(
            job.name,
            contract.STATUS_STOPPED,
            description.get("FailureReason") or description.get("SecondaryStatus") or "",
            allowed_statuses=(contract.STATUS_COMPLETED,),
        )
    return 0


# --- list / describe ----------------------------------------------------------------------------


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None


def _duration(description: dict[str, Any]) -> str:
    start = _when(description.get("TrainingStartTime")) or _when(description.get("CreationTime"))
    end = _when(description.get("TrainingEndTime")) or (
        None
        if description.get("TrainingJobStatus") == contract.STATUS_IN_PROGRESS
        else _when(description.get("LastModifiedTime"))
    )
    if start is None:
        return "-"
    seconds = int(((end or datetime.now(timezone.utc)) - start).total_seconds())
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _started_text(started: datetime | None) -> str:
    return started.astimezone().strftime("%Y-%m-%d %H:%M:%S") if started else "-"


def _row(description: dict[str, Any]) -> dict[str, Any]:
    resources = description.get("ResourceConfig") or {}
    started = _when(description.get("TrainingStartTime")) or _when(description.get("CreationTime"))
    return {
        "name": description["TrainingJobName"],
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus"),
        "instance": f"{resources.get('InstanceType', '?')} x {resources.get('InstanceCount', '?')}",
        "started": _started_text(started),
        "duration": _duration(description),
    }


def _entry_row(entry: Any) -> dict[str, Any]:
    """A row for a local store entry: a job's, or a Claimed/Abandoned/Damaged/Foreign directory's
    (with ``detail``: why it is not a job)."""
    if entry.description is not None:
        return _row(entry.description)
    return {
        "name": entry.name,
        "status": entry.status,
        "secondary_status": None,
        "instance": "-",
        "started": _started_text(_when(entry.created)),
        "duration": "-",
        "detail": entry.detail,
    }


def local_entries(session: Any) -> list[Any]:
    """Every directory of the local job store (:meth:`LocalBackend.entries
    <estimator.backends.local.backend.LocalBackend.entries>`), newest first."""
    entries = list(session.backend().entries())
    epoch = datetime.fromtimestamp(0, tz=timezone.utc)
    entries.sort(key=lambda e: _when(e.created) or epoch, reverse=True)
    return entries


def cmd_list(args: Any, out: TextIO) -> int:
    if args.sagemaker:
        from estimator.backends.local.store import STORE_STATUSES
        from estimator.session import Session

        if args.status in STORE_STATUSES:
            raise ConfigurationError(
                "--status", args.status, "only local store directories have it", "drop --sagemaker"
            )
        session = Session()
        summaries = session.list_training_jobs(status=args.status, max_results=args.limit)
        descriptions = [session.backend().describe(s["TrainingJobName"]) for s in summaries]
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        descriptions.sort(key=lambda d: _when(d.get("CreationTime")) or epoch, reverse=True)
        rows = [_row(d) for d in descriptions[: args.limit]]
    else:
        entries = local_entries(_local_session(args))
        rows = [_entry_row(e) for e in entries if args.status is None or e.status == args.status]
        rows = rows[: args.limit]
    if args.json:
        print_json(rows, out)
        return 0
    columns = ("name", "status", "instance", "started", "duration")
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip(), file=out)
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip(), file=out)
    for row in rows:
        if row.get("detail"):
            print(f"{row['name']}: {row['detail']}", file=out)
    return 0


def cmd_describe(args: Any, out: TextIO) -> int:
    _, description = describe_job(args.job, args)
    print_json(description, out)
    return 0


# --- logs / stop --------------------------------------------------------------------------------


def _wanted(line: str, host: str | None, rank: int | None) -> bool:
    from estimator.metrics import split_prefix

    if host is None and rank is None:
        return True
    source, _ = split_prefix(line)
    if source is None:
        return False
    name, _, rank_text = source.partition("/rank ")
    if host is not None and name != host:
        return False
    return rank is None or rank_text == str(rank)


def cmd_logs(args: Any, out: TextIO) -> int:
    backend, _ = describe_job(args.job, args)
    for line in backend.log_lines(args.job, follow=args.follow):
        if _wanted(line, args.host, args.rank):
            print(line, file=out, flush=True)
    return 0


def cmd_stop(args: Any, out: TextIO) -> int:
    backend, description = describe_job(args.job, args)
    status = description["TrainingJobStatus"]
    if status in contract.TERMINAL_STATUSES:
        print(f"{args.job} already ended {status}", file=out)
        return 0
    backend.stop(args.job)
    print(f"Stopping {args.job}", file=out)
    return 0


# --- metrics ------------------------------------------------------------------------------------


def cmd_metrics(args: Any, out: TextIO) -> int:
    from estimator.analytics import TrainingJobAnalytics

    describe_job(args.job, args)  # a clear exit 2 for an unknown job
    analytics = TrainingJobAnalytics(
        args.job, metric_names=args.metric or None, sagemaker_session=_session_for(args.job, args)
    )
    frame = analytics.dataframe()
    if args.json:
        print(frame.to_json(orient="records"), file=out)
    elif frame.empty:
        print(
            f"no metric values yet for {args.job} (metrics: {', '.join(analytics.metric_names) or 'none'})",
            file=out,
        )
    else:
        print(frame.to_string(index=False), file=out)
    if args.plot:
        analytics.plot(args.plot)
        print(f"wrote {args.plot}", file=out)
    return 0


# --- rm / gc ------------------------------------------------------------------------------------


def parse_age(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` as a timedelta."""
    match = _AGE_RE.match(text.strip())
    if match is None:
        raise ConfigurationError(
            "--older-than", text, "not an age", "pass a number and a unit: 7d, 12h, 30m, 2w"
        )
    return timedelta(seconds=float(match.group("count")) * _AGE_UNITS[match.group("unit")])


def _refusal(entry: Any) -> tuple[str, str] | None:
    """Why ``smlaunch rm`` leaves the store entry alone, and what to do (None: it may go)."""
    from estimator.backends.local import store

    if entry.status == store.FOREIGN:
        return entry.detail, f"name the job itself, or delete the copy yourself (rm -r {entry.path})"
    if entry.status == store.CLAIMED:
        return f"is {store.CLAIMED}: {entry.detail}", "wait for the submit to finish, or stop its submitter"
    if entry.running and entry.status == store.DAMAGED:
        return f"{entry.detail}, and its agent still runs", "wait for the job to end, then remove it"
    if entry.running:
        return f"is still running ({entry.status})", f"stop it first: smlaunch stop {entry.name}"
    return None


def _remove(entry: Any, out: TextIO, err: TextIO) -> bool:
    """Delete the entry's directory; False (and why on ``err``) when the store does not allow it."""
    from estimator.backends.local import store

    try:
        store.remove_tree(entry.path)
    except OSError as exc:
        where = exc.filename or entry.path
        print(f"error: cannot remove {entry.name}: {exc.strerror or exc}: {where}", file=err)
        return False
    print(f"removed {entry.name}", file=out)
    return True


def cmd_rm(args: Any, out: TextIO) -> int:
    """Delete the named directories of the local store (ended jobs, Abandoned claims, Damaged
    records); refuses running jobs, live claims and copies of other jobs, before removing any."""
    from estimator.backends.local.backend import JobNotFoundError

    session = _local_session(args)
    backend = session.backend()
    entries = []
    for name in args.jobs:  # check every name before removing any
        try:
            entry = backend.entry(name)
        except JobNotFoundError:
            raise ConfigurationError(
                "JOB",
                name,
                f"no local job of that name under {session.root}",
                "smlaunch list shows local jobs; SageMaker keeps its jobs' records "
                "itself and cannot delete them",
            ) from None
        refusal = _refusal(entry)
        if refusal is not None:
            raise ConfigurationError("JOB", name, *refusal)
        entries.append(entry)
    removed = [_remove(entry, out, sys.stderr) for entry in entries]
    return 0 if all(removed) else 2


def cmd_gc(args: Any, out: TextIO) -> int:
    """Delete ended jobs older than ``--older-than``, Abandoned claims and what interrupted removals
    left; running jobs, live claims, Damaged records and copies stay."""
    from estimator.backends.local import store

    session = _local_session(args)
    retention = args.older_than or session.settings.retention
    age = parse_age(retention)
    cutoff = datetime.now(timezone.utc) - age
    kept_running = kept_damaged = removed = failed = 0
    for entry in local_entries(session):
        if entry.running or entry.status in (store.CLAIMED, store.FOREIGN):
            kept_running += entry.status != store.FOREIGN
            continue
        if entry.status == store.DAMAGED:
            kept_damaged += 1
            continue
        if entry.status != store.ABANDONED:
            description = entry.description
            ended = (
                _when(description.get("TrainingEndTime"))
                or _when(description.get("LastModifiedTime"))
                or _when(description.get("CreationTime"))
            )
            if ended is None or ended > cutoff:
                continue
        if args.dry_run:
            print(f"would remove {entry.name}", file=out)
        elif not _remove(entry, out, sys.stderr):
            failed += 1
            continue
        removed += 1
    if not args.dry_run:
        for leftover in store.leftovers(session.root):
            shutil.rmtree(leftover, ignore_errors=True)
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"gc: {verb} {removed} job(s) ended more than {retention} ago or "
        f"abandoned under {session.root}; kept {kept_running} running",
        file=out,
    )
    if kept_damaged:
        print(f"gc: kept {kept_damaged} damaged (smlaunch list shows why; smlaunch rm removes one)", file=out)
    if failed:
        print(f"gc: could not remove {failed}", file=sys.stderr)
    return 2 if failed else 0
