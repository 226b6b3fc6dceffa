"""``upload_data`` / ``download_data``: a local file or directory to and from S3, behind the sessions'
methods of those names (and :mod:`smlaunch.sdk.sessions.s3`'s ``S3Uploader`` / ``S3Downloader``).

Every transfer goes through :class:`smlaunch.contract.transfer.engine.TransferEngine` (parallel,
multipart above the threshold, verified, unchanged files skipped), with the session's S3 client.

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

from smlaunch.sdk.errors import ConfigurationError


def upload_data(
    s3_client: Any, path: str | Path, bucket: str, key_prefix: str, extra_args: dict[str, Any] | None = None
) -> str:
    """Upload the file or directory ``path`` under ``s3://<bucket>/<key_prefix>``; return its URI."""
    from smlaunch.contract.transfer.engine import TransferEngine
    from smlaunch.contract.transfer.uris import join_key

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
    from smlaunch.contract.transfer.engine import TransferEngine

    destination = Path(path).expanduser()
    with TransferEngine(s3_client=s3_client) as engine:
        objects = engine.list(f"s3://{bucket}/{key_prefix}")
        engine.download_objects(objects, destination)
    return [str(destination / o.rel) for o in objects]
