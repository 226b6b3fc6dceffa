"""ListTrainingJobs: its filters, its sort orders and its ``NextToken`` pagination.

Pure functions over the jobs' summaries (``smlaunch list``'s,
:func:`smlaunch.sdk.cli.output.summary`). A ``NextToken`` is a cursor, the sort key and the name of
the last job of the page (base64 JSON, opaque to clients), so a page never repeats or skips a job
when jobs are created between two calls. Defaults are the service's: sorted by ``CreationTime``,
``Ascending``, 10 per page.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from smlaunch.serve.wire import validation_error

_SORT_FIELD = {"Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"}


def _key(job: dict[str, Any], sort_by: str) -> Any:
    value = job.get(_SORT_FIELD[sort_by])
    return value.timestamp() if isinstance(value, datetime) else value


def _matches(job: dict[str, Any], params: dict[str, Any]) -> bool:
    created, modified = job["CreationTime"], job.get("LastModifiedTime", job["CreationTime"])
    checks = (
        ("CreationTimeAfter", lambda t: created > t),
        ("CreationTimeBefore", lambda t: created < t),
        ("LastModifiedTimeAfter", lambda t: modified > t),
        ("LastModifiedTimeBefore", lambda t: modified < t),
        ("NameContains", lambda s: s.lower() in job["TrainingJobName"].lower()),
        ("StatusEquals", lambda s: job["TrainingJobStatus"] == s),
        ("WarmPoolStatusEquals", lambda s: job.get("WarmPoolStatus", {}).get("Status") == s),
        ("TrainingPlanArnEquals", lambda s: job.get("TrainingPlanArn") == s),
    )
    return all(params.get(name) is None or test(params[name]) for name, test in checks)


def _token(cursor: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode()


def _cursor(token: str) -> list[Any]:
    try:
        cursor = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        cursor = None
    if not isinstance(cursor, list) or len(cursor) != 2 or not isinstance(cursor[1], str):
        raise validation_error("Invalid pagination token")
    return cursor


def page(jobs: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """One page of ListTrainingJobs' answer for ``params`` over every job's summary."""
    sort_by = params.get("SortBy", "CreationTime")
    descending = params.get("SortOrder", "Ascending") == "Descending"
    size = params.get("MaxResults", 10)
    keyed = sorted(
        ((_key(job, sort_by), job["TrainingJobName"], job) for job in jobs if _matches(job, params)),
        key=lambda item: (item[0], item[1]),
        reverse=descending,
    )
    if params.get("NextToken"):
        after = tuple(_cursor(params["NextToken"]))
        try:
            keyed = [
                item
                for item in keyed
                if ((item[0], item[1]) < after if descending else (item[0], item[1]) > after)
            ]
        except TypeError:  # a token of another sort order
            raise validation_error("Invalid pagination token") from None
    chosen = keyed[:size]
    answer: dict[str, Any] = {"TrainingJobSummaries": [job for _, _, job in chosen]}
    if len(keyed) > size:
        answer["NextToken"] = _token([chosen[-1][0], chosen[-1][1]])
    return answer


def paginate(
    items: list[Any], params: dict[str, Any], default_size: int, key: str = "Tags"
) -> dict[str, Any]:
    """A page of a list in a fixed order (``ListTags``): ``NextToken`` is the offset."""
    start = 0
    if params.get("NextToken"):
        cursor = _cursor(params["NextToken"])
        start = cursor[0] if isinstance(cursor[0], int) and cursor[0] >= 0 else 0
    size = params.get("MaxResults", default_size)
    answer: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        answer["NextToken"] = _token([start + size, "offset"])
    return answer
