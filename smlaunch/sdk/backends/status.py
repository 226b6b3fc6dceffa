"""Status lines every backend prints while a job runs: each secondary-status transition once, in
SageMaker's wording (``2026-11-22 02:27:58 Training - Training image download completed. Training in
progress.``), and at the end the training (and, on SageMaker, billable) seconds.

SageMaker's lines are prefixed ``[sagemaker]``, local ones ``[smlaunch]``; neither is ever scraped for
metrics (:mod:`smlaunch.sdk.jobs.metrics`). A local job's agent writes each transition's line into the job
log as it makes it (:func:`transition_line`), so that it comes in order with the hosts' lines. A
followed job ends with :func:`summary_lines`: the SDK's seconds, then one :func:`closing_line`.
Pure functions of a description; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from smlaunch import contract
from smlaunch.sdk.jobs.metrics import SERVICE_SOURCE

if TYPE_CHECKING:
    from smlaunch.sdk.backends.sagemaker.cloudwatch import LogEvent


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


def _training_seconds(description: Mapping[str, Any]) -> int | None:
    """``TrainingTimeInSeconds``, else the span from start to end, else None (not guessed)."""
    training = description.get("TrainingTimeInSeconds")
    if training is None:
        start, end = description.get("TrainingStartTime"), description.get("TrainingEndTime")
        if isinstance(start, datetime) and isinstance(end, datetime):
            training = max(0, int((end - start).total_seconds()))
    return None if training is None else int(training)


def summary_lines(
    description: Mapping[str, Any], source: str = SERVICE_SOURCE, billable_seconds: bool = True
) -> list[str]:
    """The lines that end a followed job: for a Completed one the training and (with
    ``billable_seconds``) billable seconds (times instance count, as the SDK prints them) and the
    Managed Spot Training saving, then for any ended job its :func:`closing_line`. Empty while the job
    runs; a figure the service did not report is left out rather than guessed. Lines are prefixed
    ``[source]``."""
    lines = []
    if description.get("TrainingJobStatus") == contract.STATUS_COMPLETED:
        count = instance_count(description)
        training = _training_seconds(description)
        billable = description.get("BillableTimeInSeconds") if billable_seconds else None
        if training is not None:
            lines.append(f"Training seconds: {training * count}")
        if billable is not None:
            lines.append(f"Billable seconds: {int(billable) * count}")
            if description.get("EnableManagedSpotTraining") and training:
                saving = (1 - float(billable) / float(training)) * 100
                lines.append(f"Managed Spot Training savings: {saving:.1f}%")
    lines += closing_line(description).splitlines()
    return [f"[{source}] {line}" for line in lines]


def transition_line(transition: Mapping[str, Any], when: Any = None) -> str:
    """One ``SecondaryStatusTransitions`` entry as SageMaker's status line: ``2026-11-22 02:27:58
    Training - Training in progress``, at ``when`` (default: the entry's ``StartTime``)."""
    at = transition.get("StartTime") if when is None else when
    return f"{_clock_text(at)} {transition.get('Status', '')} - {transition.get('StatusMessage', '')}".strip()


def closing_line(description: Mapping[str, Any]) -> str:
    """How a job ended, in one line: ``Completed in 33 s; model: <uri>`` (without the model when the
    job has none), ``Failed: <reason>`` (:func:`failure_headline`), ``Stopped by user``, or
    ``Stopped: <why>`` when something else stopped it (``max_run``, a scheduler). Empty while the job runs."""
    status = description.get("TrainingJobStatus")
    reason = str(description.get("FailureReason") or "").strip()
    if status == contract.STATUS_COMPLETED:
        seconds = _training_seconds(description)
        line = "Completed" if seconds is None else f"Completed in {seconds} s"
        model = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
        return f"{line}; model: {model}" if model else line
    if status == contract.STATUS_FAILED:
        return f"Failed: {failure_headline(reason) or '(No reason provided)'}"  # the SDK's words for none
    if status == contract.STATUS_STOPPED:
        if not reason:
            return "Stopped by user"
        return reason if reason.startswith("Stopped") else f"Stopped: {reason}"
    return ""


def failure_headline(reason: str) -> str:
    """A ``FailureReason`` in one line: the exception its ``ErrorMessage`` line names, then the
    reason's first line in parentheses (``ValueError: boom (AlgorithmError: rank 0 on host algo-1
    exited with code 1)``); without an ``ErrorMessage``, the first line. The whole reason, traceback
    included, stays in ``describe()`` and in the exception ``wait()`` raises; the ranks' own lines
    have already shown the traceback, so the closing line does not repeat it."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0]
    for line in lines[1:]:
        # Ours write ``ErrorMessage: ValueError: boom``; SageMaker's toolkit ``ErrorMessage "..."``.
        if line.startswith("ErrorMessage"):
            message = line[len("ErrorMessage") :].lstrip(": ").strip().strip('"').strip()
            if message:
                return f"{message} ({head.rstrip(': ')})"
    return head


class StatusTracker:
    """Secondary-status transitions not printed yet, as log events merged with the hosts' lines.

    A transition is printed once; if SageMaker later rewrites its ``StatusMessage`` (it does for the
    current one), the new message is printed once too.
    """

    def __init__(self, source: str = SERVICE_SOURCE) -> None:
        self._seen: set[tuple[str, int, str]] = set()
        self._source = source

    def new_events(self, description: Mapping[str, Any]) -> list[LogEvent]:
        # Imported here: the local agent writes transition lines and never loads botocore for it.
        from smlaunch.sdk.backends.sagemaker.cloudwatch import LogEvent

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
            events.append(LogEvent(_millis(when), -1, index, self._source, transition_line(transition, when)))
        events.sort()
        return events
