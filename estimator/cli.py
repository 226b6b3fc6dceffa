"""``smlaunch plan``: print the exact CreateTrainingJob request an estimator would send.

A dry run that never calls AWS: the region, account and bucket come from flags (defaults below),
the role is used as given (a bare name becomes ``arn:aws:iam::<account>:role/<name>``), and nothing
is staged. With ``--instance-type local``/``local_gpu`` (or ``--local``) it plans a local run under
``--root`` instead. The output is the request as JSON (``TrainingJobSpec.to_request()``).

    smlaunch plan --entry-point train.py --source-dir src --instance-type ml.p3.16xlarge \\
        --instance-count 2 --framework-version 2.1.0 --py-version py310 \\
        --hyperparameters '{"epochs": 10}' --distribution '{"torch_distributed": {"enabled": true}}' \\
        --inputs '{"train": "s3://bucket/train"}'

Exit status: 0 with the request on stdout; 2 with ``error: <field>=<value>: <problem>. Fix: ...``
on stderr for a bad argument.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from estimator.errors import ConfigurationError

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"


class PlanSession:
    """An offline SageMaker-shaped session: what ``plan()`` asks of a session, from flags."""

    is_local = False

    def __init__(self, region: str, account: str, bucket: str | None = None) -> None:
        self.region_name = region
        self.account = account
        self.bucket = bucket or f"sagemaker-{region}-{account}"

    def default_output_path(self) -> str:
        return f"s3://{self.bucket}/"

    def expand_role(self, role: str | None) -> str:
        if not role:
            raise ConfigurationError("role", role, "SageMaker training jobs need an IAM execution role",
                                     "pass --role <arn or role name>")
        return role if role.startswith("arn:") else f"arn:aws:iam::{self.account}:role/{role}"

    def backend(self) -> Any:
        raise ConfigurationError("command", "plan", "a dry run does not submit", "use fit() to submit")

    def s3_client(self) -> Any:
        raise ConfigurationError("command", "plan", "a dry run does not upload", "use fit() to stage code")


def _json_arg(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(flag, text, f"not valid JSON ({exc.msg})",
                                 'quote the JSON, e.g. \'{"epochs": 10}\'') from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="smlaunch", description="smlaunch command line")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="print the CreateTrainingJob request without calling AWS")
    plan.add_argument("--entry-point", required=True)
    plan.add_argument("--source-dir")
    plan.add_argument("--dependencies", nargs="*", default=None)
    plan.add_argument("--instance-type", required=True)
    plan.add_argument("--instance-count", type=int, default=1)
    plan.add_argument("--framework-version")
    plan.add_argument("--py-version")
    plan.add_argument("--image-uri")
    plan.add_argument("--role", default="SageMakerRole",
                      help="role ARN or name (a name becomes arn:aws:iam::<account>:role/<name>)")
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
    plan.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                      or DEFAULT_REGION)
    plan.add_argument("--account", default=DEFAULT_ACCOUNT)
    plan.add_argument("--bucket", help="default bucket (default sagemaker-<region>-<account>)")
    plan.add_argument("--local", action="store_true", help="plan a local run (LocalSession)")
    plan.add_argument("--root", help="LocalSession root for local runs")
    return parser


def plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """Build the estimator from parsed flags and return ``plan().to_request()``."""
    from estimator.estimator import Estimator, PyTorch
    from estimator.session import LocalSession

    local = args.local or args.instance_type in ("local", "local_gpu")
    session: Any = (
        LocalSession(root=args.root) if local else PlanSession(args.region, args.account, args.bucket)
    )
    kwargs: dict[str, Any] = dict(
        entry_point=args.entry_point, source_dir=args.source_dir, dependencies=args.dependencies,
        role=args.role, instance_type=args.instance_type, instance_count=args.instance_count,
        hyperparameters=_json_arg(args.hyperparameters, "--hyperparameters"),
        distribution=_json_arg(args.distribution, "--distribution"),
        output_path=args.output_path, code_location=args.code_location, base_job_name=args.base_job_name,
        max_run=args.max_run, volume_size=args.volume_size, input_mode=args.input_mode,
        environment=_json_arg(args.environment, "--environment"), sagemaker_session=session,
    )
    if args.framework_version or args.py_version or not args.image_uri:
        estimator: Estimator = PyTorch(framework_version=args.framework_version, py_version=args.py_version,
                                       image_uri=args.image_uri, **kwargs)
    else:
        estimator = Estimator(image_uri=args.image_uri, **kwargs)
    inputs = _json_arg(args.inputs, "--inputs")
    return estimator.plan(inputs, job_name=args.job_name).to_request()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        request = plan_request(args)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(request, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
