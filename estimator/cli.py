"""``smlaunch``: run, watch, measure, stop and clean training jobs from a terminal; dry-run requests.

Commands (``smlaunch COMMAND --help`` for each): ``run``, ``list``, ``describe``, ``logs``, ``stop``,
``metrics``, ``rm``, ``gc`` (implemented in :mod:`estimator.cli_jobs`) and ``plan``.

``smlaunch plan`` prints the exact CreateTrainingJob request an estimator would send: a dry run that
never calls AWS; the region, account and bucket come from flags (defaults below), the role is used as
given (a bare name becomes ``arn:aws:iam::<account>:role/<name>``), and nothing is staged. With
``--instance-type local``/``local_gpu`` (or ``--local``) it plans a local run under ``--root``
instead. The output is the request as JSON (``TrainingJobSpec.to_request()``).

    smlaunch plan --entry-point train.py --source-dir src --instance-type ml.p3.16xlarge \\
        --instance-count 2 --framework-version 2.1.0 --py-version py310 \\
        --hyperparameters '{"epochs": 10}' --distribution '{"torch_distributed": {"enabled": true}}' \\
        --inputs '{"train": "s3://bucket/train"}'

Exit status: 0 on success; 1 when a job the command ran or waited on did not complete; 2 for a usage
error (``error: <field>=<value>: <problem>. Fix: ...`` on stderr), an unknown job or a refusal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from estimator.errors import ConfigurationError, JobFailedError, SmlaunchError
from runtime import contract

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"


class PlanSession:
    """An offline SageMaker-shaped session (a
    :class:`~estimator.session_protocol.TrainingSession`) built from flags: enough for ``plan()``."""

    is_local = False
    instance_count_quota: int | None = None
    processes_per_host: int | None = None

    def __init__(self, region: str, account: str, bucket: str | None = None) -> None:
        self.region_name = region
        self.account = account
        self.bucket = bucket or f"sagemaker-{region}-{account}"

    def default_output_path(self) -> str:
        return f"s3://{self.bucket}/"

    def expand_role(self, role: str | None) -> str:
        if not role:
            raise ConfigurationError(
                "role",
                role,
                "SageMaker training jobs need an IAM execution role",
                "pass --role <arn or role name>",
            )
        return role if role.startswith("arn:") else f"arn:aws:iam::{self.account}:role/{role}"

    def backend(self) -> Any:
        raise ConfigurationError("command", "plan", "a dry run does not submit", "use fit() to submit")

    def s3_client(self) -> Any:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "use fit() to stage code")

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "use fit() to stage code")

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "use fit() to stage inputs")


def _json_arg(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            flag, text, f"not valid JSON ({exc.msg})", "quote the JSON, e.g. '{\"epochs\": 10}'"
        ) from exc


def _job_commands(commands: Any) -> None:
    """``run``, ``list``, ``describe``, ``logs``, ``stop``, ``metrics``, ``rm``, ``gc``."""
    from estimator import cli_jobs
    from estimator.backends.local.store import STORE_STATUSES

    def on_job(name: str, handler: Any, summary: str, description: str) -> argparse.ArgumentParser:
        """A command about one job: ``JOB`` and ``--sagemaker``."""
        command: argparse.ArgumentParser = commands.add_parser(name, help=summary, description=description)
        command.add_argument("job", metavar="JOB")
        command.add_argument(
            "--sagemaker",
            action="store_true",
            help="the job is on SageMaker (default: local, else SageMaker when the name "
            "is not found locally)",
        )
        command.add_argument(
            "--slurm",
            metavar="SHARED_DIR",
            help="the job is on a Slurm cluster: SlurmSession(shared_dir=SHARED_DIR)",
        )
        command.set_defaults(handler=handler)
        return command

    run = commands.add_parser(
        "run",
        help="start a training job (the notebook cell as a command)",
        description="Build a PyTorch estimator from the flags and fit() it: locally by default, in Docker "
        "with --docker, on SageMaker with --sagemaker. Waits and streams the logs unless "
        "--no-wait (which prints the job name). Exit 1 when the job does not complete.",
    )
    run.add_argument(
        "entry_point", metavar="ENTRY_POINT", help="the training script (relative to --source-dir)"
    )
    run.add_argument("--source-dir", help="directory packaged as sourcedir.tar.gz")
    run.add_argument(
        "--instance-type", help="e.g. ml.g5.12xlarge (default: local; required with --sagemaker)"
    )
    run.add_argument("--instance-count", type=int, default=1)
    run.add_argument("--distribution", help=f"one of {', '.join(cli_jobs.DISTRIBUTIONS)}, or a JSON object")
    run.add_argument(
        "--processes-per-host",
        type=int,
        help="ranks per host (local: emulated GPUs; mpi/smp: processes_per_host)",
    )
    run.add_argument(
        "--hp",
        action="append",
        metavar="KEY=VALUE",
        help="hyperparameter (repeatable); VALUE is JSON when it parses (10, 3e-5, true)",
    )
    run.add_argument(
        "--input",
        action="append",
        metavar="NAME=URI",
        help="input channel (repeatable): s3://, file:// or a local path",
    )
    run.add_argument(
        "--metric",
        action="append",
        metavar="NAME=REGEX",
        help="metric definition (repeatable); the first group of REGEX is the value",
    )
    run.add_argument("--framework-version", default="2.1.0")
    run.add_argument("--py-version", default="py310")
    run.add_argument("--image-uri")
    run.add_argument("--role", default="SageMakerRole", help="execution role ARN or name (SageMaker)")
    run.add_argument("--output-path")
    run.add_argument("--base-job-name")
    run.add_argument("--job-name")
    run.add_argument("--max-run", type=int, default=24 * 60 * 60, help="seconds (default one day)")
    backend = run.add_mutually_exclusive_group()
    backend.add_argument("--docker", action="store_true", help="one local container per host")
    backend.add_argument("--sagemaker", action="store_true", help="run on Amazon SageMaker")
    run.add_argument("--no-wait", action="store_true", help="print the job name and return at once")
    run.set_defaults(handler=cli_jobs.cmd_run)

    listing = commands.add_parser(
        "list",
        help="list jobs, newest first",
        description="A table of jobs (name, status, instance type x count, started, duration), newest "
        "first: local jobs, or SageMaker's with --sagemaker. Local store directories that are not "
        "jobs of their own are listed too, each with why: Claimed (a submit under way), Abandoned "
        "(its submitter died before starting it), Damaged (a record file cannot be read) and "
        "Foreign (a copy of another job's directory).",
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
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.add_argument("--sagemaker", action="store_true", help="list SageMaker's jobs instead")
    listing.add_argument(
        "--slurm",
        metavar="SHARED_DIR",
        help="list the Slurm jobs of SlurmSession(shared_dir=SHARED_DIR) instead",
    )
    listing.set_defaults(handler=cli_jobs.cmd_list)

    on_job(
        "describe",
        cli_jobs.cmd_describe,
        "print DescribeTrainingJob's JSON for a job",
        "DescribeTrainingJob's response as JSON (local jobs: the same shape, FinalMetricDataList included).",
    )
    logs = on_job(
        "logs",
        cli_jobs.cmd_logs,
        "print a job's logs (-f: follow until it ends)",
        "Every host's lines, prefixed [algo-N] or [algo-N/rank R].",
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--host", help="only this host's lines (algo-2)")
    logs.add_argument("--rank", type=int, help="only this rank's lines")
    on_job(
        "stop",
        cli_jobs.cmd_stop,
        "stop a running job",
        "StopTrainingJob: SIGTERM to every rank, then SIGKILL after the grace period (local); returns "
        "without waiting.",
    )
    metrics = on_job(
        "metrics",
        cli_jobs.cmd_metrics,
        "a job's metrics as a table (--plot FILE.png: a picture)",
        "TrainingJobAnalytics(JOB).dataframe(): timestamp (seconds since the metric's first "
        "value), metric_name, value, host. Needs pip install 'smlaunch[analytics]'.",
    )
    metrics.add_argument("--metric", action="append", help="only this metric (repeatable)")
    metrics.add_argument("--plot", metavar="FILE.png", help="also draw one panel per metric into FILE.png")
    metrics.add_argument("--json", action="store_true", help="print JSON records instead of a table")

    rm = commands.add_parser(
        "rm",
        help="delete ended local jobs",
        description="Delete the local job directories named (trees, logs, and the artifacts "
        "under them): ended jobs, Abandoned claims and Damaged records. Running jobs, submits "
        "under way and copies of another job's directory (Foreign) are refused; nothing is "
        "removed then.",
    )
    rm.add_argument("jobs", metavar="JOB", nargs="+")
    rm.set_defaults(handler=cli_jobs.cmd_rm)

    gc = commands.add_parser(
        "gc",
        help="delete local jobs that ended long ago (default: the retention setting, 30d)",
        description="Delete local jobs that ended more than --older-than ago (default: the "
        "retention setting, 30d; docs/configuration.md) and Abandoned claims; running jobs, submits "
        "under way, Damaged records (smlaunch rm removes them) and Foreign directories are kept. Exit 2 "
        "when the store does not allow a removal.",
    )
    gc.add_argument("--older-than", metavar="AGE", help="7d, 12h, 30m, 2w (default: the retention setting)")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    gc.set_defaults(handler=cli_jobs.cmd_gc)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smlaunch",
        description="Run, watch, measure, stop and clean SageMaker-style training jobs "
        "(local, Docker, SageMaker). Exit status: 0 success, 1 job failed, "
        "2 usage error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _job_commands(commands)
    plan = commands.add_parser(
        "plan",
        help="print the CreateTrainingJob request without calling AWS",
        description="Print the CreateTrainingJob request an estimator would send, offline.",
    )
    plan.add_argument("--entry-point", required=True)
    plan.add_argument("--source-dir")
    plan.add_argument("--dependencies", nargs="*", default=None)
    plan.add_argument("--instance-type", required=True)
    plan.add_argument("--instance-count", type=int, default=1)
    plan.add_argument("--framework-version")
    plan.add_argument("--py-version")
    plan.add_argument("--image-uri")
    plan.add_argument(
        "--role",
        default="SageMakerRole",
        help="role ARN or name (a name becomes arn:aws:iam::<account>:role/<name>)",
    )
    plan.add_argument("--hyperparameters", help="JSON object")
    plan.add_argument("--distribution", help="JSON object")
    plan.add_argument("--inputs", help="JSON: a URI string or an object channel -> URI")
    plan.add_argument("--output-path")
    plan.add_argument("--code-location")
    plan.add_argument("--base-job-name")
    plan.add_argument("--job-name")
    plan.add_argument("--max-run", type=int, default=24 * 60 * 60)
    plan.add_argument("--volume-size", type=int, default=30)
    plan.add_argument("--input-mode", default="File")
    plan.add_argument("--environment", help="JSON object")
    plan.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
    )
    plan.add_argument("--account", default=DEFAULT_ACCOUNT)
    plan.add_argument("--bucket", help="default bucket (default sagemaker-<region>-<account>)")
    plan.add_argument("--local", action="store_true", help="plan a local run (LocalSession)")
    plan.add_argument("--root", help="LocalSession root for local runs")
    plan.set_defaults(handler=_cmd_plan)
    return parser


def plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """Build the estimator from parsed flags and return ``plan().to_request()``."""
    from estimator.estimator import Estimator
    from estimator.local_session import LocalSession
    from estimator.pytorch import PyTorch

    local = args.local or args.instance_type in ("local", "local_gpu")
    session: Any = (
        LocalSession(root=args.root) if local else PlanSession(args.region, args.account, args.bucket)
    )
    kwargs: dict[str, Any] = dict(
        entry_point=args.entry_point,
        source_dir=args.source_dir,
        dependencies=args.dependencies,
        role=args.role,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        hyperparameters=_json_arg(args.hyperparameters, "--hyperparameters"),
        distribution=_json_arg(args.distribution, "--distribution"),
        output_path=args.output_path,
        code_location=args.code_location,
        base_job_name=args.base_job_name,
        max_run=args.max_run,
        volume_size=args.volume_size,
        input_mode=args.input_mode,
        environment=_json_arg(args.environment, "--environment"),
        sagemaker_session=session,
    )
    if args.framework_version or args.py_version or not args.image_uri:
        estimator: Estimator = PyTorch(
            framework_version=args.framework_version,
            py_version=args.py_version,
            image_uri=args.image_uri,
            **kwargs,
        )
    else:
        estimator = Estimator(image_uri=args.image_uri, **kwargs)
    inputs = _json_arg(args.inputs, "--inputs")
    return estimator.plan(inputs, job_name=args.job_name).to_request()


def _cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    print(json.dumps(plan_request(args), indent=2), file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit status (0, 1 job failed, 2 usage error)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args, sys.stdout))
    except JobFailedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SmlaunchError as exc:  # a bad argument, an unknown job, a refusal, a damaged record
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the job store (or a file named) cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `smlaunch describe JOB | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
