"""What a Kubernetes job's record holds beyond its state, without a cluster: the agent pod's
``FinalMetricDataList`` (what a tuning job reads each trial's objective from), with each value's
time."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client

from smlaunch.sdk.backends.emulated.metrics import METRICS_FILE
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.backends.kubernetes import jobs
from smlaunch.sdk.backends.kubernetes.agent import Mirror
from tests.unit.test_kubernetes_session import spec


def _metric(name: str, value: float, when: float) -> str:
    return json.dumps({"time": when, "host": "algo-1", "name": name, "value": value}) + "\n"


def test_the_agent_pod_keeps_the_last_value_of_each_metric_in_the_state(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    job.logs_dir.mkdir(parents=True)
    write_json_atomic(job.state_file, {"TrainingJobStatus": "InProgress"})
    mirror = Mirror(core=None, namespace="ns", base="job", job=job, out=io.BytesIO())
    assert json.loads(mirror.state()) == {"TrainingJobStatus": "InProgress"}  # no metrics yet
    metrics = job.logs_dir / METRICS_FILE
    metrics.write_text(_metric("loss", 0.9, 10.0) + _metric("acc", 0.1, 11.0) + '{"time": 12.0, "na')
    assert json.loads(mirror.state())["FinalMetricDataList"] == [
        {"MetricName": "loss", "Value": 0.9, "Timestamp": 10.0},
        {"MetricName": "acc", "Value": 0.1, "Timestamp": 11.0},
    ]
    with metrics.open("a") as handle:  # the line being written ends, another value of the first metric
        handle.write('me": "loss", "value": 0.5, "host": "algo-1"}\n' + _metric("loss", 0.25, 13.0))
    assert json.loads(mirror.state())["FinalMetricDataList"] == [
        {"MetricName": "loss", "Value": 0.25, "Timestamp": 13.0},  # the first to appear stays first
        {"MetricName": "acc", "Value": 0.1, "Timestamp": 11.0},
    ]


def test_describe_gives_the_metrics_times_as_datetimes() -> None:
    state = {
        "TrainingJobStatus": "Completed",
        "CreationTime": 1.0,
        "FinalMetricDataList": [{"MetricName": "loss", "Value": 0.25, "Timestamp": 13.0}],
    }
    root = client.V1ConfigMap(data={"spec.json": spec().model_dump_json(), "state.json": json.dumps(state)})
    shown = jobs.description(root, None, agent_checked=True)
    assert shown["FinalMetricDataList"] == [
        {"MetricName": "loss", "Value": 0.25, "Timestamp": datetime.fromtimestamp(13.0, tz=timezone.utc)}
    ]
