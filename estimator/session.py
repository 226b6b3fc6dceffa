"""Sessions: where a job runs, and the clients it needs there.

An estimator asks its session for three things only, so the estimator never knows which backend it
talks to:

- ``session.backend()``: the :class:`~estimator.backends.base.Backend` that runs jobs;
- ``session.region_name``: written into ``sagemaker_region``;
- ``session.default_output_path()``: ``output_path`` when the user gave none (``s3://<bucket>/``
  for SageMaker, ``file://<jobs root>/`` locally);
- ``session.expand_role(role)``: the role ARN for the request;
- ``session.s3_client()``: the boto3 S3 client used for staging to and from ``s3://``; created
  lazily, injected by tests.

``LocalSession`` selects the local backend (processes by default; ``executor="docker"`` for one
container per host). ``Session`` selects Amazon SageMaker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from estimator.errors import ConfigurationError

if TYPE_CHECKING:
    from estimator.backends.base import Backend

LOCAL_ROOT_ENV = "SMLAUNCH_HOME"
LOCAL_EXECUTOR_ENV = "SMLAUNCH_EXECUTOR"
Executor = Literal["process", "docker"]


def default_local_root() -> Path:
    """``$SMLAUNCH_HOME/jobs`` or ``~/.smlaunch/jobs``: where local jobs keep their trees and logs."""
    home = os.environ.get(LOCAL_ROOT_ENV)
    return (Path(home) if home else Path.home() / ".smlaunch") / "jobs"


class LocalSession:
    """Run jobs on this machine: every host of the topology emulated, no AWS and no Docker needed.

    ``root``: directory holding one folder per job (default :func:`default_local_root`).
    ``processes_per_host``: ranks per emulated host for launchers that start one rank per GPU
    (torchrun-style DDP, smddp). Default: the instance type's GPU count, at least 1. An smlaunch
    extension, since a laptop rarely has the GPUs of the instance type it emulates.
    ``executor``: ``process`` (default) or ``docker`` (one container per host); the
    ``SMLAUNCH_EXECUTOR`` environment variable sets the default.
    ``s3_client``: boto3 S3 client for ``s3://`` code, inputs and outputs (created on first use).
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
    ) -> None:
        executor = executor or os.environ.get(LOCAL_EXECUTOR_ENV, "process")  # type: ignore[assignment]
        if executor not in ("process", "docker"):
            raise ConfigurationError(
                "executor", executor, "unknown executor", "use executor='process' or executor='docker'"
            )
        if processes_per_host is not None and (
            not isinstance(processes_per_host, int) or processes_per_host < 1
        ):
            raise ConfigurationError(
                "processes_per_host", processes_per_host, "must be an integer >= 1",
                "pass processes_per_host=1 or more, or leave it unset to use the instance's GPU count",
            )
        if stop_grace_seconds is not None and stop_grace_seconds < 0:
            raise ConfigurationError(
                "stop_grace_seconds", stop_grace_seconds, "must be >= 0", "pass a number of seconds, e.g. 120"
            )
        self.root = Path(root).expanduser().resolve() if root is not None else default_local_root()
        self.processes_per_host = processes_per_host
        self.executor: Executor = executor  # type: ignore[assignment]
        self.stop_grace_seconds = stop_grace_seconds
        self._s3_client = s3_client
        self._docker_client = docker_client
        self._backend: Backend | None = None

    def s3_client(self) -> Any:
        if self._s3_client is None:
            import boto3

            self._s3_client = boto3.client("s3")
        return self._s3_client

    def expand_role(self, role: str | None) -> str:
        # Local runs need no IAM role; keep the user's value so the request looks like SageMaker's.
        return role or "arn:aws:iam::000000000000:role/smlaunch-local"

    def default_output_path(self) -> str:
        return self.root.as_uri() + "/"

    def backend(self) -> Backend:
        if self._backend is None:
            if self.executor == "docker":
                from estimator.backends.docker import DockerBackend

                self._backend = DockerBackend(session=self, client=self._docker_client)
            else:
                from estimator.backends.local import LocalBackend

                self._backend = LocalBackend(session=self)
        return self._backend
