"""CloudWatch's ``GetMetricStatistics`` and ``GetMetricData`` on ``/aws/sagemaker/TrainingJobs``:
what the SDK's ``TrainingJobAnalytics`` reads.

The values are the job's ``MetricDefinitions`` matched in its hosts' logs, as the emulated platform
records them (``backend.metric_records``, each with the time it was read); the dimension is
``TrainingJobName`` (``Host`` narrows to ``<job>/algo-N``), and each statistic is computed over the
values of each ``Period`` from ``StartTime``, as CloudWatch aggregates. botocore speaks CloudWatch's
``smithy-rpc-v2-cbor`` protocol (:mod:`.wire` decodes and encodes it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from smlaunch.sdk.errors import SmlaunchError
from smlaunch.serve.training import TrainingService
from smlaunch.serve.wire import ServiceError

NAMESPACE = "/aws/sagemaker/TrainingJobs"
_STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "Average": lambda v: sum(v) / len(v),
    "Sum": lambda v: float(sum(v)),
    "Minimum": min,
    "Maximum": max,
    "SampleCount": lambda v: float(len(v)),
}


def _invalid(message: str) -> ServiceError:
    return ServiceError("InvalidParameterValue", message)


class MetricsService:
    """The two CloudWatch reads over the jobs the training service describes."""

    def __init__(self, training: TrainingService) -> None:
        self.training = training

    def _points(
        self, namespace: str, name: str, dimensions: Iterable[dict[str, str]]
    ) -> list[tuple[datetime, float]]:
        """Every value of metric ``name`` of the job the dimensions name (none for anything else)."""
        if namespace != NAMESPACE:
            return []
        given = {d["Name"]: d["Value"] for d in dimensions}
        job, host = given.get("TrainingJobName"), None
        if "Host" in given:
            job, _, host = given["Host"].partition("/")
        if not job or set(given) - {"TrainingJobName", "Host"}:
            return []
        try:
            records = self.training.backend.metric_records(job, [name])
        except (SmlaunchError, OSError):
            return []  # CloudWatch answers an unknown job's metric with no datapoints
        return [(r.time, r.value) for r in records if r.time is not None and (host is None or r.host == host)]

    def get_metric_statistics(self, params: dict[str, Any]) -> dict[str, Any]:
        statistics = params.get("Statistics") or []
        if not statistics or params.get("ExtendedStatistics"):
            raise _invalid(
                "Statistics must name one or more of Average, Sum, Minimum, Maximum, SampleCount "
                "(ExtendedStatistics are not served by smlaunch serve)"
            )
        points = self._points(params["Namespace"], params["MetricName"], params.get("Dimensions", []))
        datapoints = []
        for start, values in _buckets(points, params["StartTime"], params["EndTime"], params["Period"]):
            point: dict[str, Any] = {"Timestamp": start, "Unit": params.get("Unit", "None")}
            point.update({stat: _STATISTICS[stat](values) for stat in statistics})
            datapoints.append(point)
        return {"Label": params["MetricName"], "Datapoints": datapoints}

    def get_metric_data(self, params: dict[str, Any]) -> dict[str, Any]:
        results = []
        for query in params["MetricDataQueries"]:
            stat = query.get("MetricStat")
            if stat is None:
                raise _invalid(
                    f"MetricDataQueries[{query['Id']}]: only MetricStat queries are served (no Expression)"
                )
            if stat["Stat"] not in _STATISTICS:
                raise _invalid(
                    f"MetricDataQueries[{query['Id']}]: Stat must be one of {', '.join(_STATISTICS)}"
                )
            metric = stat["Metric"]
            points = self._points(
                metric.get("Namespace", ""), metric.get("MetricName", ""), metric.get("Dimensions", [])
            )
            buckets = _buckets(points, params["StartTime"], params["EndTime"], stat["Period"])
            if params.get("ScanBy", "TimestampDescending") == "TimestampDescending":
                buckets.reverse()
            if query.get("ReturnData", True):
                results.append(
                    {
                        "Id": query["Id"],
                        "Label": query.get("Label", metric.get("MetricName", "")),
                        "Timestamps": [start for start, _ in buckets],
                        "Values": [_STATISTICS[stat["Stat"]](values) for _, values in buckets],
                        "StatusCode": "Complete",
                    }
                )
        return {"MetricDataResults": results, "Messages": []}


def _buckets(
    points: list[tuple[datetime, float]], start: datetime, end: datetime, period: int
) -> list[tuple[datetime, list[float]]]:
    """The values of each ``period`` from ``start`` (those before ``end``), oldest first."""
    found: dict[int, list[float]] = {}
    for when, value in points:
        if start <= when < end and math.isfinite(value):
            found.setdefault(int((when - start).total_seconds() // period), []).append(value)
    return [(start + timedelta(seconds=index * period), found[index]) for index in sorted(found)]
