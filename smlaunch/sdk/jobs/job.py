"""A handle on one submitted training job, whatever backend runs it.

``Estimator.latest_training_job`` is one of these. It holds only the backend and the job name, so a
second handle made from the same name (another notebook, ``Estimator.attach``) sees the same job.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from smlaunch import contract
from smlaunch.sdk.backends.base import Backend
from smlaunch.sdk.errors import JobCapacityError, JobFailedError
from smlaunch.sdk.jobs.tracking import track

logger = logging.getLogger(__name__)


class TrainingJob:
    """Wait on, stream, describe and stop one job.

    ``wait`` policy, as the SDK's: it returns the final description when the job Completed; when it
    was Stopped (``stop()``, ``max_run`` as MaxRuntimeExceeded) it logs a warning saying so and why,
    and returns the description too; it raises :class:`JobFailedError` (job name, status,
    FailureReason) when it Failed.
    Ctrl-C while waiting stops the job on backends whose capabilities say ``interrupt_stops_job``
    (local runs: the job is yours, on your machine), and otherwise only stops waiting and says
    how to re-attach (SageMaker: the job keeps running and billing).
    """

    def __init__(self, backend: Backend, job_name: str) -> None:
        self.backend = backend
        self.name = job_name

    def __repr__(self) -> str:
        return f"TrainingJob({self.name!r}, backend={self.backend.capabilities.name!r})"

    @property
    def job_name(self) -> str:
        """The job's name, under the SDK's spelling (``estimator.latest_training_job.job_name``)."""
        return self.name

    def describe(self) -> dict[str, Any]:
        """The job's DescribeTrainingJob response (local backends give the same shape)."""
        return self.backend.describe(self.name)

    @property
    def status(self) -> str:
        """``TrainingJobStatus``: InProgress, Stopping, Completed, Failed or Stopped."""
        return str(self.describe()["TrainingJobStatus"])

    @property
    def model_data(self) -> str | None:
        """URI of ``model.tar.gz`` once the job has packaged it, else None."""
        artifacts = self.describe().get("ModelArtifacts") or {}
        return artifacts.get("S3ModelArtifacts")

    def stop(self, reason: str | None = None) -> None:
        """Stop the job; ``reason="spot"`` emulates a spot interruption instead (local backends,
        managed-spot jobs: the job resumes on fresh hosts from its checkpoints)."""
        self.backend.stop(self.name, reason=reason)

    def metrics(self) -> dict[str, list[float]]:
        """Values of the job's ``MetricDefinitions`` found in its logs so far, per metric, in log order."""
        from smlaunch.sdk.jobs.metrics import metric_values

        algorithm = self.describe().get("AlgorithmSpecification") or {}
        return metric_values(self.backend.log_lines(self.name), algorithm.get("MetricDefinitions") or [])

    def final_metrics(self) -> dict[str, float]:
        """``FinalMetricDataList`` of the job's description, as ``{name: value}``."""
        from smlaunch.sdk.jobs.metrics import final_metrics

        return final_metrics(self.describe())

    def logs(self, follow: bool = False, out: TextIO | None = None) -> None:
        """Print the job's logs; with ``follow``, until the job ends."""
        stream = out or sys.stdout
        for block in self.backend.log_blocks(self.name, follow=follow):
            if block:
                stream.write("\n".join(block) + "\n")
                stream.flush()

    def wait(
        self,
        logs: bool = True,
        out: TextIO | None = None,
        poll_seconds: float = 0.5,
        stop_on_interrupt: bool = True,
    ) -> dict[str, Any]:
        """Wait for the job to end, streaming its logs when ``logs``; return its description.

        Failed raises :class:`~smlaunch.sdk.errors.JobFailedError` with the failure reason; Stopped warns,
        as the SDK does. Ctrl-C stops local jobs (SageMaker jobs keep running) unless
        ``stop_on_interrupt`` is False (``attach()``: the job is not this cell's)."""
        stream = out or sys.stdout
        try:
            if logs:
                self.logs(follow=True, out=stream)
            description = self._poll_until_terminal(poll_seconds)
        except KeyboardInterrupt:
            self._on_interrupt(stream, stop_on_interrupt)
            raise
        track(getattr(self.backend, "session", None), self.backend, description)
        return self._outcome(description)

    def _poll_until_terminal(
        self, poll_seconds: float, sleep: Callable[[float], None] = time.sleep
    ) -> dict[str, Any]:
        delay = poll_seconds
        while True:
            description = self.describe()
            if description["TrainingJobStatus"] in contract.TERMINAL_STATUSES:
                return description
            sleep(delay)
            delay = min(delay * 1.5, 10.0)

    def _on_interrupt(self, stream: TextIO, stop_on_interrupt: bool) -> None:
        if stop_on_interrupt and self.backend.capabilities.interrupt_stops_job:
            print(f"Interrupted: stopping job {self.name} (SIGTERM to every rank).", file=stream, flush=True)
            self.stop()
        else:
            print(
                f"Stopped waiting; job {self.name} keeps running. Re-attach with "
                f"Estimator.attach({self.name!r}) or stop it with .stop().",
                file=stream,
                flush=True,
            )

    def _outcome(self, description: dict[str, Any]) -> dict[str, Any]:
        status = description["TrainingJobStatus"]
        if status == contract.STATUS_COMPLETED:
            return description
        if status == contract.STATUS_STOPPED:
            why = description.get("FailureReason") or description.get("SecondaryStatus") or status
            logger.warning(
                "Training job %s ended with status 'Stopped' rather than 'Completed'%s. This could "
                "mean it timed out (max_run) or was stopped early: check whether it completed as you "
                "expect.",
                self.name,
                "" if why == status else f" ({why})",  # "(Stopped)" after 'Stopped' says nothing
            )
            return description
        reason = description.get("FailureReason") or description.get("SecondaryStatus") or status
        # The SDK raises its CapacityError subclass when the reason says so; so do we.
        failed = JobCapacityError if "CapacityError" in str(reason) else JobFailedError
        raise failed(self.name, status, reason, exit_code=description.get("ExitCode"))
