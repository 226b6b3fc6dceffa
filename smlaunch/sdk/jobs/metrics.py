"""Training metrics: values scraped from log lines with ``metric_definitions``, and a job's final metrics.

SageMaker applies each ``{"Name": ..., "Regex": ...}`` of ``AlgorithmSpecification.MetricDefinitions``
to every log line of the job and records the first capture group of each match as a value of that
metric; ``DescribeTrainingJob.FinalMetricDataList`` holds the last value of each. This module does
the same from the lines a backend yields, so ``metric_definitions`` work identically on every backend
(locally there is no service to scrape them).

Lines from ``Backend.log_lines`` carry our host prefix (``[algo-2] ``, ``[algo-1/rank 3] ``); it is
removed before matching, so a regex written for SageMaker (the bare message, maybe anchored with
``^``) matches the same text here. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from smlaunch.sdk.errors import ConfigurationError

SERVICE_SOURCE = "sagemaker"
"""Prefix of lines written by the service, not a host (status transitions, billing summary): never scraped."""
LOCAL_SOURCE = "smlaunch"
"""Prefix of lines smlaunch itself writes to a local job's log (topology, transitions): never scraped."""

_PREFIX_RE = re.compile(r"^\[(?P<source>[^\]\s]+(?:/rank \d+)?)\] ?")


@dataclass(frozen=True)
class MetricSample:
    """One value of one metric, and the host (``algo-1``; ``algo-1/rank 3`` locally) that logged it."""

    name: str
    value: float
    source: str | None

    @property
    def host(self) -> str | None:
        """``algo-1`` for ``algo-1/rank 3``: SageMaker's metrics are per host, ranks share it."""
        return self.source.split("/", 1)[0] if self.source else None


@dataclass(frozen=True)
class MetricRecord:
    """One value of one metric with when and where it was logged: a row of
    :meth:`TrainingJobAnalytics.dataframe <smlaunch.sdk.jobs.analytics.TrainingJobAnalytics.dataframe>`.

    ``host`` is ``algo-N``, or None where the source aggregates hosts (CloudWatch metrics).
    ``time`` is None only where the source has no times.
    """

    name: str
    value: float
    time: datetime | None
    host: str | None


def split_prefix(line: str) -> tuple[str | None, str]:
    """``("algo-2", "loss=0.3")`` for ``"[algo-2] loss=0.3"``; ``(None, line)`` when unprefixed."""
    match = _PREFIX_RE.match(line)
    if match is None:
        return None, line
    return match.group("source"), line[match.end() :]


class MetricParser:
    """Compiled ``metric_definitions``. Bad definitions fail here, naming the entry and the fix."""

    def __init__(self, metric_definitions: Sequence[Mapping[str, Any]] | None) -> None:
        self._compiled: list[tuple[str, re.Pattern[str]]] = []
        for index, definition in enumerate(metric_definitions or []):
            field = f"metric_definitions[{index}]"
            name = definition.get("Name") if isinstance(definition, Mapping) else None
            regex = definition.get("Regex") if isinstance(definition, Mapping) else None
            if not isinstance(name, str) or not name or not isinstance(regex, str) or not regex:
                raise ConfigurationError(
                    field,
                    definition,
                    "needs a non-empty 'Name' and 'Regex'",
                    "pass {'Name': 'train:loss', 'Regex': 'loss=([0-9.]+)'}",
                )
            try:
                pattern = re.compile(regex)
            except re.error as error:
                raise ConfigurationError(
                    f"{field}.Regex",
                    regex,
                    f"not a valid regular expression ({error})",
                    "fix the pattern; the first capture group is the metric value",
                ) from None
            if pattern.groups < 1:
                raise ConfigurationError(
                    f"{field}.Regex",
                    regex,
                    "has no capture group",
                    "put the value in parentheses, e.g. 'loss=([0-9.]+)'",
                )
            self._compiled.append((name, pattern))

    def __bool__(self) -> bool:
        return bool(self._compiled)

    def parse_line(self, line: str) -> list[MetricSample]:
        """Every metric value in one (possibly host-prefixed) log line, in definition order."""
        source, message = split_prefix(line)
        samples: list[MetricSample] = []
        if source in (SERVICE_SOURCE, LOCAL_SOURCE):
            return samples
        for name, pattern in self._compiled:
            for match in pattern.finditer(message):
                value = _to_float(match.group(1))
                if value is not None:
                    samples.append(MetricSample(name, value, source))
        return samples

    def parse(self, lines: Iterable[str]) -> list[MetricSample]:
        return [sample for line in lines for sample in self.parse_line(line)]


def metric_values(
    lines: Iterable[str], metric_definitions: Sequence[Mapping[str, Any]] | None
) -> dict[str, list[float]]:
    """Each metric's values in log order, all hosts together: ``{"train:loss": [0.9, 0.5, ...]}``.

    A metric with no match is present with an empty list, so a typo in a regex is visible.
    """
    parser = MetricParser(metric_definitions)
    values: dict[str, list[float]] = {str(d["Name"]): [] for d in metric_definitions or []}
    for sample in parser.parse(lines):
        values[sample.name].append(sample.value)
    return values


def final_metrics(description: Mapping[str, Any]) -> dict[str, float]:
    """``FinalMetricDataList`` of a DescribeTrainingJob response as ``{name: value}``."""
    return {
        str(item["MetricName"]): float(item["Value"])
        for item in description.get("FinalMetricDataList") or []
        if "MetricName" in item and "Value" in item
    }


def _to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value
