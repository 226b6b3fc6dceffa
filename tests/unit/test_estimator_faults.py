"""``environment={"SMLAUNCH_FAULTS": ...}`` is validated when the estimator is constructed.

A fault rehearsal with a typo must fail at ``PyTorch(...)``, naming the estimator argument, the
value and the fix, not minutes later when a host's runtime starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, PyTorch
from smlaunch.sdk.errors import ConfigurationError

FIELD = "environment['SMLAUNCH_FAULTS']"


def make_estimator(tmp_path: Path, environment: dict[str, str]) -> PyTorch:
    (tmp_path / "train.py").write_text("print('hello')\n")
    return PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path),
        role="arn:aws:iam::111122223333:role/faults",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        environment=environment,
        sagemaker_session=LocalSession(tmp_path / "jobs"),
    )


def faults(*entries: dict[str, Any]) -> str:
    return json.dumps(list(entries))


def test_valid_faults_are_kept(tmp_path: Path) -> None:
    value = faults(
        {"kind": "crash", "rank": 0, "host": "algo-2", "after_seconds": 1, "exit_code": 7},
        {"kind": "kill_host", "host": "algo-2", "after_seconds": 3},
    )
    estimator = make_estimator(tmp_path, {"SMLAUNCH_FAULTS": value, "NCCL_DEBUG": "INFO"})
    assert estimator.environment == {"SMLAUNCH_FAULTS": value, "NCCL_DEBUG": "INFO"}


def test_environment_without_faults_is_untouched(tmp_path: Path) -> None:
    assert make_estimator(tmp_path, {"NCCL_DEBUG": "INFO"}).environment == {"NCCL_DEBUG": "INFO"}


def test_not_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_estimator(tmp_path, {"SMLAUNCH_FAULTS": "crash rank 1"})
    error = caught.value
    assert error.field == FIELD
    assert error.value == "crash rank 1"
    assert str(error).startswith(f"{FIELD}='crash rank 1': is not JSON. Fix: write a JSON list, e.g. ")


def test_unknown_kind_names_the_entry_and_the_choices(tmp_path: Path) -> None:
    value = faults({"kind": "explode", "rank": 1})
    with pytest.raises(ConfigurationError) as caught:
        make_estimator(tmp_path, {"SMLAUNCH_FAULTS": value})
    assert caught.value.field == FIELD
    assert caught.value.value == value
    assert str(caught.value) == (
        f"{FIELD}={value!r}: entry 0 ({json.dumps({'kind': 'explode', 'rank': 1})}): kind='explode' is "
        "not one of ('crash', 'hang', 'kill', 'kill_host', 'spot'). Fix: pick one of them"
    )


@pytest.mark.parametrize(
    ("entry", "problem", "fix"),
    [
        ({"kind": "crash"}, "crash needs rank >= 0, got None", 'add "rank": 0'),
        ({"kind": "kill_host"}, "kill_host needs a host", 'add "host": "algo-2"'),
        (
            {"kind": "hang", "rank": 0, "after": 3},
            "has unknown field(s) ['after']",
            "use only ['after_lines', 'after_seconds', 'attempt', 'exit_code', 'host', 'kind', 'rank']",
        ),
        (
            {"kind": "kill", "rank": 1, "exit_code": 9},
            "exit_code applies to kind crash only",
            'drop "exit_code"',
        ),
    ],
)
def test_bad_entry(tmp_path: Path, entry: dict[str, Any], problem: str, fix: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_estimator(tmp_path, {"SMLAUNCH_FAULTS": faults(entry)})
    assert caught.value.field == FIELD
    assert problem in caught.value.problem
    assert caught.value.fix == fix
    assert str(caught.value).startswith(f"{FIELD}={faults(entry)!r}: ")
