"""``smlaunch``: run, watch, measure, stop and clean training jobs from a terminal; dry-run requests.

Commands (``smlaunch COMMAND --help`` for each): ``run``, ``list``, ``describe``, ``logs``, ``stop``,
``metrics``, ``rm``, ``gc`` (implemented in :mod:`smlaunch.sdk.cli.jobs`), ``plan`` and ``serve`` (the
training service with SageMaker's API, :mod:`smlaunch.serve`).

As the AWS CLI: the data a command answers with (a job name, JSON, a table, log lines) goes to stdout
and everything else (progress, status lines, warnings, errors) to stderr, so ``JOB=$(smlaunch run
--no-wait train.py)`` holds the job name; the read commands take ``--output json|table|text`` and
``--query JMESPATH`` (:mod:`smlaunch.sdk.cli.output`). ``run`` and ``plan`` take the same flags
(:mod:`smlaunch.sdk.cli.run`); ``plan`` (= ``run --dry-run``) prints the CreateTrainingJob request
without starting anything or calling AWS. Wherever a job is named, a job reference
(:mod:`smlaunch.sdk.jobs.jobref`: ``local:NAME``, ``slurm:SHARED_DIR:NAME``,
``kubernetes:NAMESPACE:NAME``, ``sagemaker:NAME``) or
``--last`` (the newest job) may be given instead. Tuning jobs (:mod:`smlaunch.sdk.cli.tuning`):
``list --tuning`` lists them, ``describe`` and ``stop`` take one by name (``--tuning`` to say so).

    smlaunch plan train.py --source-dir src --sagemaker --instance-type ml.p3.16xlarge \\
        --instance-count 2 --hp epochs=10 --distribution torch_distributed --input train=s3://bucket/train
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, TextIO

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError, JobFailedError, SmlaunchError

EXIT_STATUS = """exit status:
  0    success
  1    the job `smlaunch run` ran did not complete (it ended Failed or Stopped)
  2    a usage error, an unknown job or metric, or a refusal (`error: <field>=<value>: <problem>.
       Fix: ...` on stderr)
  130  interrupted (Ctrl-C)"""
"""The ``--help`` epilog of every command: one meaning per status, whatever the command."""


def _job_commands(commands: Any) -> None:
    """``run``, ``list``, ``describe``, ``logs``, ``stop``, ``metrics``, ``rm``, ``gc``."""
    from smlaunch.sdk.backends.emulated.store import STORE_STATUSES
    from smlaunch.sdk.cli import jobs as cli_jobs
    from smlaunch.sdk.cli import run as cli_run
    from smlaunch.sdk.cli.lookup import with_job, with_jobs
    from smlaunch.sdk.cli.output import add_output_arguments

    def where(command: argparse.ArgumentParser, what: str) -> None:
        """``--sagemaker``, ``--slurm`` and ``--store``: which place ``what`` refers to."""
        command.add_argument("--sagemaker", action="store_true", help=f"{what} on SageMaker")
        command.add_argument(
            "--slurm",
            metavar="SHARED_DIR",
            help=f"{what} on a Slurm cluster: SlurmSession(shared_dir=SHARED_DIR)",
        )
        command.add_argument(
            "--store",
            metavar="DIR",
            help=f"{what} in this local job store (default: the root setting, ~/.smlaunch/jobs)",
        )

    def on_job(name: str, handler: Any, summary: str, description: str) -> argparse.ArgumentParser:
        """A command about one job: ``JOB`` (a name or a reference) or ``--last``."""
        command: argparse.ArgumentParser = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=f"JOB: {JOB_HELP}\n\n{EXIT_STATUS}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_argument("job", metavar="JOB", nargs="?")
        command.add_argument("--last", action="store_true", help="the most recently created job")
        where(command, "the job is")
        command.set_defaults(handler=with_job(handler))
        return command

    run = commands.add_parser(
        "run",
        help="start a training job (the notebook cell as a command)",
        description="Build a PyTorch estimator from the flags and fit() it: on this machine by default, "
        "in Docker with --docker, on SageMaker with --sagemaker. Prints the job name on stdout (the "
        "job's progress and logs go to stderr); waits until the job ends unless --no-wait. --dry-run "
        "prints what `smlaunch plan` prints.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli_run.add_estimator_arguments(run)
    run.add_argument("--no-wait", action="store_true", help="return once the job is created")
    run.add_argument("--dry-run", action="store_true", help="print the request instead (as `plan`)")
    add_output_arguments(run, "json", "HyperParameters", "--dry-run's request")
    run.set_defaults(handler=cli_jobs.cmd_run)

    listing = commands.add_parser(
        "list",
        help="list jobs, newest first",
        description="Jobs newest first: the local store's, SageMaker's with --sagemaker, a Slurm "
        "cluster's with --slurm, a Kubernetes namespace's with --kubernetes. The table shows name, "
        "status, instance type x count, started and "
        "duration, and lists the local store's directories that are not jobs of their own, each with "
        "why: Claimed (a submit under way), Abandoned (its submitter died before starting it), "
        "Damaged (a record file cannot be read) and Foreign (a copy of another job's directory). "
        "--output json prints ListTrainingJobs' response (TrainingJobSummaries: jobs only).",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    statuses = (
        contract.STATUS_IN_PROGRESS,
        contract.STATUS_COMPLETED,
        contract.STATUS_FAILED,
        contract.STATUS_STOPPING,
        contract.STATUS_STOPPED,
        *STORE_STATUSES,
    )
    listing.add_argument("--status", choices=statuses, help="only jobs with this status")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    listing.add_argument(
        "--tuning",
        action="store_true",
        help="list tuning jobs instead (ListHyperParameterTuningJobs: name, status, strategy, "
        "trials started/at most, best objective, start, duration)",
    )
    where(listing, "the jobs")
    listing.add_argument(
        "--kubernetes",
        metavar="NAMESPACE",
        help="the jobs of a Kubernetes namespace: KubernetesSession(namespace=NAMESPACE), the cluster "
        "your kubeconfig names",
    )
    add_output_arguments(listing, "table", "TrainingJobSummaries[].TrainingJobName")
    listing.set_defaults(handler=cli_jobs.cmd_list)

    describe = on_job(
        "describe",
        cli_jobs.cmd_describe,
        "print DescribeTrainingJob's response for a job",
        "DescribeTrainingJob's response (local jobs: the same shape, FinalMetricDataList included); "
        "for a tuning job, DescribeHyperParameterTuningJob's.",
    )
    add_output_arguments(describe, "json", "FinalMetricDataList")
    describe.add_argument("--tuning", action="store_true", help=TUNING_HELP)
    logs = on_job(
        "logs",
        cli_jobs.cmd_logs,
        "print a job's logs (-f: follow until it ends)",
        "Every host's lines, prefixed [algo-N] or [algo-N/rank R].",
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--host", help="only this host's lines (algo-2)")
    logs.add_argument("--rank", type=int, help="only this rank's lines")
    stop = on_job(
        "stop",
        cli_jobs.cmd_stop,
        "stop a running job",
        "StopTrainingJob: SIGTERM to every rank, then SIGKILL after the grace period (local); returns "
        "without waiting. A tuning job: StopHyperParameterTuningJob, which stops its running trials.",
    )
    stop.add_argument("--tuning", action="store_true", help=TUNING_HELP)
    metrics = on_job(
        "metrics",
        cli_jobs.cmd_metrics,
        "a job's metrics as a table (--plot FILE.png: a picture)",
        "TrainingJobAnalytics(JOB).dataframe(): timestamp (seconds since the metric's first "
        "value), metric_name, value, host; --output json prints its records. A --metric the job "
        "does not define exits 2, naming those it does. Needs pip install 'smlaunch[analytics]'.",
    )
    metrics.add_argument("--metric", action="append", help="only this metric (repeatable)")
    metrics.add_argument("--plot", metavar="FILE.png", help="also draw one panel per metric into FILE.png")
    add_output_arguments(metrics, "table", "[?metric_name=='train:loss'].value")

    rm = commands.add_parser(
        "rm",
        help="delete ended local or Kubernetes jobs",
        description="Delete the local job directories named (trees, logs, and the artifacts "
        "under them): ended jobs, Abandoned claims and Damaged records. Running jobs, submits "
        "under way and copies of another job's directory (Foreign) are refused; nothing is "
        "removed then. kubernetes:NAMESPACE:NAME deletes an ended Kubernetes job's record (its "
        "root ConfigMap); a running one is refused.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rm.add_argument("jobs", metavar="JOB", nargs="*", help="names, local:NAME, or kubernetes:NAMESPACE:NAME")
    rm.add_argument("--last", action="store_true", help="the most recently created job")
    rm.add_argument(
        "--store", metavar="DIR", help="the local job store (default: the root setting, ~/.smlaunch/jobs)"
    )
    rm.set_defaults(handler=with_jobs(cli_jobs.cmd_rm))

    gc = commands.add_parser(
        "gc",
        help="delete local jobs that ended long ago (default: the retention setting, 30d)",
        description="Delete local jobs that ended more than --older-than ago (default: the "
        "retention setting, 30d; docs/configuration.md) and Abandoned claims; running jobs, submits "
        "under way, Damaged records (smlaunch rm removes them) and Foreign directories are kept. Exit 2 "
        "when the store does not allow a removal.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gc.add_argument("--older-than", metavar="AGE", help="7d, 12h, 30m, 2w (default: the retention setting)")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    gc.add_argument(
        "--store", metavar="DIR", help="the local job store (default: the root setting, ~/.smlaunch/jobs)"
    )
    gc.set_defaults(handler=cli_jobs.cmd_gc)


TUNING_HELP = (
    "JOB is a tuning job (a bare name is one already when the local store has a tuning job of that "
    "name and no training job of that name); with --sagemaker, a SageMaker tuning job"
)

JOB_HELP = (
    "a job name (looked for in the local store, else on SageMaker), or a reference saying where: "
    "local:NAME, local:STORE:NAME, slurm:SHARED_DIR:NAME, kubernetes:NAMESPACE:NAME, sagemaker:NAME"
)


def _version() -> str:
    """The installed distribution's version (``unknown`` when run from a checkout not installed)."""
    from importlib import metadata

    try:
        return metadata.version("smlaunch")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``smlaunch`` parser: every command, its flags, and the exit statuses in each ``--help``."""
    from smlaunch.sdk.cli import jobs as cli_jobs
    from smlaunch.sdk.cli import run as cli_run
    from smlaunch.sdk.cli.output import add_output_arguments

    parser = argparse.ArgumentParser(
        prog="smlaunch",
        description="Run, watch, measure, stop and clean SageMaker-style training jobs "
        "(local, Docker, Slurm, Kubernetes, SageMaker). Data goes to stdout, progress and errors to stderr.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"smlaunch {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _job_commands(commands)
    plan = commands.add_parser(
        "plan",
        help="print the CreateTrainingJob request without starting anything",
        description="Print the CreateTrainingJob request `smlaunch run` would send with the same "
        "flags (as `run --dry-run`): the local plan, or with --sagemaker the SageMaker request, "
        "offline (region, account and bucket from flags; the role is used as given, a bare name "
        "becoming arn:aws:iam::<account>:role/<name>; nothing is staged).",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli_run.add_estimator_arguments(plan)
    add_output_arguments(plan, "json", "HyperParameters")
    plan.set_defaults(handler=cli_jobs.cmd_plan)
    from smlaunch.serve.cli import add_serve_command

    add_serve_command(commands, EXIT_STATUS)
    return parser


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``smlaunch COMMAND``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as a command-line tool prints one: ``warning: <message>`` on stderr, without the
    Python source file and line the interpreter's default format adds."""
    print(f"warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit status (:data:`EXIT_STATUS`)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's usage, which lists its flags, rather than the top level's
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    out = sys.stdout
    try:
        # Only the command's data goes to ``out``; whatever else prints (fit()'s progress, the
        # job's streamed logs, status lines) goes to stderr, so $(smlaunch ...) captures data only.
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(args.handler(args, out))
    except JobFailedError as exc:
        # One line: the job's streamed lines above hold the traceback, `describe` the whole reason.
        from smlaunch.sdk.backends.status import failure_headline

        reason = failure_headline(exc.reason) or exc.reason
        print(
            f"error: Error for Training job {exc.job_name}: {exc.status}. Reason: {reason}.", file=sys.stderr
        )
        return 1
    except ConfigurationError as exc:  # a bad argument, an unknown job, a refusal
        from smlaunch.sdk.cli.run import cli_advice

        print(f"error: {cli_advice(exc, _command_parser(parser, args.command))}", file=sys.stderr)
        return 2
    except SmlaunchError as exc:  # a damaged record, a missing extra
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `smlaunch describe JOB | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # the job store (or a file named) cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
