"""Sessions: where a job runs, and the clients it needs there.

An estimator asks its session for three things only, so the estimator never knows which backend it
talks to:

- ``session.backend()``: the :class:`~smlaunch.sdk.backends.base.Backend` that runs jobs;
- ``session.region_name``: written into ``sagemaker_region``;
- ``session.default_output_path()``: ``output_path`` when the user gave none (``s3://<bucket>/``
  for SageMaker, ``file://<jobs root>/`` locally);
- ``session.expand_role(role)``: the role ARN for the request;
- ``session.s3_client()``: the boto3 S3 client used for staging to and from ``s3://``; created
  lazily, injected by tests.

``Session`` (this module) selects Amazon SageMaker; ``LocalSession`` (:mod:`smlaunch.sdk.sessions.local`)
the local backend, processes by default or ``executor="docker"`` for one container per host;
``SlurmSession`` (:mod:`smlaunch.sdk.sessions.slurm`) a Slurm cluster.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, NoCredentialsError

from smlaunch.sdk import roles
from smlaunch.sdk.backends.sagemaker.credentials import aws_errors
from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.inputs import BUCKET_PATTERN
from smlaunch.sdk.jobs.tracking import check_tracking_uri
from smlaunch.sdk.request import naming, sdk_config
from smlaunch.sdk.sessions.local import LocalSession as LocalSession  # also importable from here
from smlaunch.sdk.sessions.local import _check_quota

if TYPE_CHECKING:
    from smlaunch.sdk.backends.base import Backend


# --- Amazon SageMaker ---------------------------------------------------------------------------


MAX_ROLE_ARN_CHARS = 2048  # RoleArn
_SERVED = ("sagemaker", "logs", "cloudwatch")
"""The services whose clients go to ``Session(endpoint_url=...)``: those ``smlaunch serve`` answers."""


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _http_status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class Session:
    """Run jobs on Amazon SageMaker: the same estimator, a real CreateTrainingJob.

    Mirrors ``sagemaker.Session`` for what an estimator needs:

    - ``region_name`` from ``boto_session`` (default ``boto3.Session()``: environment, profile);
    - ``account_id`` from STS ``GetCallerIdentity``;
    - ``default_bucket()``: ``default_bucket`` or ``sagemaker-{region}-{account}``, created on first use
      (no ``LocationConstraint`` in us-east-1, as S3 requires) and, when the name is the generated one,
      checked with ``ExpectedBucketOwner`` so a bucket another account registered under our name
      (bucket squatting) is refused instead of receiving our code and data;
    - ``expand_role(role)``: an IAM role ARN as is; a role name resolved with IAM ``GetRole``;
    - ``backend()``: :class:`~smlaunch.sdk.backends.sagemaker.backend.SageMakerBackend`;
    - ``stage_local_input(path, job_name, channel)``: a local directory or file uploaded to
      ``s3://<bucket>/[<prefix>/]<job>/input/<channel>/`` (parallel, unchanged files skipped).

    ``instance_count_quota``: your account's "Number of instances per training job" quota when it
    was raised above SageMaker's default (20); larger jobs are refused before anything is staged.
    ``mlflow``: an MLflow tracking URI; each job waited on becomes an MLflow run there
    (:mod:`smlaunch.sdk.jobs.tracking`; ``MLFLOW_TRACKING_URI`` does the same for every session).
    ``endpoint_url``: the SageMaker API's URL when it is not AWS's, e.g. an ``smlaunch serve``
    (``docs/serve.md``): the ``sagemaker``, ``logs`` and ``cloudwatch`` clients the session creates go
    there.
    ``sagemaker_config``: the SageMaker SDK's ``config.yaml`` defaults as a dict; by default they are
    read from the SDK's locations (:mod:`smlaunch.sdk.request.sdk_config`), and fill the estimator arguments
    (role, VPC, KMS keys, environment, tags...) and the default bucket left unset.

    Clients (``sagemaker``, ``s3``, ``sts``, ``iam``, ``logs``, ``cloudwatch``) are created lazily from
    ``boto_session``; pass any of them to inject moto-backed or otherwise configured ones. Nothing
    talks to AWS before a method needs it. Missing credentials give a :class:`ConfigurationError` saying
    how to configure them, not a botocore trace.
    """

    is_local = False
    processes_per_host: int | None = None
    """SageMaker runs the instance type's ranks per host; only local sessions pin them."""

    def __init__(
        self,
        boto_session: Any | None = None,
        default_bucket: str | None = None,
        default_bucket_prefix: str | None = None,
        sagemaker_client: Any | None = None,
        s3_client: Any | None = None,
        sts_client: Any | None = None,
        iam_client: Any | None = None,
        logs_client: Any | None = None,
        instance_count_quota: int | None = None,
        cloudwatch_client: Any | None = None,
        mlflow: str | None = None,
        sagemaker_config: dict[str, Any] | None = None,
        endpoint_url: str | None = None,
    ) -> None:
        require_type(
            "endpoint_url", endpoint_url, (str, type(None)), "pass a URL, e.g. 'http://127.0.0.1:8080'"
        )
        self._endpoint_url = endpoint_url
        self.instance_count_quota = _check_quota(instance_count_quota)
        self.mlflow = check_tracking_uri(mlflow)
        self._boto_session = boto_session
        self._clients: dict[str, Any] = {
            name: client
            for name, client in (
                ("sagemaker", sagemaker_client),
                ("s3", s3_client),
                ("sts", sts_client),
                ("iam", iam_client),
                ("logs", logs_client),
                ("cloudwatch", cloudwatch_client),
            )
            if client is not None
        }
        self._account_id: str | None = None
        self._default_bucket: str | None = None
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        self.sagemaker_config = sdk_config.session_config(sagemaker_config, self.s3_client)
        """The SageMaker SDK's ``config.yaml`` defaults (:mod:`smlaunch.sdk.request.sdk_config`), as its
        ``Session.sagemaker_config``."""
        # An argument beats the config's Modules.Session defaults, as in the SDK.
        if default_bucket is None:
            default_bucket = sdk_config.value(self.sagemaker_config, sdk_config.DEFAULT_S3_BUCKET.path)
        if default_bucket_prefix is None:
            default_bucket_prefix = sdk_config.value(self.sagemaker_config, sdk_config.DEFAULT_S3_PREFIX.path)
        require_type("default_bucket", default_bucket, (str, type(None)), "pass the bucket name as a string")
        require_type(
            "default_bucket_prefix",
            default_bucket_prefix,
            (str, type(None)),
            "pass a key prefix as a string, e.g. 'team-a/experiments'",
        )
        if default_bucket is not None and not BUCKET_PATTERN.fullmatch(default_bucket):
            raise ConfigurationError(
                "default_bucket",
                default_bucket,
                "not a valid S3 bucket name",
                "pass the bucket name only (3-63 lowercase letters, digits, dots, hyphens), without s3://",
            )
        self._bucket_override = default_bucket
        self.default_bucket_prefix = (default_bucket_prefix or "").strip("/") or None

    def __repr__(self) -> str:
        return f"Session(region_name={self._region_or_none()!r})"

    # -- region, account, clients

    @property
    def boto_session(self) -> Any:
        """The ``boto3.Session`` given, or one created from the default credential chain on first use."""
        if self._boto_session is None:
            import boto3

            self._boto_session = boto3.Session()
        return self._boto_session

    def _region_or_none(self) -> str | None:
        if self._boto_session is not None or not self._clients:
            region = self.boto_session.region_name
            if region:
                return str(region)
        for client in self._clients.values():
            region = getattr(getattr(client, "meta", None), "region_name", None)
            if region and region != "aws-global":
                return str(region)
        return None

    @property
    def region_name(self) -> str:
        """The AWS region jobs run in, from ``boto_session`` (or the injected clients)."""
        region = self._region_or_none()
        if not region:
            raise ConfigurationError(
                "region",
                None,
                "no AWS region configured",
                "set AWS_DEFAULT_REGION (or `region` in ~/.aws/config), or pass "
                "boto_session=boto3.Session(region_name='us-west-2')",
            )
        return region

    def _client(self, service: str) -> Any:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                session = self.boto_session
                with aws_errors(f"create the {service} client"):
                    if session.get_credentials() is None:
                        raise NoCredentialsError()
                from botocore.config import Config

                # CloudWatch Logs throttles readers of busy jobs; the SDK allows 15 attempts too.
                # DescribeTrainingJob has its own longer backoff in the backend, so botocore's
                # standard 3 attempts are enough elsewhere.
                attempts = 15 if service == "logs" else 3
                config = Config(retries={"mode": "standard", "max_attempts": attempts})
                where = (
                    {"endpoint_url": self._endpoint_url} if self._endpoint_url and service in _SERVED else {}
                )
                client = session.client(service, region_name=self.region_name, config=config, **where)
                self._clients[service] = client
            return client

    def sagemaker_client(self) -> Any:
        """A boto3 SageMaker client in the session's region."""
        return self._client("sagemaker")

    def s3_client(self) -> Any:
        """A boto3 S3 client in the session's region."""
        return self._client("s3")

    def logs_client(self) -> Any:
        """A boto3 CloudWatch Logs client in the session's region."""
        return self._client("logs")

    def sts_client(self) -> Any:
        """A boto3 STS client in the session's region."""
        return self._client("sts")

    def iam_client(self) -> Any:
        """A boto3 IAM client."""
        return self._client("iam")

    def get_caller_identity_arn(self) -> str:
        """The ARN of the role (or user) whose credentials this session uses, resolved as SDK v2's
        method of this name (:func:`smlaunch.sdk.roles.caller_identity_arn`)."""
        return roles.caller_identity_arn(self)

    def cloudwatch_client(self) -> Any:
        """CloudWatch (metrics), where SageMaker publishes a job's ``MetricDefinitions`` values."""
        return self._client("cloudwatch")

    @property
    def account_id(self) -> str:
        """The caller's AWS account, from STS ``GetCallerIdentity`` (asked once)."""
        if self._account_id is None:
            with aws_errors("look up the AWS account (sts:GetCallerIdentity)"):
                self._account_id = str(self._client("sts").get_caller_identity()["Account"])
        return self._account_id

    # -- default bucket

    @property
    def bucket_is_generated(self) -> bool:
        """True when the default bucket is the SDK-style ``sagemaker-{region}-{account}`` name."""
        return self._bucket_override is None

    def default_bucket(self) -> str:
        """The bucket for code, outputs and staged inputs, created (and ownership-checked) on first use."""
        if self._default_bucket is not None:
            return self._default_bucket
        name = self._bucket_override or f"sagemaker-{self.region_name}-{self.account_id}"
        with aws_errors(f"check the S3 bucket {name}"):
            self._ensure_bucket(name)
            if self.bucket_is_generated:
                self._check_bucket_owner(name)
        self._default_bucket = name
        return name

    def _ensure_bucket(self, name: str) -> None:
        s3 = self.s3_client()
        try:
            s3.head_bucket(Bucket=name)
            return
        except ClientError as error:
            status, code = _http_status(error), _error_code(error)
            if status == 403 or code in ("403", "Forbidden", "AccessDenied"):
                raise ConfigurationError(
                    "default_bucket",
                    name,
                    "the bucket exists but this account cannot access it (403)",
                    "grant s3:ListBucket on it, or pass default_bucket='<a bucket you own>' to Session()",
                ) from None
            if status != 404 and code not in ("404", "NoSuchBucket", "NotFound"):
                raise
        request: dict[str, Any] = {"Bucket": name}
        if self.region_name != "us-east-1":
            # us-east-1 is S3's default location and rejects an explicit LocationConstraint for it.
            request["CreateBucketConfiguration"] = {"LocationConstraint": self.region_name}
        try:
            s3.create_bucket(**request)
        except ClientError as error:
            # Someone (another notebook of ours) created it between the two calls: fine.
            if _error_code(error) not in ("BucketAlreadyOwnedByYou", "OperationAborted"):
                if _error_code(error) == "BucketAlreadyExists":
                    raise ConfigurationError(
                        "default_bucket",
                        name,
                        "the bucket name is taken by another AWS account",
                        "pass default_bucket='<a bucket you own>' to Session()",
                    ) from None
                raise

    def _check_bucket_owner(self, name: str) -> None:
        try:
            self.s3_client().head_bucket(Bucket=name, ExpectedBucketOwner=self.account_id)
        except ClientError as error:
            if _http_status(error) == 403 or _error_code(error) in ("403", "AccessDenied", "Forbidden"):
                raise ConfigurationError(
                    "default_bucket",
                    name,
                    f"the bucket is not owned by account {self.account_id}: it may have been registered "
                    "by someone else under the default name, and code or data sent there would leave "
                    "your account",
                    "pass default_bucket='<a bucket you own>' to Session()",
                ) from None
            raise

    def default_output_path(self) -> str:
        """``s3://<default bucket>/[<default_bucket_prefix>/]``, with the trailing slash the SDK uses."""
        prefix = f"{self.default_bucket_prefix}/" if self.default_bucket_prefix else ""
        return f"s3://{self.default_bucket()}/{prefix}"

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        """``ExpectedBucketOwner`` for uploads to the generated default bucket only (as the SDK does):
        that name is predictable, so another account could own it; a bucket the user named is theirs."""
        if self.bucket_is_generated and bucket == f"sagemaker-{self.region_name}-{self.account_id}":
            return {"ExpectedBucketOwner": self.account_id}
        return {}

    # -- role

    def expand_role(self, role: str | None) -> str:
        """The execution role's ARN: an ARN as given, a role name looked up with IAM ``GetRole``."""
        if not role:
            raise ConfigurationError(
                "role",
                role,
                "SageMaker training jobs need an IAM execution role",
                "pass role='arn:aws:iam::<account>:role/<name>' (or the role's name)",
            )
        if role.startswith("arn:"):
            if not naming.ROLE_ARN_PATTERN.fullmatch(role) or len(role) > MAX_ROLE_ARN_CHARS:
                raise ConfigurationError(
                    "role",
                    role,
                    "not an IAM role ARN",
                    "pass role='arn:aws:iam::<12-digit account>:role/<name>' or just the role name",
                )
            return role
        try:
            with aws_errors(f"look up the IAM role {role!r}"):
                return str(self._client("iam").get_role(RoleName=role)["Role"]["Arn"])
        except ClientError as error:
            if _error_code(error) == "NoSuchEntity":
                raise ConfigurationError(
                    "role",
                    role,
                    "no IAM role with this name in the account",
                    "create the role (trusting sagemaker.amazonaws.com) or pass its full ARN",
                ) from None
            raise

    # -- backend, inputs, listing

    def backend(self) -> Backend:
        """The SageMaker backend that sends this session's jobs to the service (created once)."""
        if self._backend is None:
            from smlaunch.sdk.backends.sagemaker.backend import SageMakerBackend

            self._backend = SageMakerBackend(session=self)
        return self._backend

    def upload_data(
        self,
        path: str | Path,
        bucket: str | None = None,
        key_prefix: str = "data",
        extra_args: dict[str, Any] | None = None,
    ) -> str:
        """Upload a local file or directory to S3 and return its URI, as ``sagemaker.Session`` does.

        A directory goes under ``s3://<bucket>/<key_prefix>/`` keeping relative paths (the URI
        returned is ``s3://<bucket>/<key_prefix>``); a file becomes ``<key_prefix>/<file name>`` (the
        URI names it). Without ``bucket``: the default bucket, below ``default_bucket_prefix`` when
        set. Uploads to the generated default bucket carry ``ExpectedBucketOwner``. Files go through
        smlaunch's transfer engine: in parallel, multipart when large, unchanged ones skipped.
        """
        from smlaunch.sdk.sessions import transfer

        if not bucket:
            bucket = self.default_bucket()
            key_prefix = "/".join(p for p in (self.default_bucket_prefix, key_prefix.strip("/")) if p)
        args = {**(extra_args or {}), **self.bucket_owner_args(bucket)}
        with aws_errors(f"upload {path} to s3://{bucket}/{key_prefix}"):
            return transfer.upload_data(self.s3_client(), path, bucket, key_prefix, args or None)

    def download_data(self, path: str | Path, bucket: str, key_prefix: str = "") -> list[str]:
        """Download every object under ``s3://<bucket>/<key_prefix>`` into the directory ``path``
        (paths relative to the prefix) and return the local paths, as ``sagemaker.Session`` does. The
        generated default bucket is checked to be this account's first."""
        from smlaunch.sdk.sessions import transfer

        if self.bucket_owner_args(bucket):
            self.default_bucket()  # the ownership check of the predictable default name
        with aws_errors(f"download s3://{bucket}/{key_prefix}"):
            return transfer.download_data(self.s3_client(), path, bucket, key_prefix)

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        """Upload a local directory (or file) for ``channel``; return the channel's S3 prefix URI.

        Destination: ``s3://<default bucket>/[<prefix>/]<job>/input/<channel>/``. Files are sent in
        parallel (multipart above the threshold) with a progress bar on a terminal; a file already there
        with the same content hash is not sent again. Objects are written with
        ``ServerSideEncryption: aws:kms`` and, for the generated default bucket, ``ExpectedBucketOwner``,
        as the SageMaker SDK uploads code.
        """
        source = Path(path).expanduser()
        if not source.exists():
            raise ConfigurationError(
                f"inputs[{channel!r}]",
                str(path),
                "no such file or directory",
                "pass an existing local path, or an s3:// URI of data already uploaded",
            )
        from smlaunch.contract.transfer.engine import TransferEngine

        uri = f"{self.default_output_path()}{job_name}/input/{channel}/"
        bucket = self.default_bucket()
        extra_args = {"ServerSideEncryption": "aws:kms", **self.bucket_owner_args(bucket)}
        with aws_errors(f"upload {source} to {uri}"), TransferEngine(s3_client=self.s3_client()) as engine:
            if source.is_dir():
                engine.upload_dir(source, uri, extra_args=extra_args)
            else:
                engine.upload_file(source, uri + source.name, extra_args=extra_args)
        return uri

    def list_training_jobs(
        self,
        name_contains: str | None = None,
        status: str | None = None,
        max_results: int = 20,
    ) -> list[dict[str, Any]]:
        """Recent training jobs, newest first: ``TrainingJobSummaries`` of ``ListTrainingJobs``."""
        request: dict[str, Any] = {"SortBy": "CreationTime", "SortOrder": "Descending"}
        if name_contains:
            request["NameContains"] = name_contains
        if status:
            request["StatusEquals"] = status
        jobs: list[dict[str, Any]] = []
        with aws_errors("list training jobs"):
            paginator = self.sagemaker_client().get_paginator("list_training_jobs")
            for page in paginator.paginate(**request, PaginationConfig={"PageSize": min(max_results, 100)}):
                jobs.extend(page.get("TrainingJobSummaries", []))
                if len(jobs) >= max_results:
                    break
        jobs.sort(
            key=lambda job: job["CreationTime"].timestamp() if job.get("CreationTime") else 0.0, reverse=True
        )
        return jobs[:max_results]


def get_execution_role(sagemaker_session: Any | None = None, use_default: bool = False) -> str:
    """The IAM role ARN to pass as ``role=``: SDK v2's ``get_execution_role``.

    ``sagemaker_session``: a :class:`Session` resolves the caller's role as the SDK does (see
    :mod:`smlaunch.sdk.roles`); a ``LocalSession`` (or ``SlurmSession``), or no session
    where no AWS credentials are configured, gives a placeholder role (local jobs need none), with
    a one-line note. ``use_default``: when the caller is not a role, create or reuse
    ``AmazonSageMaker-DefaultRole`` instead of raising.

    Raises :class:`~smlaunch.sdk.errors.ConfigurationError` (a ``ValueError``, as the SDK's) when the
    caller's identity is not a role and ``use_default`` is False.
    """
    if sagemaker_session is None:
        import boto3

        if boto3.Session().get_credentials() is None:
            return roles.placeholder_role("no AWS credentials are configured")
        sagemaker_session = Session()
    if getattr(sagemaker_session, "is_local", False):
        return roles.placeholder_role(f"{type(sagemaker_session).__name__} jobs run on this machine")
    arn = sagemaker_session.get_caller_identity_arn()
    if ":role/" in arn:
        return str(arn)
    if use_default:
        return roles.default_role(sagemaker_session)
    raise ConfigurationError(
        "role",
        arn,
        "the current AWS identity is not a role, therefore it cannot be used as a SageMaker execution role",
        "pass role='arn:aws:iam::<account>:role/<name>' (a role SageMaker can assume), or "
        "get_execution_role(use_default=True) to create AmazonSageMaker-DefaultRole",
    )
