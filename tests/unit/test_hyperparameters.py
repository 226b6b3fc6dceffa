"""Hyperparameter encoding (SDK v2's json.dumps per value) and the CreateTrainingJob limits."""

from __future__ import annotations

import json

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import hyperparameters as hp


def test_encoding_matches_json_dumps() -> None:
    values = {
        "epochs": 10,
        "lr": 3e-5,
        "gamma": 0.7,
        "name": "train.py",
        "on": True,
        "off": False,
        "none": None,
        "list": [1, 2],
        "dict": {"a": 1},
        "neg": -2,
    }
    encoded = hp.encode(values)
    assert encoded == {
        "epochs": "10",
        "lr": "3e-05",
        "gamma": "0.7",
        "name": '"train.py"',
        "on": "true",
        "off": "false",
        "none": "null",
        "list": "[1, 2]",
        "dict": '{"a": 1}',
        "neg": "-2",
    }
    assert list(encoded) == list(values)
    assert hp.decode(encoded) == values


def test_keys_are_stringified_like_the_sdk() -> None:
    assert hp.encode({1: "x"}) == {"1": '"x"'}


def test_not_serialisable_names_the_key() -> None:
    with pytest.raises(ConfigurationError) as info:
        hp.encode({"epochs": 1, "optimizer": object()})
    assert info.value.field == "hyperparameters['optimizer']"
    assert "not JSON-serialisable" in str(info.value) and "Fix:" in str(info.value)


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigurationError, match="must be a dict"):
        hp.encode([1, 2])  # type: ignore[arg-type]


def test_limits() -> None:
    hp.check_limits({f"k{i}": "1" for i in range(100)})
    with pytest.raises(ConfigurationError, match="at most 100"):
        hp.check_limits({f"k{i}": "1" for i in range(101)})
    hp.check_limits({"k" * 256: "1"})
    with pytest.raises(ConfigurationError, match="1 to 256 characters") as info:
        hp.check_limits({"k" * 257: "1"})
    assert info.value.value == "k" * 257
    hp.check_limits({"v": "x" * 2500})
    with pytest.raises(ConfigurationError, match="2501 characters") as info:
        hp.check_limits(hp.encode({"v": "x" * 2499}))  # 2499 + 2 quotes
    assert info.value.field == "hyperparameters['v']"


def test_decode_keeps_non_json_text() -> None:
    assert hp.decode({"a": "plain text", "b": json.dumps([1])}) == {"a": "plain text", "b": [1]}
