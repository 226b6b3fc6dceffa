"""Reading a SageMaker training job's CloudWatch log streams: every host, merged, exactly once.

SageMaker writes each host's output to the log group ``/aws/sagemaker/TrainingJobs``, one stream per
host named ``<job>/algo-<n>-<epoch seconds>``. :class:`LogStreamMerger` finds those streams and
returns the events that have appeared since its last call, merged across hosts in timestamp order.

What it fixes relative to SageMaker Python SDK v2 (``session._flush_log_streams``, ``logs.py``):

- Stream discovery pages with ``nextToken`` (the SDK repeats the first request without it, which
  loops forever past 50 streams) and keeps what it found (the SDK rebinds a local and rediscovers
  on every poll).
- Position in each stream is CloudWatch's own ``nextForwardToken``, not ``(startTime, skip count)``:
  no event is read twice or skipped, even when many events share a millisecond.
- Each line says which host wrote it (``[algo-2] ...``); the SDK prints the bare message.

Ordering contract: the events returned by one :meth:`LogStreamMerger.poll` are in timestamp order
(ties: lower host first, then stream order). Across polls, order is arrival order: an event that
CloudWatch ingests late is printed when it arrives, never dropped. Reading a finished job is one poll,
so its whole log is in timestamp order.

The logs client is injected (a boto3 ``logs`` client, moto-backed in tests); this module does no
other I/O and never sleeps.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
"""The log group SageMaker writes training job output to."""

_HOST_RE = re.compile(r"^(?P<host>algo-\d+)(?:-\d+)?$")
_MAX_EMPTY_PAGES = 50
"""Bound on consecutive empty pages whose token still moves, so a misbehaving API cannot spin us."""


@dataclass(frozen=True, order=True)
class LogEvent:
    """One log line of one host. Ordered by time, then host order, then position in its stream."""

    timestamp: int
    """Milliseconds since the epoch, as CloudWatch reports it."""
    host_index: int
    sequence: int
    host: str
    message: str

    def line(self) -> str:
        """The printed form: the message prefixed with its host, e.g. ``[algo-2] epoch 1``."""
        return f"[{self.host}] {self.message.rstrip(chr(10))}"


def host_of_stream(job_name: str, stream_name: str) -> str:
    """``algo-2`` for ``<job>/algo-2-1700000000``; the part after ``<job>/`` for any other name."""
    rest = stream_name[len(job_name) + 1 :] if stream_name.startswith(job_name + "/") else stream_name
    match = _HOST_RE.match(rest)
    return match.group("host") if match else rest


def _host_sort_key(job_name: str, stream_name: str) -> tuple[int, str]:
    # algo-10 sorts after algo-2 (CloudWatch's LogStreamName order would put it first).
    host = host_of_stream(job_name, stream_name)
    number = host[len("algo-") :] if host.startswith("algo-") else ""
    return (int(number) if number.isdigit() else 1 << 30, stream_name)


def is_not_found(error: ClientError) -> bool:
    code: str | None = error.response.get("Error", {}).get("Code")
    return code == "ResourceNotFoundException"


class LogStreamMerger:
    """Follows every log stream of one training job and hands out new events, merged, exactly once.

    ``poll()`` may be called any number of times; each call returns only events not returned before.
    A log group or stream that does not exist yet is not an error: it simply has no events yet.

    ``streams_page_size`` (at most 50, the API's limit) and ``events_page_size`` (default: the API's
    own, up to 10,000 events) exist so tests can force pagination with few events.
    """

    def __init__(
        self,
        logs_client: Any,
        job_name: str,
        log_group: str = LOG_GROUP,
        streams_page_size: int = 50,
        events_page_size: int | None = None,
    ) -> None:
        self._client = logs_client
        self.job_name = job_name
        self.log_group = log_group
        self._streams_page_size = max(1, min(streams_page_size, 50))
        self._events_page_size = events_page_size
        self._tokens: dict[str, str | None] = {}
        self._sequence = 0
        self.group_exists = False

    @property
    def streams(self) -> list[str]:
        """The streams found so far, in host order (algo-1, algo-2, ..., algo-10)."""
        return sorted(self._tokens, key=lambda name: _host_sort_key(self.job_name, name))

    def discover(self) -> list[str]:
        """Look for streams named ``<job>/...``, following every page. Returns the new ones."""
        found: list[str] = []
        request: dict[str, Any] = {
            "logGroupName": self.log_group,
            "logStreamNamePrefix": self.job_name + "/",
            "orderBy": "LogStreamName",
            "limit": self._streams_page_size,
        }
        while True:
            try:
                page = self._client.describe_log_streams(**request)
            except ClientError as error:
                if is_not_found(error):
                    return found  # the group appears when the first host writes its first line
                raise
            self.group_exists = True
            for stream in page.get("logStreams", []):
                name = stream["logStreamName"]
                if name not in self._tokens:
                    self._tokens[name] = None
                    found.append(name)
            token = page.get("nextToken")
            if not token or token == request.get("nextToken"):
                return found
            request["nextToken"] = token

    def poll(self) -> Iterator[LogEvent]:
        """Every event that appeared since the last poll, on every known stream, in timestamp order.

        Lazy: pages are fetched as the iterator is consumed (one page per stream in memory), so a
        finished job's whole log streams through without being held. Consume it fully before the
        next ``poll()``; a stream's position moves as its pages are read.
        """
        readers = [self._read_new(index, name) for index, name in enumerate(self.streams)]
        return heapq.merge(*readers)

    def _read_new(self, host_index: int, stream_name: str) -> Iterator[LogEvent]:
        """Events after this stream's saved position; the position moves only past what was read."""
        host = host_of_stream(self.job_name, stream_name)
        token = self._tokens[stream_name]
        empty_pages = 0
        while True:
            request: dict[str, Any] = {
                "logGroupName": self.log_group,
                "logStreamName": stream_name,
                "startFromHead": True,
            }
            if token is not None:
                request["nextToken"] = token
            if self._events_page_size is not None:
                request["limit"] = self._events_page_size
            try:
                page = self._client.get_log_events(**request)
            except ClientError as error:
                if is_not_found(error):
                    return
                raise
            events = page.get("events", [])
            for event in events:
                self._sequence += 1
                yield LogEvent(
                    timestamp=int(event["timestamp"]),
                    host_index=host_index,
                    sequence=self._sequence,
                    host=host,
                    message=str(event.get("message", "")),
                )
            next_token = page.get("nextForwardToken")
            # CloudWatch returns the token it was given once the stream is exhausted.
            if next_token is None or next_token == token:
                return
            token = next_token
            self._tokens[stream_name] = token
            empty_pages = 0 if events else empty_pages + 1
            if empty_pages >= _MAX_EMPTY_PAGES:
                return
