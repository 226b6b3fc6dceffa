"""What an estimator needs from a session: :class:`TrainingSession`, a ``typing.Protocol``.

``LocalSession``, ``SlurmSession`` and ``Session`` (:mod:`smlaunch.sdk.sessions.sagemaker`) provide it, and so
can a test's fake: the estimator uses these members and nothing else of a session, never probing
for optional ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from smlaunch.sdk.backends.base import Backend


class TrainingSession(Protocol):
    """The session an estimator plans, stages and submits through."""

    @property
    def is_local(self) -> bool:
        """Whether the job runs on this machine (local types and ``file://`` paths allowed)."""
        ...

    @property
    def region_name(self) -> str:
        """The AWS region written into ``sagemaker_region`` (``"local"`` for local sessions)."""
        ...

    @property
    def instance_count_quota(self) -> int | None:
        """Instances per training job allowed, when the account's quota differs from SageMaker's
        default (``None``: the default)."""
        ...

    @property
    def sagemaker_config(self) -> dict[str, Any]:
        """The SageMaker SDK's ``config.yaml`` defaults (:mod:`smlaunch.sdk.request.sdk_config`; ``{}``:
        none)."""
        ...

    @property
    def processes_per_host(self) -> int | None:
        """Ranks per host pinned by a local session (``None``: the instance type's)."""
        ...

    def backend(self) -> Backend:
        """Where jobs of this session run."""
        ...

    def expand_role(self, role: str | None) -> str:
        """The IAM role's full ARN (local sessions accept any)."""
        ...

    def default_output_path(self) -> str:
        """Where output goes when the estimator has no ``output_path``."""
        ...

    def s3_client(self) -> Any:
        """The boto3 S3 client that stages code and inputs."""
        ...

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        """Extra S3 arguments for writes to ``bucket`` (``ExpectedBucketOwner``), or ``{}``."""
        ...

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        """Make a local input path readable by the job; returns the URI its channel names."""
        ...
