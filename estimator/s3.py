"""Alias of :mod:`smlaunch.sdk.sessions.s3` (the import path of earlier releases)."""

from smlaunch.sdk.sessions.s3 import S3Downloader as S3Downloader
from smlaunch.sdk.sessions.s3 import S3Uploader as S3Uploader

__all__ = ["S3Downloader", "S3Uploader"]
