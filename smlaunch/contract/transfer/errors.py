"""The errors a transfer raises, below every module of :mod:`smlaunch.contract.transfer`.

Their own module because both halves raise them: the hash cache's :func:`~.hashes.open_source`
refuses a source that is not a regular file, and the engine's transfers fail or mismatch.
"""

from __future__ import annotations


class TransferError(RuntimeError):
    """A transfer failed after its retries."""


class TransferVerificationError(TransferError):
    """The bytes received do not match the size or checksum the source declares."""
