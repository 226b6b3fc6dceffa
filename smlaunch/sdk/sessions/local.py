"""``LocalSession``: run jobs on this machine, every host of the topology emulated.

The session a notebook creates for local runs (processes by default, ``executor="docker"`` for one
container per host); :mod:`smlaunch.sdk.sessions.slurm` extends it for Slurm clusters. The SageMaker
session is :class:`smlaunch.sdk.sessions.sagemaker.Session`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.jobs.tracking import check_tracking_uri
from smlaunch.sdk.request import sdk_config
from smlaunch.sdk.sessions import settings

if TYPE_CHECKING:
    from smlaunch.sdk.backends.base import Backend


Executor = Literal["process", "docker"]
PLACEHOLDER_ROLE_ARN = "arn:aws:iam::000000000000:role/smlaunch-local"
"""The role of local jobs, which need none: it only keeps the request's shape."""


def default_local_root() -> Path:
    """The job store of a ``LocalSession()`` made now: its ``root`` setting (``$SMLAUNCH_HOME/jobs``,
    the config file's ``root``, else ``~/.smlaunch/jobs``)."""
    return settings.resolve({}).root


class LocalSession:
    """Run jobs on this machine: every host of the topology emulated, no AWS and no Docker needed.

    Every argument is a setting (:mod:`smlaunch.sdk.sessions.settings`, ``docs/configuration.md``): one not
    given (or None) comes from its environment variable, else the config file
    (``~/.config/smlaunch/config.yaml``, ``$SMLAUNCH_CONFIG``), else its default; the result is
    ``self.settings``.

    ``root``: directory holding one folder per job (default :func:`default_local_root`).
    ``processes_per_host``: ranks per emulated host for launchers that start one rank per GPU
    (torchrun-style DDP, smddp). Default: the instance type's GPU count, at least 1. An smlaunch
    extension, since a laptop rarely has the GPUs of the instance type it emulates.
    ``executor``: ``process`` (default) or ``docker`` (one container per host).
    ``s3_client``: boto3 S3 client for ``s3://`` code, inputs and outputs (created on first use).
    ``artifact_conflicts``: what happens when two hosts write the same model/output path with
    different bytes: ``"warn"`` (default: the first host's copy is kept and the job log says so) or
    ``"error"`` (the job ends Failed naming the path and both hosts).
    ``install_requirements``: install ``requirements.txt`` of ``source_dir`` before the script starts
    (default True). With processes, it goes into an environment layered over your interpreter, built
    once and cached by the file's hash under ``<root>/.requirements`` (your interpreter is never
    changed); containers install into their own interpreter, as SageMaker's toolkit does. See
    :mod:`smlaunch.runtime.requirements`.
    ``instance_count_quota``: the most instances one job may ask for (default: SageMaker's default
    quota, :data:`smlaunch.sdk.request.validation.DEFAULT_INSTANCES_PER_TRAINING_JOB`), so a job rehearsed
    here
    is one SageMaker accepts; raise it as far as your account's quota is raised.
    ``emulate_cuda``: when the instance type has GPUs this machine lacks (an ``ml.p3.16xlarge`` on a
    laptop), every rank emulates them on the CPU (``torch.cuda.is_available()`` True, tensors and
    modules sent to ``"cuda"`` stay on the CPU, NCCL becomes gloo; ``smlaunch/rank/cuda_emulation.py``)
    and ``SM_NUM_GPUS`` is the instance type's GPU count. Default ``None``: on in that case;
    ``False`` turns it off (CUDA is then unavailable, as on any CPU machine); ``True`` emulates the
    instance type's GPUs even where this machine has enough.
    ``mlflow``: an MLflow tracking URI; each job waited on becomes an MLflow run there
    (:mod:`smlaunch.sdk.jobs.tracking`; ``MLFLOW_TRACKING_URI`` does the same for every session).
    ``docker_image``: the docker executor's image for jobs without ``image_uri``.
    ``stall_timeout_seconds``: a host whose ranks print nothing for this long (none exited) dumps
    their stacks (``stack_dumper``: ``auto``, ``py-spy`` or ``faulthandler``) and ends the job; 0
    (default) turns the watchdog off (:mod:`smlaunch.runtime.supervision.watchdog`).
    ``faults``: faults to inject into every job of the session, a list of
    :mod:`smlaunch.contract.faults` entries (a job's ``environment={"SMLAUNCH_FAULTS": ...}`` wins).
    ``archive_max_bytes``, ``archive_max_members``: bounds on what the code archive may expand to.
    ``mpi_wait_seconds``: bound on every wait between MPI hosts. ``log_prefix``: ``[algo-N/rank R]``
    before each rank's line (default True). ``unsafe_checkpoint_load``: smp checkpoints load with
    full pickle. ``retention``: the age after which ``smlaunch gc`` removes ended jobs.
    ``verbose``: each host logs its whole launch topology (hosts, ranks, master, process-group
    backend, containment, every command) and where its code came from, instead of one line
    (``launcher: torchrun, ranks 0-1 of 4 on host 1 of 2, gloo``). Default False.
    ``sagemaker_config``: the SageMaker SDK's ``config.yaml`` defaults as a dict (default: read from
    the SDK's locations); local jobs take their ``Environment`` and ``Tags`` only
    (:mod:`smlaunch.sdk.request.sdk_config`).
    """

    is_local = True
    region_name = "local"

    def __init__(
        self,
        root: str | Path | None = None,
        processes_per_host: int | None = None,
        executor: Executor | None = None,
        s3_client: Any | None = None,
        stop_grace_seconds: float | None = None,
        docker_client: Any | None = None,
        artifact_conflicts: Literal["warn", "error"] | None = None,
        install_requirements: bool | None = None,
        instance_count_quota: int | None = None,
        emulate_cuda: bool | None = None,
        mlflow: str | None = None,
        docker_image: str | None = None,
        stall_timeout_seconds: float | None = None,
        stack_dumper: Literal["auto", "py-spy", "faulthandler"] | None = None,
        faults: list[dict[str, Any]] | None = None,
        archive_max_bytes: int | None = None,
        archive_max_members: int | None = None,
        mpi_wait_seconds: float | None = None,
        log_prefix: bool | None = None,
        unsafe_checkpoint_load: bool | None = None,
        retention: str | None = None,
        verbose: bool | None = None,
        sagemaker_config: dict[str, Any] | None = None,
    ) -> None:
        require_type("root", root, (str, os.PathLike, type(None)), "pass a directory path, e.g. '~/jobs'")
        require_type("executor", executor, (str, type(None)), "use executor='process' or executor='docker'")
        if executor is not None and executor not in ("process", "docker"):
            raise ConfigurationError(
                "executor", executor, "unknown executor", "use executor='process' or executor='docker'"
            )
        if processes_per_host is not None and (
            not isinstance(processes_per_host, int)
            or isinstance(processes_per_host, bool)
            or processes_per_host < 1
        ):
            raise ConfigurationError(
                "processes_per_host",
                processes_per_host,
                "must be an integer >= 1",
                "pass processes_per_host=1 or more, or leave it unset to use the instance's GPU count",
            )
        require_type(
            "stop_grace_seconds",
            stop_grace_seconds,
            (int, float, type(None)),
            "pass a number of seconds, e.g. 120",
        )
        if stop_grace_seconds is not None and not 0 <= stop_grace_seconds < float("inf"):
            raise ConfigurationError(
                "stop_grace_seconds", stop_grace_seconds, "must be >= 0", "pass a number of seconds, e.g. 120"
            )
        if artifact_conflicts not in (None, "warn", "error"):
            raise ConfigurationError(
                "artifact_conflicts",
                artifact_conflicts,
                "unknown policy",
                "use artifact_conflicts='warn' or artifact_conflicts='error'",
            )
        if install_requirements is not None and not isinstance(install_requirements, bool):
            raise ConfigurationError(
                "install_requirements",
                install_requirements,
                "must be True or False",
                "pass install_requirements=False to skip requirements.txt, or leave it unset",
            )
        _check_quota(instance_count_quota)
        if emulate_cuda not in (None, True, False):
            raise ConfigurationError(
                "emulate_cuda",
                emulate_cuda,
                "must be True, False or None",
                "leave it unset (emulate GPUs this machine lacks) or pass emulate_cuda=False to turn it off",
            )
        self.settings = settings.resolve(
            {
                "root": root,
                "executor": executor,
                "processes_per_host": processes_per_host,
                "stop_grace_seconds": stop_grace_seconds,
                "artifact_conflicts": artifact_conflicts,
                "install_requirements": install_requirements,
                "instance_count_quota": instance_count_quota,
                "emulate_cuda": emulate_cuda,
                "mlflow": mlflow,
                "docker_image": docker_image,
                "stall_timeout_seconds": stall_timeout_seconds,
                "stack_dumper": stack_dumper,
                "faults": faults,
                "archive_max_bytes": archive_max_bytes,
                "archive_max_members": archive_max_members,
                "mpi_wait_seconds": mpi_wait_seconds,
                "log_prefix": log_prefix,
                "unsafe_checkpoint_load": unsafe_checkpoint_load,
                "retention": retention,
                "verbose": verbose,
            }
        )
        self.root = self.settings.root
        self.executor: Executor = self.settings.executor
        self.processes_per_host = self.settings.processes_per_host
        self.stop_grace_seconds = self.settings.stop_grace_seconds
        self.artifact_conflicts = self.settings.artifact_conflicts
        self.install_requirements = self.settings.install_requirements
        self.instance_count_quota = self.settings.instance_count_quota
        self.emulate_cuda = self.settings.emulate_cuda
        self.mlflow = check_tracking_uri(self.settings.mlflow)
        self._s3_client = s3_client
        self._docker_client = docker_client
        self._backend: Backend | None = None
        self.sagemaker_config = sdk_config.session_config(sagemaker_config, self.s3_client)
        """The SageMaker SDK's ``config.yaml`` defaults, as its ``Session.sagemaker_config``."""

    def s3_client(self) -> Any:
        """A boto3 S3 client for ``s3://`` inputs, outputs and checkpoints (created on first use)."""
        if self._s3_client is None:
            import boto3

            self._s3_client = boto3.client("s3")
        return self._s3_client

    def expand_role(self, role: str | None) -> str:
        """The role as given (local runs need none), or a placeholder ARN so the request keeps its shape."""
        # Local runs need no IAM role; keep the user's value so the request looks like SageMaker's.
        return role or PLACEHOLDER_ROLE_ARN

    def default_output_path(self) -> str:
        """``file://<root>/``: where jobs without ``output_path`` put their artifacts."""
        return self.root.as_uri() + "/"

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        """``{}``: a local session does not check who owns the buckets it stages code to."""
        return {}

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        """Local jobs read a local input in place: its ``file://`` URI (nothing is copied)."""
        return Path(path).expanduser().resolve().as_uri()

    def backend(self) -> Backend:
        """The local backend that runs this session's jobs, with the session's executor (created once)."""
        if self._backend is None:
            from smlaunch.sdk.backends.emulated.backend import LocalBackend

            if self.executor == "docker":
                from smlaunch.sdk.backends.emulated.executors.docker.executor import DockerExecutor

                docker = DockerExecutor(client=self._docker_client, image=self.settings.docker_image)
                self._backend = LocalBackend(session=self, executor=docker)
            else:
                self._backend = LocalBackend(session=self)
        return self._backend

    def default_bucket(self) -> str:
        """Refused, naming the fix: a LocalSession has no default bucket (it needs no AWS account).
        Notebooks call it to stage data for ``upload_data``; a local job reads a local directory
        in place, so the directory itself is what to pass to ``fit()``."""
        raise ConfigurationError(
            "default_bucket()",
            None,
            "a LocalSession has no default bucket (local jobs read local data in place)",
            "pass the local directory to fit() instead of uploading it, e.g. fit({'training': 'data'}),"
            " or name a bucket you own: upload_data(path, bucket='<your bucket>')",
        )

    def upload_data(
        self,
        path: str | Path,
        bucket: str | None = None,
        key_prefix: str = "data",
        extra_args: dict[str, Any] | None = None,
    ) -> str:
        """Upload a local file or directory to ``s3://<bucket>/<key_prefix>`` (as ``sagemaker.Session``
        does; layout in :mod:`smlaunch.sdk.sessions.transfer`) and return its S3 URI. A LocalSession
        has no default bucket, so ``bucket`` is required."""
        from smlaunch.sdk.sessions import transfer

        if not bucket:
            raise ConfigurationError(
                "bucket",
                bucket,
                "a LocalSession has no default bucket (local jobs read local data in place)",
                "pass the local directory to fit() instead, e.g. fit({'training': 'data'}),"
                " or bucket='<your bucket>'",
            )
        return transfer.upload_data(self.s3_client(), path, bucket, key_prefix, extra_args)

    def download_data(self, path: str | Path, bucket: str, key_prefix: str = "") -> list[str]:
        """Download every object under ``s3://<bucket>/<key_prefix>`` into ``path``; the local paths."""
        from smlaunch.sdk.sessions import transfer

        return transfer.download_data(self.s3_client(), path, bucket, key_prefix)


def _check_quota(quota: object) -> int | None:
    if quota is not None and (not isinstance(quota, int) or isinstance(quota, bool) or quota < 1):
        raise ConfigurationError(
            "instance_count_quota",
            quota,
            "must be an integer >= 1",
            "pass your account's 'Number of instances per training job' quota, e.g. 40",
        )
    return quota
