"""The job commands of ``smlaunch``: run, list, describe, logs, stop, metrics, rm, gc.

Each command is a function ``(args, out) -> exit status`` called by :func:`smlaunch.sdk.cli.main.main`, which
turns a :class:`~smlaunch.sdk.errors.ConfigurationError` (bad argument, unknown job, refusal) into exit
status 2 and a :class:`~smlaunch.sdk.errors.JobFailedError` into 1 (``run`` exits 1 for a Stopped job too).

Where a job is (``JOB``, ``--last``, ``--sagemaker``, ``--slurm``, ``--store``) is found by
:mod:`smlaunch.sdk.cli.lookup` before a command runs; its rows and output are shaped by
:mod:`smlaunch.sdk.cli.output`. ``list`` shows local jobs, or SageMaker's with ``--sagemaker``, or
Slurm's with ``--slurm``. ``rm`` and ``gc`` clean the local job store only, and never touch a job
that is still running. Data goes to ``out`` (stdout); status lines to stderr.

Every command acts on the store directory named, never on the job another directory's record names
(:mod:`smlaunch.sdk.backends.emulated.store`); a store that cannot be read or written (read-only, a file,
permissions) ends a command with ``error: ...`` and status 2, never a traceback.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from smlaunch import contract
from smlaunch.sdk.cli.lookup import describe_job, local_entries, local_session
from smlaunch.sdk.cli.output import entry_row, job_row, summary, when
from smlaunch.sdk.errors import ConfigurationError, JobFailedError
from smlaunch.sdk.sessions.settings import parse_age

# --- run ----------------------------------------------------------------------------------------


def cmd_plan(args: Any, out: TextIO) -> int:
    """``smlaunch plan`` and ``smlaunch run --dry-run``: the request, printed as asked."""
    from smlaunch.sdk.cli.output import emit
    from smlaunch.sdk.cli.run import plan_request

    emit(plan_request(args), args, out)
    return 0


def cmd_run(args: Any, out: TextIO) -> int:
    """Build the estimator from flags (:mod:`smlaunch.sdk.cli.run`) and ``fit()``; print the job's
    name. Exit 1 when the job did not complete; ``--dry-run`` prints the request instead."""
    from smlaunch.sdk.cli import run as cli_run

    if args.dry_run:
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


def cmd_list(args: Any, out: TextIO) -> int:
    """Jobs newest first: ListTrainingJobs' response, or a table of name, status, instance, start,
    duration."""
    from smlaunch.sdk.cli.output import emit, print_columns

    if args.kubernetes and (args.sagemaker or args.slurm or args.store):
        raise ConfigurationError(
            "--kubernetes",
            args.kubernetes,
            "names another place than --sagemaker, --slurm or --store",
            "give one place",
        )
    if args.tuning:
        from smlaunch.sdk.cli.tuning import cmd_list_tuning

        if args.kubernetes:  # the tuning jobs this machine started there (docs/tuning.md)
            from smlaunch.sdk.sessions.kubernetes import KubernetesSession

            args.local_root = KubernetesSession(namespace=args.kubernetes).tuning_root
        else:
            args.local_root = None if args.sagemaker else local_session(args).root
        return cmd_list_tuning(args, out)
    rows: list[dict[str, Any]] | None
    if args.kubernetes:
        from smlaunch.sdk.backends.emulated.store import STORE_STATUSES
        from smlaunch.sdk.sessions.kubernetes import KubernetesSession

        if args.status in STORE_STATUSES:
            raise ConfigurationError(
                "--status", args.status, "only local store directories have it", "drop --kubernetes"
            )
        cluster = KubernetesSession(namespace=args.kubernetes)
        described = cluster.backend().list_jobs()  # type: ignore[attr-defined]
        described = [d for d in described if args.status is None or d["TrainingJobStatus"] == args.status]
        described = described[: args.limit]
        trials = _kubernetes_trials(cluster)
        rows = [job_row(d, trials.get(d["TrainingJobName"])) for d in described]
        summaries = [summary(d) for d in described]
    elif args.sagemaker:
        from smlaunch.sdk.backends.emulated.store import STORE_STATUSES
        from smlaunch.sdk.sessions.sagemaker import Session

        if args.status in STORE_STATUSES:
            raise ConfigurationError(
                "--status", args.status, "only local store directories have it", "drop --sagemaker"
            )
        session = Session()
        summaries = session.list_training_jobs(status=args.status, max_results=args.limit)
        rows = None
        if (args.output or args.output_default) == "table" and args.query is None:
            rows = [job_row(session.backend().describe(s["TrainingJobName"])) for s in summaries]
    else:
        from smlaunch.sdk.tuning.trials import trials_of_store

        session = local_session(args)
        entries = local_entries(session)
        entries = [e for e in entries if args.status is None or e.status == args.status][: args.limit]
        tuning_jobs = trials_of_store(session.root)
        rows = [entry_row(e, tuning_jobs.get(e.name)) for e in entries]
        # ListTrainingJobs lists jobs: a store directory that is not one is in the table only
        summaries = [summary(e.description) for e in entries if e.description is not None]

    def table(out: TextIO) -> None:
        columns: tuple[str, ...] = ("name", "status", "instance", "started", "duration")
        if any(row["tuning_job"] != "-" for row in rows or []):  # trials: the tuning job beside each
            columns += ("tuning_job",)
        cells = [[str(row[c]) for c in columns] for row in rows or []]
        print_columns([c.upper() for c in columns], cells, out)
        for row in rows or []:
            if row.get("detail"):
                print(f"{row['name']}: {row['detail']}", file=out)

    emit({"TrainingJobSummaries": summaries}, args, out, table)
    return 0


def _kubernetes_trials(session: Any) -> dict[str, str]:
    """The trials of the tuning jobs this machine keeps for a ``KubernetesSession`` -> their tuning
    job; none where it cannot say where they are kept (no kubeconfig context)."""
    from smlaunch.sdk.tuning.trials import trials_of_store

    try:
        return trials_of_store(session.tuning_root)
    except ConfigurationError:
        return {}


def cmd_describe(args: Any, out: TextIO) -> int:
    """DescribeTrainingJob's response, as ``--output``/``--query`` ask."""
    from smlaunch.sdk.cli.output import emit

    if args.tuning_session is not None:
        from smlaunch.sdk.cli.tuning import cmd_describe_tuning

        return cmd_describe_tuning(args, out)
    _, description = describe_job(args.job, args)
    emit(description, args, out)
    return 0


# --- logs / stop --------------------------------------------------------------------------------


def _wanted(line: str, host: str | None, rank: int | None) -> bool:
    from smlaunch.sdk.jobs.metrics import split_prefix

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
    from smlaunch.sdk.backends.status import instance_count

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
    if args.tuning_session is not None:
        from smlaunch.sdk.cli.tuning import cmd_stop_tuning

        return cmd_stop_tuning(args, out)
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
    from smlaunch.sdk.cli.output import emit
    from smlaunch.sdk.jobs.analytics import TrainingJobAnalytics

    _, description = describe_job(args.job, args)  # a clear exit 2 for an unknown job
    session = args.session
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


def _refusal(entry: Any) -> tuple[str, str] | None:
    """Why ``smlaunch rm`` leaves the store entry alone, and what to do (None: it may go)."""
    from smlaunch.sdk.backends.emulated import store

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
    from smlaunch.sdk.backends.emulated import store

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
    from smlaunch.sdk.backends.emulated.backend import JobNotFoundError

    if args.kubernetes is not None:
        return _rm_kubernetes(args, out)
    session = local_session(args)
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


def _rm_kubernetes(args: Any, out: TextIO) -> int:
    """``rm kubernetes:NAMESPACE:NAME...``: every job must exist and have ended before any record
    goes (``KubernetesBackend.remove``)."""
    from smlaunch.sdk.backends.emulated.backend import JobNotFoundError
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession

    backend: Any = KubernetesSession(namespace=args.kubernetes).backend()
    for name in args.jobs:
        try:
            status = backend.describe(name)["TrainingJobStatus"]
        except JobNotFoundError as exc:
            raise ConfigurationError(
                "JOB", name, str(exc), f"smlaunch list --kubernetes {args.kubernetes} shows its jobs"
            ) from None
        if status not in contract.TERMINAL_STATUSES:
            raise ConfigurationError(
                "JOB",
                name,
                f"is still running ({status})",
                f"stop it first: smlaunch stop kubernetes:{args.kubernetes}:{name}",
            )
    for name in args.jobs:
        backend.remove(name)
        print(f"removed kubernetes:{args.kubernetes}:{name}", file=out)
    return 0


def cmd_gc(args: Any, out: TextIO) -> int:
    """Delete ended jobs older than ``--older-than``, Abandoned claims and what interrupted removals
    left; running jobs, live claims, Damaged records and copies stay."""
    from smlaunch.sdk.backends.emulated import store

    session = local_session(args)
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
                when(description.get("TrainingEndTime"))
                or when(description.get("LastModifiedTime"))
                or when(description.get("CreationTime"))
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
