"""The job commands of ``smlaunch``: run, list, describe, logs, stop, metrics, rm, gc.

Each command is a function ``(args, out) -> exit status`` called by :func:`estimator.cli.main`, which
turns a :class:`~estimator.errors.ConfigurationError` (bad argument, unknown job, refusal) into exit
status 2 and a :class:`~estimator.errors.JobFailedError` into 1 (``run`` exits 1 for a Stopped job too).

Where a job is: ``JOB`` is a name or a job reference (:mod:`estimator.jobref`), found by the rule
``Estimator.attach`` follows: local jobs live under ``$SMLAUNCH_HOME/jobs`` (``LocalSession().root``,
or ``--store DIR``); a bare name not found there is looked up on SageMaker (``Session()``: your AWS
credentials and region). ``--sagemaker`` and ``--slurm SHARED_DIR`` say the place as
``sagemaker:NAME`` and ``slurm:SHARED_DIR:NAME`` do; ``--last`` is the newest job of the place
``list`` shows. ``list`` shows local jobs, or SageMaker's with ``--sagemaker``, or Slurm's with
``--slurm``. ``rm`` and ``gc`` clean the local job store only, and never touch a job that is still
running. Data goes to ``out`` (stdout); status lines to stderr.

Every command acts on the store directory named, never on the job another directory's record names
(:mod:`estimator.backends.local.store`); a store that cannot be read or written (read-only, a file,
permissions) ends a command with ``error: ...`` and status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TextIO

from estimator import jobref
from estimator.errors import ConfigurationError, JobFailedError
from runtime import contract

_AGE_RE = re.compile(r"^(?P<count>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


# --- where a job is -----------------------------------------------------------------------------


def _local_session(args: Any) -> Any:
    from estimator.local_session import LocalSession
    from estimator.slurm_session import SlurmSession

    if getattr(args, "slurm", None):
        return SlurmSession(shared_dir=args.slurm)
    store = getattr(args, "store", None)
    if store and not Path(store).expanduser().exists():
        # A misspelt --store would read as an empty store: nothing listed, nothing to collect.
        raise ConfigurationError(
            "--store",
            store,
            "no such directory",
            "pass an existing job store, or leave --store out for the root setting's",
        )
    return LocalSession(root=store)


def _session_for(job_name: str, args: Any) -> Any:
    """The session :func:`with_job` found for the job (:func:`estimator.jobref.session_for`)."""
    return args.session


def _reference(text: str, args: argparse.Namespace) -> jobref.JobRef:
    """``JOB`` at the place ``--sagemaker`` or ``--slurm`` names (the two must agree); ``--store``
    is the local store a bare name and ``local:NAME`` are looked for in."""
    ref = jobref.parse(text)
    if getattr(args, "sagemaker", False):
        place = jobref.JobRef(ref.name, jobref.SAGEMAKER)
    elif getattr(args, "slurm", None):
        place = jobref.JobRef(ref.name, jobref.SLURM, args.slurm)
    else:
        return ref
    if ref.scheme is not None and ref != place:
        raise ConfigurationError(
            "JOB", text, f"names another place than the flags ({place})", "give the place once"
        )
    return place


def newest_job(args: argparse.Namespace) -> str:
    """``--last``: the most recently created job of the place ``smlaunch list`` would show."""
    if getattr(args, "sagemaker", False):
        from estimator.session import Session

        summaries = Session().list_training_jobs(max_results=1)
        names: list[str] = [summary["TrainingJobName"] for summary in summaries]
    else:
        entries = local_entries(_local_session(args))
        names = [e.name for e in entries if e.description is not None]
    if not names:
        raise ConfigurationError("--last", True, "there is no job yet", "start one with smlaunch run")
    return names[0]


def _job_text(args: argparse.Namespace, text: str | None) -> str:
    if getattr(args, "last", False) == (text is not None):
        raise ConfigurationError(
            "JOB",
            text,
            "give a job or --last, not both or neither",
            f"e.g. smlaunch {getattr(args, 'command', None) or 'describe'} --last",
        )
    if text is None:
        name = newest_job(args)
        print(f"--last: {name}", file=sys.stderr)
        return name
    return text


def with_job(handler: Callable[[Any, Any], int]) -> Callable[[Any, Any], int]:
    """``handler`` for ``JOB`` or ``--last``: sets ``args.job`` to the job's name and ``args.session``
    to where it is (the reference's place, else the local store when it has the job, else SageMaker)."""

    def run(args: argparse.Namespace, out: TextIO) -> int:
        text = _job_text(args, args.job)
        ref = _reference(text, args)
        if ref.scheme == jobref.SAGEMAKER:
            args.sagemaker = True
        args.session = jobref.session_for(ref, default_local=_local_session(args))
        args.job = ref.name
        return handler(args, out)

    return run


def with_jobs(handler: Callable[[Any, Any], int]) -> Callable[[Any, Any], int]:
    """``handler`` for ``JOB...`` or ``--last`` of one local store: ``args.jobs`` as names and
    ``args.store`` as the store a ``local:STORE:NAME`` reference names."""

    def run(args: argparse.Namespace, out: TextIO) -> int:
        names = []
        for text in args.jobs or [None]:
            ref = jobref.parse(_job_text(args, None if args.last and not args.jobs else text))
            if ref.scheme not in (None, jobref.LOCAL) or (ref.store and args.store not in (None, ref.store)):
                raise ConfigurationError(
                    "JOB",
                    text,
                    "rm removes jobs of one local store",
                    "name them as NAME or local:NAME, with --store DIR",
                )
            args.store = ref.store or args.store
            names.append(ref.name)
        args.jobs = names
        return handler(args, out)

    return run


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
        raise ConfigurationError("JOB", job_name, str(exc), "smlaunch list shows local jobs") from None
    except ConfigurationError as exc:
        if getattr(args, "sagemaker", False) or isinstance(backend, LocalBackend):
            raise
        raise jobref.not_found_anywhere(
            "JOB",
            job_name,
            _local_session(args).root,
            exc,
            "check the name with `smlaunch list` (or `smlaunch list --sagemaker`)",
        ) from None


# --- run ----------------------------------------------------------------------------------------


def cmd_run(args: Any, out: TextIO) -> int:
    """Build the estimator from flags (:mod:`estimator.cli_run`) and ``fit()``; print the job's
    name. Exit 1 when the job did not complete; ``--dry-run`` prints the request instead."""
    from estimator import cli_run

    if args.dry_run:
        from estimator.cli import cmd_plan

        return cmd_plan(args, out)
    for flag, given in (("--output", args.output), ("--query", args.query)):
        if given is not None:  # shaping nothing: refused rather than ignored
            raise ConfigurationError(
                flag,
                given,
                "shapes the request --dry-run prints; run prints the job's name",
                f"add --dry-run, or drop {flag}",
            )
    estimator = cli_run.build_estimator(args, cli_run.session(args, dry_run=False))
    try:
        estimator.fit(cli_run.inputs(args), wait=not args.no_wait, job_name=args.job_name)
    finally:
        job = estimator.latest_training_job
        if job is not None:  # the name, even of a job that failed: `smlaunch logs $JOB`
            print(job.name, file=out, flush=True)
    assert job is not None
    if args.no_wait:
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


SUMMARY_FIELDS = (
    "TrainingJobName",
    "TrainingJobArn",
    "CreationTime",
    "TrainingEndTime",
    "LastModifiedTime",
    "TrainingJobStatus",
    "SecondaryStatus",
    "WarmPoolStatus",
    "TrainingPlanArn",
)
"""ListTrainingJobs' ``TrainingJobSummary`` members, as botocore's SageMaker model names them."""


def summary(description: dict[str, Any]) -> dict[str, Any]:
    """A DescribeTrainingJob response as ListTrainingJobs summarises it."""
    return {key: description[key] for key in SUMMARY_FIELDS if description.get(key) is not None}


def cmd_list(args: Any, out: TextIO) -> int:
    """Jobs newest first: ListTrainingJobs' response, or a table of name, status, instance, start,
    duration."""
    from estimator.cli_output import emit, print_columns

    rows: list[dict[str, Any]] | None
    if args.sagemaker:
        from estimator.backends.local.store import STORE_STATUSES
        from estimator.session import Session

        if args.status in STORE_STATUSES:
            raise ConfigurationError(
                "--status", args.status, "only local store directories have it", "drop --sagemaker"
            )
        session = Session()
        summaries = session.list_training_jobs(status=args.status, max_results=args.limit)
        rows = None
        if (args.output or args.output_default) == "table" and args.query is None:
            rows = [_row(session.backend().describe(s["TrainingJobName"])) for s in summaries]
    else:
        entries = local_entries(_local_session(args))
        entries = [e for e in entries if args.status is None or e.status == args.status][: args.limit]
        rows = [_entry_row(e) for e in entries]
        # ListTrainingJobs lists jobs: a store directory that is not one is in the table only
        summaries = [summary(e.description) for e in entries if e.description is not None]

    def table(out: TextIO) -> None:
        columns = ("name", "status", "instance", "started", "duration")
        cells = [[str(row[c]) for c in columns] for row in rows or []]
        print_columns([c.upper() for c in columns], cells, out)
        for row in rows or []:
            if row.get("detail"):
                print(f"{row['name']}: {row['detail']}", file=out)

    emit({"TrainingJobSummaries": summaries}, args, out, table)
    return 0


def cmd_describe(args: Any, out: TextIO) -> int:
    """DescribeTrainingJob's response, as ``--output``/``--query`` ask."""
    from estimator.cli_output import emit

    _, description = describe_job(args.job, args)
    emit(description, args, out)
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


def _check_host_and_rank(job: str, description: dict[str, Any], host: str | None, rank: int | None) -> None:
    """Refuse a ``--host``/``--rank`` the job does not have (else the filter prints nothing and exits
    0, as if the host had been silent). Ranks are known once every host's runtime wrote its plan
    (``HostTopology``); before that, or on SageMaker, ``--rank`` is taken as given."""
    from estimator.backends.status import instance_count

    hosts = [f"algo-{index}" for index in range(1, instance_count(description) + 1)]
    if host is not None and host not in hosts:
        raise ConfigurationError(
            "--host",
            host,
            f"{job} has no such host (its hosts: {', '.join(hosts)})",
            f"pass e.g. --host {hosts[-1]}",
        )
    plans = description.get("HostTopology") or {}
    if rank is None or sorted(plans) != sorted(hosts):
        return
    ranks = {
        int(label.partition("rank ")[2])
        for name, plan in plans.items()
        if host is None or name == host
        for label in (process.get("label", "") for process in plan.get("processes") or [])
        if label.startswith("rank ") and label.partition("rank ")[2].isdigit()
    }
    if ranks and rank not in ranks:
        where = f" on {host}" if host is not None else ""
        low, high = min(ranks), max(ranks)
        span = str(low) if low == high else f"{low}-{high}"
        raise ConfigurationError(
            "--rank",
            rank,
            f"{job} has no rank {rank}{where} (its ranks{where}: {span})",
            f"pass --rank {low}" if low == high else f"pass a rank from {low} to {high}",
        )


def cmd_logs(args: Any, out: TextIO) -> int:
    backend, description = describe_job(args.job, args)
    _check_host_and_rank(args.job, description, args.host, args.rank)
    for line in backend.log_lines(args.job, follow=args.follow):
        if _wanted(line, args.host, args.rank):
            print(line, file=out, flush=True)
    return 0


def cmd_stop(args: Any, out: TextIO) -> int:
    backend, description = describe_job(args.job, args)
    status = description["TrainingJobStatus"]
    if status in contract.TERMINAL_STATUSES:
        print(f"{args.job} already ended {status}", file=sys.stderr)
        return 0
    backend.stop(args.job)
    print(f"Stopping {args.job}", file=sys.stderr)
    return 0


# --- metrics ------------------------------------------------------------------------------------


def cmd_metrics(args: Any, out: TextIO) -> int:
    """The job's metric values (``TrainingJobAnalytics``); a ``--metric`` the job does not define
    exits 2 naming those it does."""
    from estimator.analytics import TrainingJobAnalytics
    from estimator.cli_output import emit

    _, description = describe_job(args.job, args)  # a clear exit 2 for an unknown job
    session = _session_for(args.job, args)
    defined = TrainingJobAnalytics(args.job, sagemaker_session=session).metric_names
    if args.plot and not defined:
        raise ConfigurationError(
            "--plot",
            args.plot,
            f"{args.job} defines no metrics, so there is nothing to plot",
            "define them when the job is started: smlaunch run --metric NAME=REGEX",
        )
    unknown = [name for name in args.metric or [] if name not in defined]
    if unknown:
        raise ConfigurationError(
            "--metric",
            unknown[0],
            f"{args.job} defines no such metric (its metrics: {', '.join(defined) or 'none'})",
            f"pass one of them, e.g. --metric {defined[0]!r}" if defined else "drop --metric",
        )
    analytics = TrainingJobAnalytics(args.job, metric_names=args.metric or None, sagemaker_session=session)
    frame = analytics.dataframe()

    def table(out: TextIO) -> None:
        if frame.empty:
            ended = description.get("TrainingJobStatus") in contract.TERMINAL_STATUSES
            if not defined:
                why = "it defines no metrics; smlaunch run --metric NAME=REGEX defines them"
            else:
                why = f"its metrics: {', '.join(defined)}"
            print(f"no metric values{'' if ended else ' yet'} for {args.job} ({why})", file=sys.stderr)
        else:
            print(frame.to_string(index=False), file=out)

    emit(frame.to_dict(orient="records"), args, out, table)
    if args.plot:
        analytics.plot(args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
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
