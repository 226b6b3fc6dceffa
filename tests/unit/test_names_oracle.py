"""Name checks against CreateTrainingJob's own patterns, read from botocore's service model: ours
match the whole value (a trailing newline is refused, as the service refuses it), accept and refuse
exactly what the API's pattern and length limits do, and NUL is refused in every argument at
construction, naming it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from smlaunch import Session, TrainingInput
from smlaunch.sdk import inputs
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request import naming, validation
from tests.unit.test_estimator import ROLE, config_error, local, remote

MODEL = botocore.session.get_session().get_service_model("sagemaker")

SAMPLES = [
    "abc",
    "abc\n",
    "\nabc",
    "a\nb",
    "a\rb",
    "a\x00b",
    "a-b",
    "a--b",
    "-ab",
    "ab-",
    "a_b",
    "a.b",
    "_X1",
    "1X",
    "x" * 63,
    "x" * 64,
    "x" * 65,
    "x" * 257,
    "x" * 513,
    "é",
    "a b",
    "",
]


def _api_accepts(shape: str, value: str) -> bool:
    """What the API accepts for ``shape``: its pattern matched as a whole, and its length limits."""
    metadata = MODEL.shape_for(shape).metadata
    return (
        re.fullmatch(metadata["pattern"], value) is not None
        and metadata.get("min", 0) <= len(value) <= metadata["max"]
    )


def _accepts(check: Callable[[Any], Any], value: Any) -> bool:
    try:
        check(value)
    except ConfigurationError:
        return False
    return True


@pytest.mark.parametrize(
    ("ours", "shape"),
    [
        (naming.JOB_NAME_PATTERN, "TrainingJobName"),
        (naming.EXPERIMENT_NAME_PATTERN, "ExperimentEntityName"),
        (naming.CHANNEL_NAME_PATTERN, "ChannelName"),
        (naming.ENVIRONMENT_KEY_PATTERN, "TrainingEnvironmentKey"),
        (naming.ENVIRONMENT_VALUE_PATTERN, "TrainingEnvironmentValue"),
        (naming.ROLE_ARN_PATTERN, "RoleArn"),
    ],
)
def test_patterns_are_the_apis(ours: re.Pattern[str], shape: str) -> None:
    assert ours.pattern == MODEL.shape_for(shape).metadata["pattern"]


def test_hyperparameter_pattern_is_the_apis_with_javas_dot() -> None:
    for shape in ("HyperParameterKey", "HyperParameterValue"):
        assert MODEL.shape_for(shape).metadata["pattern"] == ".*"
    # The service's regexes are Java's: `.` matches no line terminator of Java's.
    for terminator in "\n\r\u0085\u2028\u2029":
        assert naming.HYPERPARAMETER_PATTERN.fullmatch(f"a{terminator}") is None
    assert naming.HYPERPARAMETER_PATTERN.fullmatch('"tab\\there", \t é') is not None


def _environment_key(key: str) -> None:
    validation.check_environment({key: "1"})


@pytest.mark.parametrize(
    ("shape", "check"),
    [
        ("TrainingJobName", naming.validate_job_name),
        ("ChannelName", inputs.validate_channel_name),
        ("TrainingEnvironmentKey", _environment_key),
        ("ExperimentEntityName", lambda name: validation.experiment_config({"ExperimentName": name})),
    ],
)
def test_ours_refuse_exactly_what_the_api_refuses(shape: str, check: Callable[[str], Any]) -> None:
    for value in SAMPLES:
        assert _accepts(check, value) is _api_accepts(shape, value), repr(value)


def test_environment_values_as_the_api_but_nul(src: Path) -> None:
    for value in SAMPLES:
        # The API's value pattern takes any character; NUL, which no process can be given, is
        # refused at construction as well.
        expected = _api_accepts("TrainingEnvironmentValue", value) and "\x00" not in value
        assert _accepts(lambda v: remote(src, environment={"X": v}), value) is expected, repr(value)


def test_hyperparameter_keys_and_values_as_the_api() -> None:
    for value in SAMPLES:
        if not value or "\r" in value:  # our keys are 1+ characters; `\r` is Java's, see above
            continue
        as_key, as_value = {value: "1"}, {"k": value}
        assert _accepts(hp.check_limits, as_key) is _api_accepts("HyperParameterKey", value)
        assert _accepts(hp.check_limits, as_value) is _api_accepts("HyperParameterValue", value)


def test_the_issue_cases_are_refused(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path)
    assert config_error(lambda: est.plan(job_name="abc\n")).field == "job_name"
    assert config_error(lambda: local(src, tmp_path, environment={"X\n": "1"})).field == "environment key"
    error = config_error(lambda: est.plan({"train\n": (tmp_path).as_uri()}, job_name="abc"))
    assert error.value == "train\n"
    assert config_error(lambda: Session().expand_role(ROLE + "\n")).field == "role"  # no AWS call


@pytest.mark.parametrize(
    ("argument", "value", "field"),
    [
        ("environment", {"A": "x\x00y"}, "environment['A']"),
        ("environment", {"A\x00": "x"}, "environment key"),
        ("hyperparameters", {"lr": ["a", "b\x00"]}, "hyperparameters['lr'][1]"),
        ("base_job_name", "a\x00b", "base_job_name"),
        ("output_path", "s3://bucket/a\x00b", "output_path"),
        ("tags", [{"Key": "k", "Value": "\x00"}], "tags[0]['Value']"),
        ("checkpoint_local_path", "/opt/ml/\x00", "checkpoint_local_path"),
    ],
)
def test_nul_in_any_argument_is_refused_at_construction_naming_it(
    src: Path, tmp_path: Path, argument: str, value: Any, field: str
) -> None:
    error = config_error(lambda: remote(src, **{argument: value}))
    assert error.field == field and "NUL" in error.problem


def test_nul_in_the_entry_point_is_refused_naming_it(src: Path, tmp_path: Path) -> None:
    assert config_error(lambda: local(src, tmp_path, entry_point="train\x00.py")).field == "entry_point"


def test_nul_in_an_input_is_refused_naming_it(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path)
    error = config_error(lambda: est.plan({"train": "s3://bucket/a\x00b"}, job_name="abc"))
    assert error.field == "inputs['train']" and "NUL" in error.problem
    assert config_error(lambda: TrainingInput("s3://bucket/data", content_type="text/\x00")).field == (
        "content_type"
    )
