"""How ``smlaunch``'s read commands print their data: ``--output json|table|text`` and ``--query``.

As in the AWS CLI: the data a command answers with is JSON-shaped (timestamps as ISO 8601 strings);
``--query`` is a JMESPath expression applied to it first; ``json`` prints the result as JSON,
``text`` as the AWS CLI's text format (tab-separated values, one line per object, nested lists under
their key in capitals), ``table`` as aligned columns. A command may draw its own table for the
unqueried data (``list``'s name/status/instance columns, ``metrics``' DataFrame). Only the data
reaches stdout; this module prints nothing else.

A job's rows are shaped here too: ``list``'s table row (:func:`job_row`, :func:`entry_row`) and its
JSON, ListTrainingJobs' summary (:func:`summary`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError

OUTPUT_FORMATS = ("json", "table", "text")


def add_output_arguments(
    parser: argparse.ArgumentParser, default: str, example: str, data: str = "the data"
) -> None:
    """``--output`` (default ``default``) and ``--query`` (``example``: a JMESPath for the help) for
    ``data``, and the old ``--json`` as a hidden spelling of ``--output json``."""
    parser.add_argument("--output", choices=OUTPUT_FORMATS, help=f"how to print {data} (default: {default})")
    parser.add_argument(
        "--query",
        metavar="JMESPATH",
        help=f"print only what this JMESPath selects of {data}, e.g. {example!r}",
    )
    parser.add_argument("--json", dest="output", action="store_const", const="json", help=argparse.SUPPRESS)
    parser.set_defaults(output_default=default)


def plain(data: Any) -> Any:
    """``data`` as JSON values: timestamps as ISO 8601 text (as the AWS CLI prints them), other
    objects as their text."""
    return json.loads(json.dumps(data, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def query(data: Any, expression: str | None) -> Any:
    """``data`` filtered by the JMESPath ``expression`` (None: unchanged)."""
    if expression is None:
        return data
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.search(expression, data)
    except JMESPathError as exc:
        raise ConfigurationError(
            "--query",
            expression,
            f"not a usable JMESPath expression ({' '.join(str(exc).split())})",
            "see https://jmespath.org, e.g. --query 'TrainingJobSummaries[].TrainingJobName'",
        ) from None


def emit(
    data: Any,
    args: argparse.Namespace,
    out: TextIO,
    table: Callable[[TextIO], None] | None = None,
) -> None:
    """Print ``data`` as ``args.output`` asks, after ``args.query``; ``table`` draws the command's
    own table of the unqueried data."""
    output = getattr(args, "output", None) or getattr(args, "output_default", "json")
    expression = getattr(args, "query", None)
    if output == "table" and table is not None and expression is None:
        table(out)
        return
    result = query(plain(data), expression)
    if output == "json":
        print(json.dumps(result, indent=2, ensure_ascii=False), file=out)
    elif output == "text":
        write_text(result, out)
    else:
        write_table(result, out)


# --- text: the AWS CLI's format -------------------------------------------------------------------


def write_text(item: Any, out: TextIO, identifier: str | None = None, keys: list[str] | None = None) -> None:
    """The AWS CLI's ``--output text``: an object's scalar values on one tab-separated line (sorted
    by key; for a list of objects, the union of their scalar keys), then its lists and objects, each
    line prefixed with its key in capitals."""
    if isinstance(item, dict):
        _text_dict(item, out, identifier, keys)
    elif isinstance(item, list):
        _text_list(item, out, identifier)
    else:
        print(item, file=out)


def _text_list(items: list[Any], out: TextIO, identifier: str | None) -> None:
    if any(isinstance(item, dict) for item in items):
        keys = sorted(
            {k for item in items if isinstance(item, dict) for k, v in item.items() if not _nested(v)}
        )
        for item in items:
            write_text(item, out, identifier, keys)
        return
    scalars = [item for item in items if not _nested(item)]
    if scalars:
        if identifier is None:
            print("\t".join(str(item) for item in scalars), file=out)
        else:
            for item in scalars:
                print(f"{identifier.upper()}\t{item}", file=out)
    for item in items:
        if _nested(item):
            write_text(item, out, identifier)


def _text_dict(item: dict[str, Any], out: TextIO, identifier: str | None, keys: list[str] | None) -> None:
    if keys is None:
        scalars = [str(v) for k, v in sorted(item.items()) if not _nested(v)]
        nested = [(k, v) for k, v in sorted(item.items()) if _nested(v)]
    else:
        scalars = [str(item.get(k, "")) for k in keys]
        nested = [(k, item[k]) for k in sorted(set(item) - set(keys))]
    if scalars:
        print("\t".join([identifier.upper(), *scalars] if identifier else scalars), file=out)
    for key, value in nested:
        write_text(value, out, key)


def _nested(value: Any) -> bool:
    return isinstance(value, (dict, list))


# --- table ----------------------------------------------------------------------------------------


def write_table(item: Any, out: TextIO) -> None:
    """Aligned columns: a list of objects as one row each under their keys; an object as key/value
    rows; a list as one value per line. Nested values are shown as compact JSON."""
    if isinstance(item, list) and item and all(isinstance(row, dict) for row in item):
        columns = list(dict.fromkeys(key for row in item for key in row))
        rows = [[_cell(row.get(column)) for column in columns] for row in item]
        print_columns(columns, rows, out)
    elif isinstance(item, dict):
        print_columns(["key", "value"], [[key, _cell(value)] for key, value in item.items()], out)
    elif isinstance(item, list):
        for value in item:
            print(_cell(value), file=out)
    elif item is not None:
        print(_cell(item), file=out)


def print_columns(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    """``rows`` under ``header``, each column as wide as its widest cell, two spaces apart."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header)]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip(), file=out)


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    return json.dumps(value, separators=(",", ":")) if _nested(value) else str(value)


# --- a job's rows ----------------------------------------------------------------------------------


def when(value: Any) -> datetime | None:
    """A description's timestamp as an aware datetime (naive ones are UTC); None if it is none."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None


def duration_text(description: dict[str, Any]) -> str:
    """``H:MM:SS`` from the description's start to its end (to now while it runs), or ``-``."""
    start = when(description.get("TrainingStartTime")) or when(description.get("CreationTime"))
    end = when(description.get("TrainingEndTime")) or (
        None
        if description.get("TrainingJobStatus") == contract.STATUS_IN_PROGRESS
        else when(description.get("LastModifiedTime"))
    )
    if start is None:
        return "-"
    seconds = int(((end or datetime.now(timezone.utc)) - start).total_seconds())
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def started_text(started: datetime | None) -> str:
    """A start time in local time for a table, or ``-``."""
    return started.astimezone().strftime("%Y-%m-%d %H:%M:%S") if started else "-"


def job_row(description: dict[str, Any], tuning_job: str | None = None) -> dict[str, Any]:
    """A row of ``list``'s table for a job's description: name, status, instance, start, duration,
    and the tuning job it is a trial of (``tuning_job``, else the name its ``TuningJobArn`` ends
    with; ``-`` for none)."""
    arn = description.get("TuningJobArn")
    resources = description.get("ResourceConfig") or {}
    started = when(description.get("TrainingStartTime")) or when(description.get("CreationTime"))
    return {
        "name": description["TrainingJobName"],
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus"),
        "instance": f"{resources.get('InstanceType', '?')} x {resources.get('InstanceCount', '?')}",
        "started": started_text(started),
        "duration": duration_text(description),
        "tuning_job": tuning_job or (str(arn).rpartition("/")[2] if arn else "-"),
    }


def entry_row(entry: Any, tuning_job: str | None = None) -> dict[str, Any]:
    """A row for a local store entry: a job's, or a Claimed/Abandoned/Damaged/Foreign directory's
    (with ``detail``: why it is not a job)."""
    if entry.description is not None:
        return job_row(entry.description, tuning_job)
    return {
        "name": entry.name,
        "status": entry.status,
        "secondary_status": None,
        "instance": "-",
        "started": started_text(when(entry.created)),
        "duration": "-",
        "tuning_job": "-",
        "detail": entry.detail,
    }


SUMMARY_FIELDS = (
    "TrainingJobName",
    "TrainingJobArn",
    "CreationTime",
    "TrainingEndTime",
    "LastModifiedTime",
    "TrainingJobStatus",
    "SecondaryStatus",
    "WarmPoolStatus",
    "TrainingPlanArn",
)
"""ListTrainingJobs' ``TrainingJobSummary`` members, as botocore's SageMaker model names them."""


def summary(description: dict[str, Any]) -> dict[str, Any]:
    """A DescribeTrainingJob response as ListTrainingJobs summarises it."""
    return {key: description[key] for key in SUMMARY_FIELDS if description.get(key) is not None}
