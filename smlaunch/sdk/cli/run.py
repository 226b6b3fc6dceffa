"""The flags ``smlaunch run`` and ``smlaunch plan`` share, and the estimator they build.

One vocabulary for both commands: ``ENTRY_POINT`` (positional), ``--hp KEY=VALUE``, ``--input
NAME=URI``, ``--metric NAME=REGEX``, ``--distribution NAME|JSON`` and the estimator's keywords as
``--kebab-case`` flags. Where the job goes: this machine unless ``--docker`` (one container per host),
``--sagemaker``, ``--slurm SHARED_DIR`` or ``--kubernetes NAMESPACE`` (with the platform flags of
:mod:`smlaunch.sdk.cli.platforms`, as ``serve`` spells them); ``plan`` (and ``run --dry-run``) never
start anything, and a SageMaker plan calls no AWS API (:class:`PlanSession`: region, account and
bucket come from flags). The spellings of
earlier versions (``--entry-point``, ``--hyperparameters JSON``, ``--inputs JSON``, ``--root``,
``--local``) are still accepted, unlisted. :func:`cli_advice` puts the estimator's errors, written
for notebooks, in these flags' words.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.sdk.cli import platforms
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import sdk_config

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
DEFAULT_FRAMEWORK_VERSION = "2.1.0"
DEFAULT_PY_VERSION = "py310"
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
_SAGEMAKER_ONLY = ("region", "account", "bucket")


class PlanSession:
    """An offline SageMaker-shaped session (a
    :class:`~smlaunch.sdk.sessions.protocol.TrainingSession`) built from flags: enough for ``plan()``."""

    is_local = False
    instance_count_quota: int | None = None
    processes_per_host: int | None = None

    def __init__(self, region: str, account: str, bucket: str | None = None) -> None:
        self.region_name = region
        self.account = account
        # The SageMaker SDK's config.yaml defaults, as a SageMaker Session applies them (local
        # files only: a dry run reads nothing from S3).
        self.sagemaker_config = sdk_config.load()
        configured = sdk_config.value(self.sagemaker_config, sdk_config.DEFAULT_S3_BUCKET.path)
        self.bucket = bucket or configured or f"sagemaker-{region}-{account}"

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
        raise ConfigurationError("command", "plan", "a dry run does not submit", "drop --dry-run")

    def s3_client(self) -> Any:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "drop --dry-run")

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "drop --dry-run")

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "drop --dry-run")


def add_estimator_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``run`` and ``plan``: the training job, and where it goes."""
    hidden = argparse.SUPPRESS
    parser.add_argument(
        "entry_point",
        metavar="ENTRY_POINT",
        nargs="?",
        help="the training script, relative to --source-dir (optional with --image-uri: the image's "
        "own entry point runs)",
    )
    parser.add_argument("--entry-point", dest="entry_point_flag", help=hidden)
    parser.add_argument("--source-dir", help="directory packaged as sourcedir.tar.gz")
    parser.add_argument("--dependencies", nargs="+", metavar="PATH", help="more directories to package")
    parser.add_argument(
        "--instance-type", help="e.g. ml.g5.12xlarge (default: local; required with --sagemaker)"
    )
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--distribution", help=f"one of {', '.join(DISTRIBUTIONS)}, or a JSON object")
    parser.add_argument(
        "--processes-per-host",
        type=int,
        help="ranks per host (local: emulated GPUs; mpi/smp: processes_per_host)",
    )
    parser.add_argument(
        "--hp",
        action="append",
        metavar="KEY=VALUE",
        help="hyperparameter (repeatable); VALUE is taken as JSON when it is JSON written as JSON "
        "writes it (10, 0.5, true, [1, 2]), else kept as text exactly (1.10, 3e-5, resnet)",
    )
    parser.add_argument("--hyperparameters", help=hidden)
    parser.add_argument(
        "--input",
        action="append",
        metavar="NAME=URI",
        help="input channel (repeatable): s3://, file:// or a local path",
    )
    parser.add_argument("--inputs", help=hidden)
    parser.add_argument(
        "--metric",
        action="append",
        metavar="NAME=REGEX",
        help="metric definition (repeatable); the first group of REGEX is the value",
    )
    parser.add_argument("--framework-version", help=f"PyTorch version (default {DEFAULT_FRAMEWORK_VERSION})")
    parser.add_argument("--py-version", help=f"default {DEFAULT_PY_VERSION}")
    parser.add_argument("--image-uri", help="training image (without ENTRY_POINT: a generic Estimator)")
    parser.add_argument(
        "--role",
        default="SageMakerRole",
        help="execution role ARN or name (SageMaker; a name becomes arn:aws:iam::<account>:role/<name>)",
    )
    parser.add_argument("--output-path")
    parser.add_argument("--code-location")
    parser.add_argument("--base-job-name")
    parser.add_argument("--job-name")
    parser.add_argument("--max-run", type=int, default=24 * 60 * 60, help="seconds (default one day)")
    parser.add_argument("--volume-size", type=int, default=30, help="GB (default 30)")
    parser.add_argument("--input-mode", default="File", help="File, FastFile or Pipe (default File)")
    parser.add_argument("--environment", metavar="JSON", help="environment variables, a JSON object")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--docker", action="store_true", help="one local container per host")
    target.add_argument("--sagemaker", action="store_true", help="Amazon SageMaker")
    target.add_argument(
        "--slurm",
        metavar="SHARED_DIR",
        help="the Slurm cluster whose shared directory this is (SlurmSession)",
    )
    target.add_argument(
        "--kubernetes",
        metavar="NAMESPACE",
        help="that namespace of the kubeconfig's cluster (KubernetesSession; the --kubernetes-* flags below)",
    )
    target.add_argument("--local", action="store_true", help=hidden)
    parser.add_argument(
        "--store", metavar="DIR", help="local job store (default: the root setting, ~/.smlaunch/jobs)"
    )
    platforms.add_slurm_partition_flag(parser)
    parser.add_argument("--root", dest="store", help=hidden)
    parser.add_argument(
        "--region",
        help="SageMaker: the region (default: your AWS configuration's; dry runs: $AWS_REGION, "
        f"$AWS_DEFAULT_REGION, else {DEFAULT_REGION})",
    )
    parser.add_argument(
        "--account",
        help=f"SageMaker dry runs: the account (default {DEFAULT_ACCOUNT}; real runs: your credentials')",
    )
    parser.add_argument(
        "--bucket", help="SageMaker: the default bucket (default sagemaker-<region>-<account>)"
    )
    platforms.add_kubernetes_flags(parser, namespace=False)


_EXAMPLES = {
    # What each flag's fix shows: a value of that flag's own kind.
    "--hp": "--hp epochs=10",
    "--input": "--input train=s3://my-bucket/train",
    "--metric": "--metric 'train:loss=loss=([0-9.]+)'",
    "--hyperparameters": """--hyperparameters '{"epochs": 10}'""",
    "--inputs": """--inputs '{"train": "s3://my-bucket/train"}'""",
    "--environment": """--environment '{"MY_SETTING": "1"}'""",
    "--distribution": """--distribution '{"torch_distributed": {"enabled": true}}'""",
}


def json_arg(text: str | None, flag: str) -> Any:
    """``text`` parsed as JSON (None stays None); bad JSON names the flag."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            flag, text, f"not valid JSON ({exc.msg})", f"quote the JSON, e.g. {_EXAMPLES[flag]}"
        ) from exc


def pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict, in order."""
    found: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(flag, item, "expected KEY=VALUE", f"pass e.g. {_EXAMPLES[flag]}")
        found[key] = value
    return found


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity: Python's JSON extensions, not JSON


def hp_value(text: str) -> Any:
    """``--hp`` values: JSON when ``text`` is exactly how JSON writes that value (``10``, ``0.5``,
    ``true``, ``"x"``), so the script receives what was typed; anything else (``1.10``, ``3e-5``,
    ``resnet``) is the text itself."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return text
    return value if json.dumps(value) == text else text


def distribution(text: str | None, processes_per_host: int | None) -> dict[str, Any] | None:
    """``--distribution``: a name of :data:`DISTRIBUTIONS` or a JSON object."""
    if text is None:
        return None
    if text.lstrip().startswith("{"):
        parsed: dict[str, Any] = json_arg(text, "--distribution")
        return parsed
    if text not in DISTRIBUTIONS:
        raise ConfigurationError(
            "--distribution",
            text,
            "unknown distribution",
            f"use one of {sorted(DISTRIBUTIONS)} or a JSON object",
        )
    chosen: dict[str, Any] = json.loads(json.dumps(DISTRIBUTIONS[text]))
    if "mpi" in chosen and processes_per_host:
        chosen["mpi"]["processes_per_host"] = processes_per_host
    return chosen


def session(args: argparse.Namespace, dry_run: bool) -> Any:
    """Where the job goes: ``LocalSession`` (``--docker``: its Docker executor), ``Session()`` with
    ``--sagemaker`` (for a dry run a :class:`PlanSession`), ``SlurmSession`` with ``--slurm``,
    ``KubernetesSession`` with ``--kubernetes``. A platform's own flag without that platform is
    refused, naming it."""
    _refuse_flags_of_another_platform(args)
    if args.slurm is not None:
        from smlaunch.sdk.sessions.slurm import SlurmSession

        return SlurmSession(
            shared_dir=args.slurm, partition=args.slurm_partition, processes_per_host=args.processes_per_host
        )
    if args.kubernetes is not None:
        return platforms.kubernetes_session(args, args.kubernetes)
    given = [f"--{name}" for name in _SAGEMAKER_ONLY if getattr(args, name) is not None]
    if args.sagemaker:
        if not args.instance_type:
            raise ConfigurationError(
                "--instance-type",
                None,
                "SageMaker needs an instance type",
                "pass e.g. --instance-type ml.g5.xlarge",
            )
        if dry_run:
            region = (
                args.region
                or os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or DEFAULT_REGION
            )
            return PlanSession(region, args.account or DEFAULT_ACCOUNT, args.bucket)
        if args.account is not None:
            raise ConfigurationError(
                "--account",
                args.account,
                "a real run is in the account of your AWS credentials",
                "drop it (choose the account with AWS_PROFILE), or add --dry-run",
            )
        import boto3

        from smlaunch.sdk.sessions.sagemaker import Session

        return Session(boto_session=boto3.Session(region_name=args.region), default_bucket=args.bucket)
    if given:
        raise ConfigurationError(
            given[0],
            getattr(args, given[0][2:]),
            "applies to SageMaker only; this job would run on this machine",
            "add --sagemaker (and --instance-type), or drop it",
        )
    from smlaunch.sdk.sessions.local import LocalSession

    return LocalSession(
        root=args.store,
        processes_per_host=args.processes_per_host,
        executor="docker" if args.docker else None,
    )


def _refuse_flags_of_another_platform(args: argparse.Namespace) -> None:
    """Each platform's flags apply to it alone: ``--store`` (this machine's), ``--slurm-partition``,
    ``--kubernetes-*``."""
    place = "--slurm" if args.slurm is not None else "--kubernetes" if args.kubernetes is not None else None
    owned = {
        "--slurm": ["--slurm-partition"] if args.slurm_partition is not None else [],
        "--kubernetes": platforms.given_kubernetes_flags(args),
    }
    if place is not None and args.store is not None:
        raise ConfigurationError(
            "--store", args.store, f"names this machine's job store; the job goes to {place}", "drop --store"
        )
    for platform, flags in owned.items():
        if flags and place != platform:
            raise ConfigurationError(
                flags[0],
                getattr(args, flags[0][2:].replace("-", "_")),
                f"applies to {platform} only",
                f"add {platform} {'SHARED_DIR' if platform == '--slurm' else 'NAMESPACE'}, or drop it",
            )


def build_estimator(args: argparse.Namespace, sagemaker_session: Any) -> Any:
    """The estimator the flags describe: ``PyTorch`` with ENTRY_POINT, a generic ``Estimator`` for
    ``--image-uri`` alone."""
    from smlaunch.sdk.estimator import Estimator
    from smlaunch.sdk.pytorch import PyTorch

    entry_point = args.entry_point or args.entry_point_flag
    if args.entry_point and args.entry_point_flag and args.entry_point != args.entry_point_flag:
        raise ConfigurationError(
            "--entry-point",
            args.entry_point_flag,
            f"disagrees with ENTRY_POINT {args.entry_point!r}",
            "give one",
        )
    if entry_point is None and not args.image_uri:
        raise ConfigurationError(
            "ENTRY_POINT", None, "a training script is needed", "pass it first, e.g. smlaunch run train.py"
        )
    hyperparameters = dict(json_arg(args.hyperparameters, "--hyperparameters") or {})
    hyperparameters.update({key: hp_value(value) for key, value in pairs(args.hp, "--hp").items()})
    metrics = pairs(args.metric, "--metric")
    kwargs: dict[str, Any] = dict(
        entry_point=entry_point,
        source_dir=args.source_dir,
        dependencies=args.dependencies,
        role=args.role,
        instance_type=args.instance_type or contract.LOCAL_INSTANCE_TYPE,
        instance_count=args.instance_count,
        hyperparameters=hyperparameters or None,
        distribution=distribution(args.distribution, args.processes_per_host),
        metric_definitions=[{"Name": k, "Regex": v} for k, v in metrics.items()] or None,
        output_path=args.output_path,
        code_location=args.code_location,
        base_job_name=args.base_job_name,
        max_run=args.max_run,
        volume_size=args.volume_size,
        input_mode=args.input_mode,
        environment=json_arg(args.environment, "--environment"),
        sagemaker_session=sagemaker_session,
    )
    if entry_point is None:
        return Estimator(image_uri=args.image_uri, **kwargs)
    pinned = args.image_uri and not (args.framework_version or args.py_version)
    return PyTorch(
        framework_version=None if pinned else args.framework_version or DEFAULT_FRAMEWORK_VERSION,
        py_version=None if pinned else args.py_version or DEFAULT_PY_VERSION,
        image_uri=args.image_uri,
        **kwargs,
    )


def inputs(args: argparse.Namespace) -> Any:
    """``fit()``'s inputs: the ``--input`` channels (or the old ``--inputs`` JSON)."""
    channels = pairs(args.input, "--input")
    legacy = json_arg(args.inputs, "--inputs")
    if legacy is not None and channels:
        raise ConfigurationError("--inputs", args.inputs, "given with --input", "use --input NAME=URI only")
    return legacy if legacy is not None else channels or None


def plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """The CreateTrainingJob request the flags would send: ``plan().to_request()``, offline."""
    estimator = build_estimator(args, session(args, dry_run=True))
    request: dict[str, Any] = estimator.plan(inputs(args), job_name=args.job_name).to_request()
    return request


_PYTHON_ADVICE = (
    # the Session's advice for notebooks, in the CLI's words
    (
        re.compile(r"run on this machine with sagemaker_session=LocalSession\(\)"),
        "drop --sagemaker to run on this machine",
    ),
    (re.compile(r"pass boto_session=boto3\.Session\(region_name=('[^']*')\)"), r"pass --region \1"),
    (re.compile(r"pass default_bucket=('[^']*') to Session\(\)"), r"pass --bucket \1"),
)
_LOCAL_LOOKUP = "look in the local job store instead (no --sagemaker, no sagemaker: prefix)"
_RENAMED = {
    "entry_point": "ENTRY_POINT",
    "hyperparameters": "--hp",
    "metric_definitions": "--metric",
    "inputs": "--input",
}
_SESSION_ARGUMENTS = {
    "shared_dir": "slurm",
    "partition": "slurm_partition",
    "namespace": "kubernetes",
    **{argument: dest for dest, argument in platforms.KUBERNETES_FLAGS.items()},
}
"""A Slurm or Kubernetes session's argument -> the ``dest`` of the flag that gives it."""


def cli_advice(error: ConfigurationError, parser: argparse.ArgumentParser) -> ConfigurationError:
    """``error`` (raised for a notebook: ``instance_count=0 ... pass instance_count=1``) in the
    words of ``parser``'s command: its flags for the estimator's keywords, ``--sagemaker``,
    ``--region``, ``--bucket`` for the Session's, ``--slurm`` and ``--kubernetes*`` for those
    sessions' arguments."""
    flags = dict(_RENAMED)
    for action in parser._actions:
        if action.option_strings and action.help != argparse.SUPPRESS:
            flags.setdefault(action.dest, action.option_strings[-1])
    flags.pop("processes_per_host", None)  # in errors, a distribution's key: not --processes-per-host
    for argument, dest in _SESSION_ARGUMENTS.items():
        if dest in flags:
            flags.setdefault(argument, flags[dest])
    fix = error.fix or ""
    for pattern, replacement in _PYTHON_ADVICE:
        fix = pattern.sub(replacement, fix)
    if parser.prog.split()[-1] not in ("run", "plan"):  # a read command runs nothing
        fix = fix.replace("drop --sagemaker to run on this machine", _LOCAL_LOOKUP)
    keywords = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    fix = re.sub(rf"\b({keywords})=('[^']*'|\S+)", lambda m: f"{flags[m.group(1)]} {m.group(2)}", fix)
    # a keyword named in passing ("relative to source_dir"); one-word names (role) may be plain words
    named = "|".join(sorted((re.escape(k) for k in flags if "_" in k), key=len, reverse=True))
    problem = re.sub(rf"\b({named})\b", lambda m: flags[m.group(1)], error.problem)
    fix = re.sub(rf"\b({named})\b", lambda m: flags[m.group(1)], fix)
    head = re.match(r"\w+", error.field)  # inputs['train'], distribution.mpi: the keyword's flag
    field = flags[head.group()] + error.field[head.end() :] if head and head.group() in flags else error.field
    if (field, problem, fix) == (error.field, error.problem, error.fix or ""):
        return error
    return ConfigurationError(field, error.value, problem, fix or None)
