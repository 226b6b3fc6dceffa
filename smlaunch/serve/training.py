"""The SageMaker operations on training jobs, and the tracker that starts queued jobs.

``CreateTrainingJob`` checks the request as the platform's backend checks an estimator's
(:mod:`.intake`, then ``backend.check``), records it (:mod:`.records`, ``Queued``) and answers;
the tracker, a thread of the server, hands queued jobs to the backend in the order they came, while
fewer than ``max_concurrent_jobs`` of the jobs it started still run. A queued job describes as
``InProgress`` / ``Starting`` with the reason it waits. Once submitted, the job store is the job's
record (``backend.describe``): its agent is a process of its own, so a job outlives a restart of
the server and is found again by the next one (re-attached), or reported ``Failed`` with the reason
when its agent died meanwhile (the backend's rule). A restarted server re-reads its queue. A job on
Kubernetes has its record on the cluster (its root ConfigMap): the server describes and stops it
there, through the platform's backend.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.sdk.backends.base import Backend
from smlaunch.sdk.backends.emulated import store
from smlaunch.sdk.backends.emulated.backend import JobNotFoundError, LocalBackend
from smlaunch.sdk.cli import output
from smlaunch.sdk.errors import SmlaunchError
from smlaunch.sdk.request import naming
from smlaunch.serve import listing
from smlaunch.serve.intake import job_request
from smlaunch.serve.records import ENDED, QUEUED, SUBMITTED, Records
from smlaunch.serve.wire import ServiceError, validation_error

LOG = logging.getLogger("smlaunch.serve")
ARN_PREFIX = "arn:aws:sagemaker:local:000000000000:training-job/"
"""The ARN of a job is this and its name in lower case (as the emulated backend names it)."""
_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[^:]*:\d{12}:training-job/(?P<name>.+)$")
_NOT_FOUND = "Requested resource not found."
_TICK_SECONDS = 0.5
MAX_TAGS = 50
_OFF_STORE = 0
"""The stamp of a kept summary of a job off the store (the store's are state files' times)."""


def _time(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=timezone.utc)


class TrainingService:
    """The training-job operations over the platforms' backends, with one job store.

    ``backend``, the emulated platform's on the store, holds the server's records and answers for
    every job of the store (describe, stop: they read and write the job directory only, whatever
    the executor); ``default`` runs the jobs (default: ``backend``); ``platforms`` maps an
    ``InstanceType`` to the backend that runs jobs of that type instead (e.g. the Docker
    executor's on the same store). A job the server gave a backend without a job store of its own
    on this machine (Kubernetes, whose record is on the cluster) is described and stopped there."""

    def __init__(
        self,
        backend: LocalBackend,
        max_concurrent_jobs: int,
        platforms: dict[str, Backend] | None = None,
        default: Backend | None = None,
    ) -> None:
        self.backend = backend
        self.default = default or backend
        self.platforms = dict(platforms or {})
        self.root = Path(backend.session.root)
        self.records = Records(self.root)
        self.max_concurrent_jobs = max_concurrent_jobs
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._queue: list[str] = []
        self._active: set[str] = set()
        self._agents: dict[str, int] = {}
        self._ended: dict[str, tuple[int, dict[str, Any]]] = {}
        self._thread: threading.Thread | None = None

    # --- the tracker ------------------------------------------------------------------------

    def start(self) -> None:
        """Take the store's server lock, re-read the records (a restart finds its queue and its
        running jobs), then start the tracker thread."""
        self.records.lock()
        self._recover()
        self._thread = threading.Thread(target=self._track, name="smlaunch-serve-tracker", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the tracker (jobs keep running: their agents are processes of their own)."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _recover(self) -> None:
        for name, record in sorted(
            self.records.jobs().items(), key=lambda item: item[1].get("CreationTime", 0)
        ):
            state = record.get("State")
            if state == SUBMITTED:
                self._active.add(name)
            elif state == QUEUED:
                job = self.backend.job_dir(name)
                if self._submitted_elsewhere(name, record):  # the server died after the submit
                    record["State"] = SUBMITTED
                    self.records.put_job(name, record)
                    self._active.add(name)
                elif job.agent_file.exists():  # the server died after the submit, before recording it
                    record["State"] = SUBMITTED
                    self.records.put_job(name, record)
                    self._active.add(name)
                elif job.path.exists():
                    self._end(
                        name,
                        record,
                        contract.STATUS_FAILED,
                        "InternalServerError: the server "
                        f"stopped while it started this job; its directory {job.path} was left "
                        f"half-made (smlaunch rm {name} removes it)",
                    )
                else:
                    self._queue.append(name)
        if self._active or self._queue:
            LOG.info("recovered %d running and %d queued job(s)", len(self._active), len(self._queue))

    def _track(self) -> None:
        while not self._closing.is_set():
            try:
                self._tick()
            except Exception:  # the tracker must outlive one bad job; the log says which
                LOG.exception("tracker error")
            self._wake.wait(_TICK_SECONDS)
            self._wake.clear()

    def _tick(self) -> None:
        for name in sorted(self._active):
            try:
                status = self.runner(name).describe(name)["TrainingJobStatus"]
            except (SmlaunchError, OSError):
                status = contract.STATUS_FAILED  # describe answers for it; it no longer holds a slot
            if status in contract.TERMINAL_STATUSES:
                self._active.discard(name)
        self._reap()
        with self._lock:
            while self._queue and len(self._active) < self.max_concurrent_jobs and not self._closing.is_set():
                self._start_next(self._queue.pop(0))

    def _start_next(self, name: str) -> None:
        record = self.records.job(name)
        if record is None or record.get("State") != QUEUED:
            return
        try:
            request = job_request(record["Request"])
            self._platform(request.spec.ResourceConfig.InstanceType).submit(request)
        except (ServiceError, SmlaunchError, OSError) as exc:
            reason = exc.message if isinstance(exc, ServiceError) else str(exc)
            self._end(name, record, contract.STATUS_FAILED, f"ClientError: {reason}")
            LOG.info("job %s refused at its start: %s", name, reason)
            return
        record["State"] = SUBMITTED
        self.records.put_job(name, record)
        self._active.add(name)
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._agents[name] = int(
                self.backend.job_dir(name).read_json(self.backend.job_dir(name).agent_file)["pid"]
            )
        LOG.info("job %s started (%d running)", name, len(self._active))

    def runner(self, name: str) -> Backend:
        """The backend that answers for ``name``: the one the server gave it when that one keeps
        its jobs off the store (Kubernetes), else the store's."""
        record = self.records.job(name)
        if record is not None:
            backend = self._platform(record["Request"]["ResourceConfig"]["InstanceType"])
            if not self._on_store(backend):
                return backend
        return self.backend

    def _on_store(self, backend: Backend) -> bool:
        """Whether ``backend`` keeps its jobs in the server's job store (its session's ``root``)."""
        root = getattr(getattr(backend, "session", None), "root", None)
        return root is not None and Path(root) == self.root

    def _submitted_elsewhere(self, name: str, record: dict[str, Any]) -> bool:
        """Whether a queued job's platform off the store has it already (the server stopped
        between the submit and its record)."""
        backend = self._platform(record["Request"]["ResourceConfig"]["InstanceType"])
        if self._on_store(backend):
            return False
        try:
            backend.describe(name)
        except JobNotFoundError:
            return False
        return True

    def _reap(self) -> None:
        """Collect the exit of the agents this process started, so none stays a zombie."""
        for name, pid in list(self._agents.items()):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                del self._agents[name]

    def _end(self, name: str, record: dict[str, Any], status: str, reason: str | None) -> None:
        """Record the end of a job that never ran (stopped in the queue, refused at its start)."""
        now = time.time()
        secondary = (
            contract.SECONDARY_STOPPED if status == contract.STATUS_STOPPED else contract.SECONDARY_FAILED
        )
        message = "The job was stopped while it waited in the queue" if reason is None else reason
        record.update(State=ENDED, LastModifiedTime=now)
        record["Description"] = {
            "TrainingJobStatus": status,
            "SecondaryStatus": secondary,
            "TrainingEndTime": now,
            "Transition": {"Status": secondary, "StartTime": now, "StatusMessage": message},
            **({"FailureReason": reason} if reason is not None else {}),
        }
        self.records.put_job(name, record)

    # --- CreateTrainingJob / DescribeTrainingJob / StopTrainingJob -------------------------

    def create_training_job(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["TrainingJobName"]
        request = job_request(params)
        if self._exists(name):
            raise self._in_use(name)
        try:
            self._platform(request.spec.ResourceConfig.InstanceType).check(request)
        except SmlaunchError as exc:
            raise validation_error(str(exc)) from None
        with self._lock:
            if self._exists(name):
                raise self._in_use(name)
            now = time.time()
            self.records.put_tags(name, list(params.get("Tags", [])))
            self.records.put_job(name, {"Request": params, "CreationTime": now, "State": QUEUED})
            self._queue.append(name)
        self._wake.set()
        LOG.info("job %s created (%d queued)", name, len(self._queue))
        return {"TrainingJobArn": ARN_PREFIX + name.lower()}

    def _platform(self, instance_type: str) -> Backend:
        """The backend that runs jobs of ``instance_type``: its mapping, else the default."""
        return self.platforms.get(instance_type, self.default)

    def _exists(self, name: str) -> bool:
        return self.records.job(name) is not None or self.backend.job_dir(name).path.exists()

    def _in_use(self, name: str) -> ServiceError:
        return ServiceError(
            "ResourceInUse",
            "Training job names must be unique within an AWS account and region, and a training job "
            f"with this name already exists ({ARN_PREFIX}{name.lower()})",
        )

    def describe_training_job(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.describe(params["TrainingJobName"])

    def describe(self, name: str) -> dict[str, Any]:
        """DescribeTrainingJob's answer for ``name`` (``ValidationException`` when there is none)."""
        record = self.records.job(name)
        if record is not None and record.get("State") in (QUEUED, ENDED):
            return self._unstarted(name, record)
        try:
            description = self.runner(name).describe(name)
        except JobNotFoundError:
            raise validation_error(_NOT_FOUND) from None
        except (store.DamagedRecordError, store.ForeignRecordError) as exc:
            raise ServiceError("InternalFailure", f"The job's record cannot be read: {exc}", 500) from None
        description["TrainingJobArn"] = ARN_PREFIX + name.lower()
        return description

    def _unstarted(self, name: str, record: dict[str, Any], why: bool = True) -> dict[str, Any]:
        """A job the platform has not started: waiting in the queue (``why``: and the reason in its
        status message), or ended there."""
        description = {k: v for k, v in record["Request"].items() if k != "Tags"}
        created = float(record["CreationTime"])
        starting = {"Status": contract.SECONDARY_STARTING, "StartTime": _time(created)}
        description.update(
            TrainingJobArn=ARN_PREFIX + name.lower(),
            CreationTime=_time(created),
            LastModifiedTime=_time(float(record.get("LastModifiedTime", created))),
            TrainingJobStatus=contract.STATUS_IN_PROGRESS,
            SecondaryStatus=contract.SECONDARY_STARTING,
            SecondaryStatusTransitions=[{**starting, "StatusMessage": self._waiting(name) if why else ""}],
        )
        if record.get("State") == ENDED:
            end = dict(record["Description"])
            transition = dict(end.pop("Transition"))  # the kept record stays as written
            starting.update(EndTime=_time(transition["StartTime"]), StatusMessage="Waited in the queue")
            transition["StartTime"] = _time(transition["StartTime"])
            end["TrainingEndTime"] = _time(end["TrainingEndTime"])
            description.update(end, SecondaryStatusTransitions=[starting, transition])
        return description

    def _waiting(self, name: str) -> str:
        with self._lock:
            if name not in self._queue:
                return "Launching the job on the platform"
            ahead = self._queue.index(name)
            running = len(self._active)
        return (
            f"Queued: the server runs at most {self.max_concurrent_jobs} job(s) at a time "
            f"(max_concurrent_jobs); {running} running, {ahead} queued ahead of this one"
        )

    def stop_training_job(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["TrainingJobName"]
        with self._lock:
            record = self.records.job(name)
            if record is not None and record.get("State") == QUEUED:
                self._end(name, record, contract.STATUS_STOPPED, None)
                with contextlib.suppress(ValueError):
                    self._queue.remove(name)
                return {}
        try:
            status = self.describe(name)["TrainingJobStatus"]
        except ServiceError as exc:
            if exc.message == _NOT_FOUND:
                raise ServiceError("ResourceNotFound", _NOT_FOUND) from None
            raise
        if status in contract.TERMINAL_STATUSES:
            raise validation_error(
                f"The request was rejected because the training job is in status {status}."
            )
        self.runner(name).stop(name)
        return {}

    # --- ListTrainingJobs -------------------------------------------------------------------

    def list_training_jobs(self, params: dict[str, Any]) -> dict[str, Any]:
        return listing.page(self.summaries(), params)

    def summaries(self) -> list[dict[str, Any]]:
        """Every job's ``TrainingJobSummary``: the server's unstarted jobs and the job store's jobs."""
        found: dict[str, dict[str, Any]] = {}
        for name, record in self.records.jobs().items():
            state = record.get("State")
            if state == ENDED:  # ended for good: summarized once
                stamp = -int(record.get("LastModifiedTime", 0) * 1e9)
                cached = self._ended.get(name)
                if cached is None or cached[0] != stamp:
                    cached = self._ended[name] = (
                        stamp,
                        output.summary(self._unstarted(name, record, why=False)),
                    )
                found[name] = cached[1]
            elif state == QUEUED:
                found[name] = output.summary(self._unstarted(name, record, why=False))
            elif state == SUBMITTED and self.runner(name) is not self.backend:
                summary = self._kept_summary(name, record)
                if summary is not None:
                    found[name] = summary
        try:
            children = list(os.scandir(self.root))
        except FileNotFoundError:
            children = []
        for child in children:
            if child.name in found or not naming.JOB_NAME_PATTERN.fullmatch(child.name):
                continue
            summary = self._store_summary(child.name)
            if summary is not None:
                found[child.name] = summary
        return list(found.values())

    def _kept_summary(self, name: str, record: dict[str, Any]) -> dict[str, Any] | None:
        """A job a platform off the store runs, summarized; kept once it ended (an ended job does
        not change)."""
        return self._summary(name, _OFF_STORE)

    def _store_summary(self, name: str) -> dict[str, Any] | None:
        """A job of the store, summarized; an ended job's summary is kept while its state file is
        unchanged (the store is read again for every job still running)."""
        job = self.backend.job_dir(name)
        try:
            stamp = job.state_file.stat().st_mtime_ns
        except OSError:
            return None
        return self._summary(name, stamp)

    def _summary(self, name: str, stamp: int) -> dict[str, Any] | None:
        """``name``'s summary: the one kept under ``stamp`` (the job ended, its record unchanged since),
        else described now and kept once the job ended; None where it cannot be described."""
        cached = self._ended.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            summary = output.summary(self.describe(name))
        except (ServiceError, SmlaunchError, OSError):
            return None
        if summary["TrainingJobStatus"] in contract.TERMINAL_STATUSES:
            self._ended[name] = (stamp, summary)
        return summary

    # --- AddTags / ListTags / DeleteTags ----------------------------------------------------

    def _job_of(self, arn: str) -> str:
        found = _ARN.match(arn)
        if found is not None:
            lower = found["name"]
            names = [n for n in self.records.jobs()] + [c.name for c in os.scandir(self.root) if c.is_dir()]
            for name in names:
                if name.lower() == lower and self._exists(name):
                    return name
        raise validation_error(f"Resource {arn} not found.")

    def _tags(self, name: str) -> list[dict[str, str]]:
        tags = self.records.tags(name)
        if tags is None:
            tags = list(self.describe(name).get("Tags") or [])
        return tags

    def add_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            name = self._job_of(params["ResourceArn"])
            merged = {t["Key"]: t for t in self._tags(name)}
            merged.update({t["Key"]: t for t in params["Tags"]})
            if len(merged) > MAX_TAGS:
                raise ServiceError(
                    "ResourceLimitExceeded",
                    f"A resource can have at most {MAX_TAGS} tags: it would have {len(merged)}",
                )
            self.records.put_tags(name, list(merged.values()))
        return {"Tags": list(merged.values())}

    def delete_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            name = self._job_of(params["ResourceArn"])
            gone = set(params["TagKeys"])
            self.records.put_tags(name, [t for t in self._tags(name) if t["Key"] not in gone])
        return {}

    def list_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        tags = self._tags(self._job_of(params["ResourceArn"]))
        return listing.paginate(tags, params, default_size=50)
