"""Metric values of a local job, recorded as the hosts print them: ``logs/metrics.jsonl``.

SageMaker applies ``MetricDefinitions`` to each log line as it arrives and keeps every value with the
line's time (CloudWatch metrics) and the last one per metric (``FinalMetricDataList``). Locally the
agent does the same: :class:`MetricRecorder` sees every host line once, as the agent's log pump
reads it, and appends one JSON object per value to ``logs/metrics.jsonl``, from which ``describe()``
derives ``FinalMetricDataList`` (:func:`final_metric_data`)::

    {"time": 1763961234.52, "host": "algo-2", "name": "train:loss", "value": 0.31}

The file is appended only (each record one ``write`` of a whole line), so any process may read it
while the job runs (:func:`read_metric_records`). Nothing here starts processes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from smlaunch.sdk.backends.emulated.state import private_opener
from smlaunch.sdk.jobs.metrics import MetricParser, MetricRecord

METRICS_FILE = "metrics.jsonl"
"""Name of the record file in a job's ``logs/`` directory."""


class MetricRecorder:
    """Applies a job's ``MetricDefinitions`` to host lines and records each value with its time.

    Thread-safe: every host's log pump calls :meth:`on_lines`. ``clock`` is injected for tests.
    """

    def __init__(
        self,
        metric_definitions: Sequence[Mapping[str, Any]] | None,
        path: Path,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._parser = MetricParser(metric_definitions)
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether the job defines metrics, so that :meth:`on_lines` wants the hosts' lines."""
        return bool(self._parser)

    def on_lines(self, lines: Sequence[str]) -> None:
        """Record every metric value in host-prefixed lines, in order (one write for them all)."""
        if not self._parser:
            return
        samples = [s for line in lines for s in self._parser.parse_line(line)]
        if not samples:
            return
        at = self._clock()
        text = "".join(
            json.dumps({"time": at, "host": s.host, "name": s.name, "value": s.value}) + "\n" for s in samples
        )
        with self._lock, open(self._path, "a", encoding="utf-8", opener=private_opener) as handle:
            handle.write(text)


def read_metric_records(path: Path) -> list[MetricRecord]:
    """Every value recorded so far, in arrival order; an absent file (no metrics yet) is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
            record = MetricRecord(
                name=str(item["name"]),
                value=float(item["value"]),
                time=datetime.fromtimestamp(float(item["time"]), tz=timezone.utc),
                host=item.get("host"),
            )
        except (ValueError, KeyError, TypeError, OverflowError, OSError):
            # A line being appended right now (read next time), or one damaged: describe() and
            # the metrics table show the records that read, never a traceback.
            continue
        records.append(record)
    return records


def final_metric_data(records: Sequence[MetricRecord]) -> list[dict[str, Any]]:
    """``FinalMetricDataList`` as DescribeTrainingJob has it: the last value of each metric, in the
    order the metrics first appeared."""
    last: dict[str, MetricRecord] = {}
    for record in records:
        last[record.name] = record
    return [{"MetricName": r.name, "Value": r.value, "Timestamp": r.time} for r in last.values()]
