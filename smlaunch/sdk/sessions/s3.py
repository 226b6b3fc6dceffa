"""``sagemaker.s3``'s :class:`S3Uploader` and :class:`S3Downloader`: through the given session's
``upload_data`` / ``download_data`` (:mod:`smlaunch.sdk.sessions.transfer` lays the objects out),
else a SageMaker :class:`~smlaunch.sdk.sessions.sagemaker.Session`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError

_FIELD_URI_FIX = "pass an S3 URI such as 's3://my-bucket/data/train'"


def _split(uri: object, field: str) -> tuple[str, str]:
    from smlaunch.contract.transfer.uris import split_s3_uri

    try:
        return split_s3_uri(str(uri)) if isinstance(uri, str) else split_s3_uri("")
    except ValueError:
        raise ConfigurationError(field, uri, "not an s3:// URI", _FIELD_URI_FIX) from None


def _session(sagemaker_session: Any) -> Any:
    if sagemaker_session is not None:
        return sagemaker_session
    from smlaunch.sdk.sessions.sagemaker import Session

    return Session()


class S3Uploader:
    """``sagemaker.s3.S3Uploader``: upload local files or directories to S3."""

    @staticmethod
    def upload(
        local_path: str | Path,
        desired_s3_uri: str,
        kms_key: str | None = None,
        sagemaker_session: Any | None = None,
    ) -> str:
        """Upload ``local_path`` (a file or a directory) under ``desired_s3_uri``; return the S3 URI of
        what was uploaded. ``kms_key`` encrypts the objects with that KMS key (SSE-KMS)."""
        bucket, prefix = _split(desired_s3_uri, "desired_s3_uri")
        extra_args = {"SSEKMSKeyId": kms_key, "ServerSideEncryption": "aws:kms"} if kms_key else None
        return str(
            _session(sagemaker_session).upload_data(
                local_path, bucket=bucket, key_prefix=prefix, extra_args=extra_args
            )
        )


class S3Downloader:
    """``sagemaker.s3.S3Downloader``: download S3 objects to this machine."""

    @staticmethod
    def download(
        s3_uri: str, local_path: str | Path, kms_key: str | None = None, sagemaker_session: Any | None = None
    ) -> list[str]:
        """Download the object or every object under ``s3_uri`` into the directory ``local_path``;
        return the local paths. Objects encrypted with SSE-KMS decrypt without a key; ``kms_key``
        (which the SDK sends as an SSE-C customer key) is refused."""
        if kms_key is not None:
            raise ConfigurationError(
                "kms_key",
                kms_key,
                "SSE-KMS objects are decrypted by S3 for readers allowed to use the key, and SSE-C "
                "customer keys are not supported",
                "leave kms_key unset",
            )
        bucket, prefix = _split(s3_uri, "s3_uri")
        return list(_session(sagemaker_session).download_data(local_path, bucket=bucket, key_prefix=prefix))
