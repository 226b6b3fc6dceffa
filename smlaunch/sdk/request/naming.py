"""Training job names as SageMaker SDK v2 makes them, and the patterns CreateTrainingJob checks
names against.

``<base>-YYYY-MM-DD-HH-MM-SS-mmm`` (UTC), at most 63 characters, pattern
``[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``. The base is ``base_job_name`` or the image's repository name
(``pytorch-training``), truncated to fit as ``utils.name_from_base`` does. Pure functions; the clock
is a parameter so tests pin it.

The ``*_PATTERN`` constants are the API's own (botocore's service model, shape named beside each;
``tests/unit/test_names_oracle.py`` reads them from there). The service matches a whole value, so
every check uses ``fullmatch``: ``^...$`` with ``match`` would also accept a trailing newline. The
service's regexes are Java's, whose ``.`` matches no line terminator (``\r``, ``\u2028``... as well
as ``\n``); :data:`HYPERPARAMETER_PATTERN` spells that out.

Deliberate difference from the SDK: the milliseconds are always 3 digits, zero-padded (the SDK
takes the first digits of ``repr(time.time())``, which gives 1 or 2 digits when they are zeros).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from smlaunch.sdk.errors import ConfigurationError

MAX_JOB_NAME_CHARS = 63
JOB_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")  # TrainingJobName
EXPERIMENT_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,119}")  # ExperimentEntityName
CHANNEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9\.\-_]+")  # ChannelName (1..64)
ENVIRONMENT_KEY_PATTERN = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # TrainingEnvironmentKey (..512)
ENVIRONMENT_VALUE_PATTERN = re.compile(r"[\S\s]*")  # TrainingEnvironmentValue (..512)
HYPERPARAMETER_PATTERN = re.compile("[^\n\r\u0085\u2028\u2029]*")
"""HyperParameterKey and HyperParameterValue, ``.*`` with Java's ``.`` (no line terminator)."""
ROLE_ARN_PATTERN = re.compile(r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")  # RoleArn
_IMAGE_PATTERN = re.compile(r"^(.+/)?([^:/]+)(:[^:]+)?$")
_TIMESTAMP_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}-\d{1,3}$")


def timestamp(now: datetime | None = None) -> str:
    """``YYYY-MM-DD-HH-MM-SS-mmm`` in UTC."""
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d-%H-%M-%S-") + f"{moment.microsecond // 1000:03d}"


def base_name_from_image(image: str) -> str:
    """The ECR repository name of an image URI (``.../pytorch-training:2.1.0-gpu-py310`` ->
    ``pytorch-training``), as ``utils.base_name_from_image``."""
    match = _IMAGE_PATTERN.match(image)
    return match.group(2) if match else image


def name_from_base(base: str, now: datetime | None = None) -> str:
    """``<base>-<timestamp>``, the base truncated so the name fits in 63 characters."""
    stamp = timestamp(now)
    return f"{base[: MAX_JOB_NAME_CHARS - len(stamp) - 1]}-{stamp}"


def base_from_name(name: str) -> str:
    """Strip the timestamp :func:`name_from_base` appended (used by ``attach``)."""
    return _TIMESTAMP_SUFFIX.sub("", name)


def validate_job_name(name: object, field: str = "job_name") -> str:
    """Return ``name`` when SageMaker would accept it, else :class:`ConfigurationError`."""
    return check_name(
        name,
        field,
        JOB_NAME_PATTERN,
        f"job names must be 1 to {MAX_JOB_NAME_CHARS} characters",
        "use e.g. 'bert-finetune-1', or set base_job_name and let smlaunch add the timestamp",
    )


def check_name(name: object, field: str, pattern: re.Pattern[str], what: str, fix: str) -> str:
    """Return ``name`` when it matches SageMaker's ``pattern`` for the name (letters, digits and
    ``-``, starting and ending with a letter or digit), else :class:`ConfigurationError`; ``what``
    says which names and how long they may be."""
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise ConfigurationError(
            field,
            name,
            f"{what} of letters, digits and '-', starting and ending with a letter or digit",
            fix,
        )
    return name


def validate_base_job_name(base: object, field: str = "base_job_name") -> str:
    """A base must give valid names once truncated and timestamped."""
    if not isinstance(base, str) or not base:
        raise ConfigurationError(field, base, "must be a non-empty string", "pass e.g. 'bert-finetune'")
    candidate = name_from_base(base, datetime(2000, 1, 1, tzinfo=timezone.utc))
    if not JOB_NAME_PATTERN.fullmatch(candidate):
        raise ConfigurationError(
            field,
            base,
            "job names may only hold letters, digits and '-', and must start with a letter or digit",
            "use e.g. 'bert-finetune'",
        )
    return base


def refuse_nul(arguments: Mapping[str, Any]) -> None:
    """:class:`ConfigurationError` naming the first argument that holds a NUL character anywhere
    (a string, a path, or a key or value of a list or dict inside it).

    No API field, environment variable or process argument can carry one: SageMaker refuses it,
    and locally it would end the job in an internal traceback when a host starts.
    """
    for field, value in arguments.items():
        _refuse_nul(field, value)


def _refuse_nul(field: str, value: Any) -> None:
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and "\0" in text:
            raise ConfigurationError(
                field,
                value,
                "holds a NUL character (\\x00), which no SageMaker field, environment variable or "
                "process argument can carry",
                "remove the NUL character",
            )
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _refuse_nul(f"{field} key", key)
            _refuse_nul(f"{field}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _refuse_nul(f"{field}[{index}]", item)
