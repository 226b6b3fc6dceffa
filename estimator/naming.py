"""Training job names as SageMaker SDK v2 makes them, and their validation.

``<base>-YYYY-MM-DD-HH-MM-SS-mmm`` (UTC), at most 63 characters, pattern
``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``. The base is ``base_job_name`` or the image's repository name
(``pytorch-training``), truncated to fit as ``utils.name_from_base`` does. Pure functions; the clock
is a parameter so tests pin it.

Deliberate difference from the SDK: the milliseconds are always 3 digits, zero-padded (the SDK
takes the first digits of ``repr(time.time())``, which gives 1 or 2 digits when they are zeros).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from estimator.errors import ConfigurationError

MAX_JOB_NAME_CHARS = 63
JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
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
    if not isinstance(name, str) or not JOB_NAME_PATTERN.match(name):
        raise ConfigurationError(
            field,
            name,
            f"job names must be 1 to {MAX_JOB_NAME_CHARS} characters of letters, digits and '-', "
            "starting and ending with a letter or digit",
            "use e.g. 'bert-finetune-1', or set base_job_name and let smlaunch add the timestamp",
        )
    return name


def validate_base_job_name(base: object, field: str = "base_job_name") -> str:
    """A base must give valid names once truncated and timestamped."""
    if not isinstance(base, str) or not base:
        raise ConfigurationError(field, base, "must be a non-empty string", "pass e.g. 'bert-finetune'")
    candidate = name_from_base(base, datetime(2000, 1, 1, tzinfo=timezone.utc))
    if not JOB_NAME_PATTERN.match(candidate):
        raise ConfigurationError(
            field,
            base,
            "job names may only hold letters, digits and '-', and must start with a letter or digit",
            "use e.g. 'bert-finetune'",
        )
    return base
