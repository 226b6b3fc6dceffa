"""Where bytes are: ``s3://`` URIs, ``file://`` URIs and local paths, and S3 keys under a prefix.

Pure string and path work, no I/O: what the transfer engine (:mod:`.engine`), the channel delivery
and the sessions agree on when they name an object.

S3 prefix semantics (as SageMaker channels): ``s3://b/p`` selects every key starting with ``p``; a
key's relative path is the key with the prefix removed and leading ``/`` stripped (an object whose
key *is* the prefix keeps its base name).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` -> ``("bucket", "key/prefix")``."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri_or_path: str | Path) -> Path:
    """A ``file://`` URI or a plain path -> absolute :class:`Path` (relative paths are taken from the
    working directory, so ``Path.as_uri`` works on every result)."""
    text = str(uri_or_path)
    if text.startswith("file://"):
        return Path(unquote(urlparse(text).path))
    return Path(text).absolute()


def is_s3(uri: str | Path) -> bool:
    """Whether ``uri`` names an S3 location (``s3://``) rather than a local one."""
    return str(uri).startswith("s3://")


def relative_key(prefix: str, key: str) -> str:
    """Path of ``key`` relative to the S3 prefix ``prefix``, the way a channel lays it out."""
    rel = key[len(prefix) :].lstrip("/")
    return rel or key.rsplit("/", 1)[-1]


def join_key(prefix: str, rel: str) -> str:
    """The key of ``rel`` under the S3 prefix ``prefix`` (the inverse of :func:`relative_key`)."""
    if not prefix:
        return rel
    return prefix.rstrip("/") + "/" + rel
