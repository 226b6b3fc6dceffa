"""The one error shape of smlaunch: "this field, this value, this problem, this fix".

Part of the shared layer (see :mod:`smlaunch.contract`): the estimator's ``ConfigurationError`` and the
host's :class:`HostConfigurationError` both derive from :class:`FieldError`, so a message reads the
same whether the notebook or a host found the mistake, and code that checks a value in both places
(the ``SMLAUNCH_FAULTS`` specification) raises one type. Pure: imports nothing of smlaunch.
"""

from __future__ import annotations


class FieldError(ValueError):
    """A bad value for a named field, with what is wrong and how to fix it.

    ``field`` names the field (``instance_count``, ``SMLAUNCH_FAULTS``), ``value`` is what was given,
    ``problem`` says what is wrong and ``fix`` what to do instead. ``str()`` reads
    ``instance_count=0: must be >= 1. Fix: pass instance_count=1 or more``.
    """

    def __init__(self, field: str, value: object, problem: str, fix: str | None = None) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.fix = fix
        message = f"{field}={value!r}: {problem}"
        if fix:
            message += f". Fix: {fix}"
        super().__init__(message)


class HostConfigurationError(FieldError):
    """The host's configuration (config files, ``SMLAUNCH_*`` variables) is unusable.

    Raised before any process starts. Like the SDK's ``ConfigurationError`` (which the runtime may
    not import: both derive from :class:`FieldError`), it names the field, the value and the fix.
    """
