"""``sagemaker.s3``-style helpers: :class:`S3Uploader` and :class:`S3Downloader`, and the
``upload_data`` / ``download_data`` behind the sessions' methods of those names.

Every transfer goes through :class:`runtime.transfer.TransferEngine` (parallel, multipart above the
threshold, verified, unchanged files skipped), with the session's S3 client.

Layout, as SDK v2's ``Session.upload_data`` / ``download_data`` (2.257.7) lay it out: a directory is
uploaded under ``<key_prefix>/<relative path>`` and its URI is ``s3://<bucket>/<key_prefix>``; a file
becomes ``<key_prefix>/<file name>`` and its URI names that object. A download writes each object
under the prefix at its path relative to the prefix (one object named by its full key: at its file
name). Deliberate differences: an empty or ``/``-terminated prefix gives ``name`` and
``prefix/name`` keys (the SDK writes ``/name`` and ``prefix//name``); a prefix that is not a whole
path segment (``data/train`` also matching ``data/train2/``) lays those objects out as a SageMaker
channel would, where the SDK refuses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from estimator.errors import ConfigurationError

_FIELD_URI_FIX = "pass an S3 URI such as 's3://my-bucket/data/train'"


def upload_data(
    s3_client: Any, path: str | Path, bucket: str, key_prefix: str, extra_args: dict[str, Any] | None = None
) -> str:
    """Upload the file or directory ``path`` under ``s3://<bucket>/<key_prefix>``; return its URI."""
    from runtime.transfer import TransferEngine, join_key

    source = Path(path).expanduser()
    if not source.exists():
        raise ConfigurationError(
            "path", str(path), "no such file or directory", "pass an existing local file or directory"
        )
    prefix = key_prefix.strip("/")
    base = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    with TransferEngine(s3_client=s3_client) as engine:
        if source.is_dir():
            engine.upload_dir(source, base + "/", extra_args=extra_args)
            return base
        uri = f"s3://{bucket}/{join_key(prefix, source.name)}"
        engine.upload_file(source, uri, extra_args=extra_args)
        return uri


def download_data(s3_client: Any, path: str | Path, bucket: str, key_prefix: str = "") -> list[str]:
    """Download every object under ``s3://<bucket>/<key_prefix>`` into the directory ``path``;
    return the local paths written (``[]`` when nothing is there, as the SDK returns)."""
    from runtime.transfer import TransferEngine

    destination = Path(path).expanduser()
    with TransferEngine(s3_client=s3_client) as engine:
        objects = engine.list(f"s3://{bucket}/{key_prefix}")
        engine.download_objects(objects, destination)
    return [str(destination / o.rel) for o in objects]


def _split(uri: object, field: str) -> tuple[str, str]:
    from runtime.transfer import split_s3_uri

    try:
        return split_s3_uri(str(uri)) if isinstance(uri, str) else split_s3_uri("")
    except ValueError:
        raise ConfigurationError(field, uri, "not an s3:// URI", _FIELD_URI_FIX) from None


def _session(sagemaker_session: Any) -> Any:
    if sagemaker_session is not None:
        return sagemaker_session
    from estimator.session import Session

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
