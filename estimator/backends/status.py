"""Status lines every backend prints while a job runs: each secondary-status transition once, in
SageMaker's wording (``2026-11-22 02:27:58 Training - Training image download completed. Training in
progress.``), and at the end the training (and, on SageMaker, billable) seconds.

SageMaker's lines are prefixed ``[sagemaker]``, local ones ``[smlaunch]``; neither is ever scraped for
metrics (:mod:`estimator.metrics`). Pure functions of a description; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from estimator.backends.cloudwatch import LogEvent
from estimator.metrics import SERVICE_SOURCE
from runtime import contract


def _millis(value: Any) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)):
        return int(value * 1000)
    return 0


def _clock_text(value: Any) -> str:
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, datetime):
        utc = value.astimezone(timezone.utc) if value.tzinfo is not None else value
        return utc.strftime("%Y-%m-%d %H:%M:%S")
    return ""


def instance_count(description: Mapping[str, Any]) -> int:
    """Hosts in the job: ``ResourceConfig.InstanceCount``, or the sum over ``InstanceGroups``."""
    resources = description.get("ResourceConfig") or {}
    groups = resources.get("InstanceGroups") or []
    if groups:
        return sum(int(group.get("InstanceCount", 0)) for group in groups) or 1
    return int(resources.get("InstanceCount") or 1)


def summary_lines(
    description: Mapping[str, Any],
    source: str = SERVICE_SOURCE,
    billable_seconds: bool = True,
    artifact: bool = True,
) -> list[str]:
    """Where the model artifact is (with ``artifact``), the training and (with ``billable_seconds``)
    billable seconds of a Completed job (times instance count, as the SDK prints them), and the Managed
    Spot Training saving. Empty for any other status; a figure the service did not report is left out
    rather than guessed. Lines are prefixed ``[source]``."""
    if description.get("TrainingJobStatus") != contract.STATUS_COMPLETED:
        return []
    count = instance_count(description)
    training = description.get("TrainingTimeInSeconds")
    if training is None:
        start, end = description.get("TrainingStartTime"), description.get("TrainingEndTime")
        if isinstance(start, datetime) and isinstance(end, datetime):
            training = max(0, int((end - start).total_seconds()))
    billable = description.get("BillableTimeInSeconds") if billable_seconds else None
    lines = []
    model = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if artifact and model:
        lines.append(f"[{source}] Model artifact: {model}")
    if training is not None:
        lines.append(f"[{source}] Training seconds: {int(training) * count}")
    if billable is not None:
        lines.append(f"[{source}] Billable seconds: {int(billable) * count}")
        if description.get("EnableManagedSpotTraining") and training:
            saving = (1 - float(billable) / float(training)) * 100
            lines.append(f"[{source}] Managed Spot Training savings: {saving:.1f}%")
    return lines


class StatusTracker:
    """Secondary-status transitions not printed yet, as log events merged with the hosts' lines.

    A transition is printed once; if SageMaker later rewrites its ``StatusMessage`` (it does for the
    current one), the new message is printed once too.
    """

    def __init__(self, source: str = SERVICE_SOURCE) -> None:
        self._seen: set[tuple[str, int, str]] = set()
        self._source = source

    def new_events(self, description: Mapping[str, Any]) -> list[LogEvent]:
        events = []
        for index, transition in enumerate(description.get("SecondaryStatusTransitions") or []):
            status = str(transition.get("Status", ""))
            started = transition.get("StartTime")
            message = str(transition.get("StatusMessage", ""))
            key = (status, _millis(started), message)
            if key in self._seen:
                continue
            updated = any(seen[:2] == key[:2] for seen in self._seen)
            self._seen.add(key)
            when = description.get("LastModifiedTime") if updated else started
            text = f"{_clock_text(when)} {status} - {message}".strip()
            events.append(LogEvent(_millis(when), -1, index, self._source, text))
        events.sort()
        return events
