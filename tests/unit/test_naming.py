"""Job names: SDK v2's format, truncation and validation."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import naming

WHEN = datetime(2026, 11, 22, 2, 27, 47, 316_999, tzinfo=timezone.utc)


def test_format() -> None:
    assert naming.name_from_base("pytorch-training", WHEN) == "pytorch-training-2026-11-22-02-27-47-316"
    early = datetime(2026, 1, 2, 3, 4, 5, 7_000, tzinfo=timezone.utc)
    assert naming.timestamp(early) == "2026-01-02-03-04-05-007"


def test_timestamp_is_utc() -> None:
    from datetime import timedelta

    local = WHEN.astimezone(timezone(timedelta(hours=5)))
    assert naming.timestamp(local) == "2026-11-22-02-27-47-316"


def test_long_base_is_truncated_like_the_sdk() -> None:
    base = "b" * 80
    name = naming.name_from_base(base, WHEN)
    assert len(name) == 63 and name == "b" * 39 + "-2026-11-22-02-27-47-316"
    naming.validate_job_name(name)


def test_base_from_image_and_back() -> None:
    image = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310"
    assert naming.base_name_from_image(image) == "pytorch-training"
    assert naming.base_name_from_image("my-image") == "my-image"
    assert naming.base_from_name("bert-finetune-2026-11-22-02-30-47-904") == "bert-finetune"


@pytest.mark.parametrize("bad", ["-lead", "trail-", "has_underscore", "a" * 64, "", "sp ace"])
def test_invalid_job_names(bad: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        naming.validate_job_name(bad)
    assert info.value.field == "job_name" and info.value.value == bad and info.value.fix


def test_double_dash_is_valid() -> None:
    assert naming.validate_job_name("a--b") == "a--b"


def test_invalid_base() -> None:
    with pytest.raises(ConfigurationError, match="base_job_name='bad_base'"):
        naming.validate_base_job_name("bad_base")
