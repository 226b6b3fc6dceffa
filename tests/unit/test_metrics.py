"""Metric values scraped from host-prefixed log lines, and final metrics from a description."""

from __future__ import annotations

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.metrics import MetricParser, MetricSample, final_metrics, metric_values, split_prefix

DEFINITIONS = [
    {"Name": "train:loss", "Regex": r"^loss=([0-9.eE+-]+)"},
    {"Name": "val:acc", "Regex": r"val_acc: ([0-9.]+)"},
]


def test_values_per_metric_in_log_order_with_prefixes_removed() -> None:
    lines = [
        "[algo-1] loss=0.9",
        "[algo-2] loss=0.8 val_acc: 0.5",  # anchored regex still matches after the prefix is removed
        "[algo-1/rank 3] loss=1e-3",
        "loss=0.5",
        "[algo-1] noise loss=0.1",  # '^' anchored: not a value
        "[sagemaker] 2026-11-22 02:27:58 Training - loss=7",  # service lines are never scraped
        "[algo-1] val_acc: 0.75 then val_acc: 0.8",  # every match counts
    ]
    assert metric_values(lines, DEFINITIONS) == {
        "train:loss": [0.9, 0.8, 0.001, 0.5],
        "val:acc": [0.5, 0.75, 0.8],
    }


def test_samples_name_their_host() -> None:
    parser = MetricParser(DEFINITIONS)
    assert parser.parse_line("[algo-2] loss=0.25") == [MetricSample("train:loss", 0.25, "algo-2")]
    assert parser.parse_line("[algo-1/rank 3] loss=1") == [MetricSample("train:loss", 1.0, "algo-1/rank 3")]


def test_metric_without_match_is_present_and_empty() -> None:
    assert metric_values(["[algo-1] nothing"], DEFINITIONS) == {"train:loss": [], "val:acc": []}
    assert metric_values(["x"], None) == {}


def test_unparseable_capture_is_skipped() -> None:
    assert metric_values(["[algo-1] loss=abc"], [{"Name": "l", "Regex": r"loss=(\S+)"}]) == {"l": []}


@pytest.mark.parametrize(
    ("definitions", "field"),
    [
        ([{"Name": "l", "Regex": "loss=([0-9"}], "metric_definitions[0].Regex"),
        ([{"Name": "l", "Regex": "loss=[0-9]+"}], "metric_definitions[0].Regex"),
        ([{"Name": "", "Regex": "(x)"}], "metric_definitions[0]"),
        ([{"Name": "ok", "Regex": "(x)"}, {"Regex": "(x)"}], "metric_definitions[1]"),
    ],
)
def test_bad_definitions_name_the_entry(definitions: list[dict[str, str]], field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        MetricParser(definitions)
    assert error.value.field == field
    assert error.value.fix


def test_split_prefix() -> None:
    assert split_prefix("[algo-2] a b") == ("algo-2", "a b")
    assert split_prefix("[algo-1/rank 12] x") == ("algo-1/rank 12", "x")
    assert split_prefix("[not a prefix] x") == (None, "[not a prefix] x")


def test_final_metrics_from_description() -> None:
    description = {
        "FinalMetricDataList": [
            {"MetricName": "train:loss", "Value": 0.125, "Timestamp": 0},
            {"MetricName": "val:acc", "Value": 0.9},
        ]
    }
    assert final_metrics(description) == {"train:loss": 0.125, "val:acc": 0.9}
    assert final_metrics({}) == {}
