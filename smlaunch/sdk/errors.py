"""Exceptions raised by the SDK. Every message names the argument, the value and the fix."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator

from smlaunch.contract.errors import FieldError

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""A write that failed for want of room: the filesystem is full, or the user's quota is."""


class SmlaunchError(Exception):
    """Base of every error smlaunch raises on purpose."""


class ConfigurationError(SmlaunchError, FieldError):
    """A bad argument, found before any work starts.

    ``field`` names the argument (``instance_count``, ``distribution.mpi.processes_per_host``),
    ``value`` is what the user passed and ``fix`` says what to do instead. ``str()`` reads
    ``instance_count=0: must be >= 1. Fix: pass instance_count=1 or more``. The shape is
    :class:`smlaunch.contract.errors.FieldError`'s, shared with the host's ``HostConfigurationError``.
    """


class JobNameTakenError(ConfigurationError):
    """``job_name`` is already used (or being claimed right now) in the backend's job store."""


class UnsupportedByBackendError(ConfigurationError):
    """The chosen backend cannot honour an argument; raised before anything is staged."""


class UnexpectedStatusException(ValueError):
    """A job ended in a status the caller did not allow: SageMaker SDK v2's
    ``sagemaker.exceptions.UnexpectedStatusException``, so ``except ValueError`` and ``except
    UnexpectedStatusException`` cells keep working.

    ``actual_status`` is the status the job ended with, ``allowed_statuses`` those that would not
    have raised (``["Completed", "Stopped"]`` for ``wait()``, as the SDK's).
    """

    def __init__(self, message: str, allowed_statuses: list[str], actual_status: str) -> None:
        self.allowed_statuses = allowed_statuses
        self.actual_status = actual_status
        super().__init__(message)


class CapacityError(UnexpectedStatusException):
    """A job that failed for want of capacity (its FailureReason names ``CapacityError``): SDK
    v2's ``sagemaker.exceptions.CapacityError``, so a cell can retry on another instance type."""


class JobFailedError(SmlaunchError, UnexpectedStatusException):
    """A training job ended Failed (a Stopped job ends ``wait()`` with a warning, as in the SDK;
    ``smlaunch run``, whose exit status must say whether the job completed, raises it for Stopped).

    Carries the job name, the final status and the FailureReason as DescribeTrainingJob reports
    them, plus the exit code of the failing rank when the backend knows it. An
    :class:`UnexpectedStatusException` (so a ``ValueError``) whose message has the SDK's shape,
    ``Error for Training job <name>: <status>. Reason: <reason>.``, without the SDK's link to
    SageMaker's troubleshooting guide (most jobs here are not SageMaker's).
    """

    def __init__(
        self,
        job_name: str,
        status: str,
        reason: str,
        exit_code: int | None = None,
        allowed_statuses: tuple[str, ...] = ("Completed", "Stopped"),
    ) -> None:
        self.job_name = job_name
        self.status = status
        self.reason = reason
        self.exit_code = exit_code
        super().__init__(
            f"Error for Training job {job_name}: {status}. Reason: {reason}.",
            allowed_statuses=list(allowed_statuses),
            actual_status=status,
        )


class JobCapacityError(JobFailedError, CapacityError):
    """A :class:`JobFailedError` for want of capacity: ``except CapacityError`` catches it too."""


class UnsupportedFeatureError(SmlaunchError, NotImplementedError):
    """A SageMaker SDK feature smlaunch does not provide (``deploy()``).

    The message says what is not supported and what to use instead, so a notebook cell copied from a
    SageMaker example fails with advice rather than an ``AttributeError``.
    """

    def __init__(self, feature: str, instead: str) -> None:
        self.feature = feature
        self.instead = instead
        super().__init__(f"{feature} is not supported by smlaunch. Instead: {instead}")


def require_type(field: str, value: object, expected: type | tuple[type, ...], fix: str) -> None:
    """Raise :class:`ConfigurationError` naming ``field`` unless ``value`` is an ``expected`` instance.

    A ``bool`` is never accepted as an ``int`` or ``float`` (``True`` is not a count), so pass
    ``bool`` itself where a flag is expected.
    """
    kinds = expected if isinstance(expected, tuple) else (expected,)
    is_bool = isinstance(value, bool)
    if isinstance(value, kinds) and (not is_bool or bool in kinds):
        return
    names = " or ".join("None" if kind is type(None) else kind.__name__ for kind in kinds)
    raise ConfigurationError(field, value, f"must be {names}, not {type(value).__name__}", fix)


class MissingExtraError(SmlaunchError, ImportError):
    """An optional feature's packages are not installed; the message names the extra to install."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        self.feature = feature
        self.package = package
        self.extra = extra
        super().__init__(
            f"{feature} needs {package}, which is not installed. Fix: pip install 'smlaunch[{extra}]'"
        )


class NoSpaceLeftError(SmlaunchError, OSError):
    """A write failed because its filesystem is full (or over quota); names the path and the fix.

    Still an ``OSError`` with the original ``errno``, so ``except OSError`` handlers keep working.
    ``str()`` reads ``No space left on device: <path> (<free> free there). Fix: <fix>``.
    """

    def __init__(self, path: str | os.PathLike[str], fix: str, error_number: int = errno.ENOSPC) -> None:
        self.path = str(path)
        self.fix = fix
        self.message = f"{no_space_reason(self.path)}. Fix: {fix}"
        super().__init__(error_number, self.message)

    def __str__(self) -> str:
        return self.message


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` is a write that failed for want of room (ENOSPC, EDQUOT)."""
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


def no_space_reason(path: str | os.PathLike[str]) -> str:
    """``No space left on device: <path> (<N> KiB free there)``: what a full disk did, where."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        free = f" ({shutil.disk_usage(probe).free // 1024} KiB free there)"
    except OSError:
        free = ""
    return f"No space left on device: {path}{free}"


@contextlib.contextmanager
def no_space_errors(path: str | os.PathLike[str], fix: str) -> Iterator[None]:
    """Turn a full disk inside the block into :class:`NoSpaceLeftError` naming ``path``, where the
    block writes (the error's own file name may be a copy's source, or missing). Other errors pass."""
    try:
        yield
    except NoSpaceLeftError:
        raise
    except OSError as error:
        if not is_no_space(error):
            raise
        assert error.errno is not None  # is_no_space matched it
        raise NoSpaceLeftError(path, fix, error.errno) from None
