"""The CloudWatch Logs calls the SDK and the console make for training logs, on the job store.

One log group, ``/aws/sagemaker/TrainingJobs``; one stream per host of a job, named as SageMaker
names them, ``<job>/algo-N-<epoch>`` (the epoch of the job's start), whose events are the lines of
that host's log (``logs/algo-N.log`` of the job directory; for a job on Kubernetes, whose hosts'
logs are in its agent pod, the job log's lines of that host, ``[algo-N]`` or ``[algo-N/rank R]``).
The emulated hosts' logs carry no times: an event's timestamp is when this server first read its
line (never earlier than the line before it), kept while the server runs, so the SDK's
``logs=True`` streaming (``startTime`` and a count of events to skip) sees each line once.
``nextToken`` values are positions in a stream's events.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.status import instance_count
from smlaunch.sdk.errors import SmlaunchError
from smlaunch.serve.training import TrainingService
from smlaunch.serve.wire import ServiceError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_STREAM = re.compile(r"^(?P<job>[^/]+)/(?P<host>algo-\d+)-(?P<epoch>\d+)$")
_TOKEN = re.compile(r"^(?P<kind>[fb])/(?P<index>\d{1,12})$")
Source = Path | list[str]
"""A stream's lines: a host log file of the store, or (off the store) the host's lines so far."""


def _invalid(message: str) -> ServiceError:
    return ServiceError("InvalidParameterException", message)


@dataclass
class _Stream:
    """What has been read of one host's log: its events, and where reading goes on."""

    offset: int = 0
    times: list[int] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LogsService:
    """The ``logs`` operations over the jobs the training service describes."""

    def __init__(self, training: TrainingService) -> None:
        self.training = training
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._lock = threading.Lock()

    # --- streams ----------------------------------------------------------------------------

    def _job_streams(self, job: str) -> list[tuple[str, Source]]:
        """The job's streams that exist (a host that has logged), as ``(name, host log)``: a
        file of the store, or the host's lines of the job log of a job off the store."""
        try:
            description = self.training.describe(job)
        except ServiceError:
            return []
        runner = self.training.runner(job)
        off_store = runner is not self.training.backend
        if description.get("TrainingStartTime") is None and (
            off_store or not self.training.backend.job_dir(job).path.is_dir()
        ):
            return []  # still in the server's queue: nothing has logged yet
        start = description.get("TrainingStartTime") or description["CreationTime"]
        epoch = int(start.timestamp() if isinstance(start, datetime) else start)
        hosts = layout.host_names(instance_count(description))
        streams: list[tuple[str, Source]] = []
        if off_store:
            try:
                lines = list(runner.log_lines(job))
            except (SmlaunchError, OSError):
                return []
            for host in hosts:
                own = (f"[{host}]", f"[{host}/")
                mine = [line for line in lines if line.startswith(own)]
                if mine:
                    streams.append((f"{job}/{host}-{epoch}", mine))
            return streams
        job_dir = self.training.backend.job_dir(job)
        for host in hosts:
            path = job_dir.host_log(host)
            if path.is_file():
                streams.append((f"{job}/{host}-{epoch}", path))
        return streams

    def _events(self, job: str, host: str, source: Source) -> tuple[list[int], list[str]]:
        with self._lock:
            stream = self._streams.setdefault((job, host), _Stream())
        if isinstance(source, list):  # the host's lines so far: those not read yet are new
            with stream.lock:
                new = source[len(stream.messages) :]
                if new:
                    stamp = max(int(time.time() * 1000), stream.times[-1] if stream.times else 0)
                    stream.times.extend([stamp] * len(new))
                    stream.messages.extend(new)
                return list(stream.times), list(stream.messages)
        path = source
        with stream.lock:
            try:
                with open(path, "rb") as handle:
                    handle.seek(stream.offset)
                    data = handle.read()
                    mtime = int(path.stat().st_mtime * 1000)
            except OSError:
                data, mtime = b"", 0
            end = data.rfind(b"\n") + 1
            if end:
                stream.offset += end
                now = min(int(time.time() * 1000), mtime or int(time.time() * 1000))
                stamp = max(now, stream.times[-1] if stream.times else 0)
                for line in data[: end - 1].decode("utf-8", errors="replace").split("\n"):
                    stream.times.append(stamp)
                    stream.messages.append(line)
            return list(stream.times), list(stream.messages)

    def _stream(self, group: str | None, name: str) -> tuple[str, str, Source]:
        self._group(group)
        found = _STREAM.match(name)
        if found is not None:
            for stream, path in self._job_streams(found["job"]):
                if stream == name:
                    return found["job"], found["host"], path
        raise ServiceError("ResourceNotFoundException", "The specified log stream does not exist.")

    def _group(self, group: str | None) -> None:
        if group != LOG_GROUP:
            raise ServiceError("ResourceNotFoundException", "The specified log group does not exist.")

    # --- DescribeLogStreams -----------------------------------------------------------------

    def describe_log_streams(self, params: dict[str, Any]) -> dict[str, Any]:
        self._group(params.get("logGroupName") or params.get("logGroupIdentifier"))
        prefix = params.get("logStreamNamePrefix", "")
        order = params.get("orderBy", "LogStreamName")
        if prefix and order == "LastEventTime":
            raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
        if "/" in prefix:
            jobs = [prefix.split("/", 1)[0]]
        else:
            jobs = [
                s["TrainingJobName"]
                for s in self.training.summaries()
                if s["TrainingJobName"].startswith(prefix)
            ]
        streams = []
        for job in jobs:
            for name, path in self._job_streams(job):
                if name.startswith(prefix):
                    times, _ = self._events(job, name.split("/", 1)[1].rsplit("-", 1)[0], path)
                    streams.append(_stream_record(name, times))
        key = "logStreamName" if order == "LogStreamName" else "lastEventTimestamp"
        streams.sort(
            key=lambda s: (s.get(key, 0), s["logStreamName"]), reverse=bool(params.get("descending"))
        )
        start, size = _offset(params.get("nextToken")), params.get("limit", 50)
        answer: dict[str, Any] = {"logStreams": streams[start : start + size]}
        if start + size < len(streams):
            answer["nextToken"] = _encode_offset(start + size)
        return answer

    # --- GetLogEvents -----------------------------------------------------------------------

    def get_log_events(self, params: dict[str, Any]) -> dict[str, Any]:
        job, host, path = self._stream(
            params.get("logGroupName") or params.get("logGroupIdentifier"), params["logStreamName"]
        )
        times, messages = self._events(job, host, path)
        low, high = _window(params)
        chosen = [i for i, t in enumerate(times) if low <= t < high]
        limit = params.get("limit", 10000)
        token = params.get("nextToken")
        if token:
            found = _TOKEN.match(token)
            if found is None:
                raise _invalid("The specified nextToken is invalid.")
            index = min(int(found["index"]), len(chosen))
            first, last = (index, index + limit) if found["kind"] == "f" else (max(0, index - limit), index)
        elif params.get("startFromHead"):
            first, last = 0, limit
        else:
            first, last = max(0, len(chosen) - limit), len(chosen)
        page = chosen[first:last]
        return {
            "events": [
                {"timestamp": times[i], "message": messages[i], "ingestionTime": times[i]} for i in page
            ],
            "nextForwardToken": f"f/{first + len(page):012d}",
            "nextBackwardToken": f"b/{first:012d}",
        }

    # --- FilterLogEvents --------------------------------------------------------------------

    def filter_log_events(self, params: dict[str, Any]) -> dict[str, Any]:
        self._group(params.get("logGroupName") or params.get("logGroupIdentifier"))
        names = params.get("logStreamNames")
        prefix = params.get("logStreamNamePrefix", "")
        if names and prefix:
            raise _invalid("logStreamNames and logStreamNamePrefix are mutually exclusive")
        terms = _terms(params.get("filterPattern", ""))
        if names:
            streams = [(*self._stream(LOG_GROUP, name), name) for name in names]
        else:
            listed = self.describe_log_streams(
                {"logGroupName": LOG_GROUP, "logStreamNamePrefix": prefix, "limit": 10**9}
            )
            streams = [
                (*self._stream(LOG_GROUP, s["logStreamName"]), s["logStreamName"])
                for s in listed["logStreams"]
            ]
        low, high = _window(params)
        events = []
        for job, host, path, name in streams:
            times, messages = self._events(job, host, path)
            for i, (stamp, message) in enumerate(zip(times, messages, strict=False)):
                if low <= stamp < high and all(term in message for term in terms):
                    events.append(
                        {
                            "logStreamName": name,
                            "timestamp": stamp,
                            "message": message,
                            "ingestionTime": stamp,
                            "eventId": f"{name}:{i}",
                        }
                    )
        events.sort(key=lambda e: (e["timestamp"], e["logStreamName"], int(e["eventId"].rsplit(":", 1)[1])))
        start, size = _offset(params.get("nextToken")), params.get("limit", 10000)
        answer: dict[str, Any] = {
            "events": events[start : start + size],
            "searchedLogStreams": [{"logStreamName": s[3], "searchedCompletely": True} for s in streams],
        }
        if start + size < len(events):
            answer["nextToken"] = _encode_offset(start + size)
        return answer


def _stream_record(name: str, times: list[int]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "logStreamName": name,
        "creationTime": times[0] if times else int(time.time() * 1000),
        "arn": f"arn:aws:logs:local:000000000000:log-group:{LOG_GROUP}:log-stream:{name}",
        "storedBytes": 0,
    }
    if times:
        record.update(firstEventTimestamp=times[0], lastEventTimestamp=times[-1], lastIngestionTime=times[-1])
    return record


def _window(params: dict[str, Any]) -> tuple[int, int]:
    low = params.get("startTime")
    high = params.get("endTime")
    return (low if low is not None else 0, high if high is not None else 2**62)


def _terms(pattern: str) -> list[str]:
    """A ``filterPattern``'s terms, every one of which a matching event contains."""
    pattern = pattern.strip()
    if pattern.startswith(("{", "[")):
        raise _invalid('smlaunch serve matches filterPattern terms only (words and "quoted phrases")')
    try:
        return shlex.split(pattern)
    except ValueError:
        raise _invalid(f"Invalid filter pattern: {pattern}") from None


def _encode_offset(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _invalid("The specified nextToken is invalid.") from None
    if not isinstance(offset, int) or offset < 0:
        raise _invalid("The specified nextToken is invalid.")
    return offset
