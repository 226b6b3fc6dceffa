"""The host's verdict, as files the platform (or smlaunch's local backend) reads after the host exits.

- ``output/success``: empty, written when every process of the host exited 0.
- ``output/failure``: text whose first 1024 characters become DescribeTrainingJob's FailureReason.
  Written **only if absent**: a user script may write its own reason first, and it wins (the
  toolkit's issue #111). What smlaunch writes there is the wire form of the failure text
  (:func:`wire_failure_reason`): at most 1024 characters, cut at line boundaries, so the platform's
  cut never falls in the middle of a line.
- ``output/failure.json`` (``contract.FAILURE_DETAILS_FILE``): ``{"host", "rank", "label",
  "exit_code", "time", "reason", "kind"}`` for the local backend, which names the earliest failure
  across hosts. ``reason`` is the whole failure text (the failing rank's complete traceback), or the
  user's own ``failure`` file when they wrote one;
  ``kind`` is ``failed`` (a process exited non-zero), ``stopped`` (the runtime got SIGTERM/SIGINT)
  or ``framework_error`` (the runtime itself failed before or around the user's code).

The ranks can write ``output/``: these files are written without following a link a rank left in
their place (``smlaunch.contract.artifact_tree.write_file``), and the script's own ``failure`` is read only
if it is a regular file, at most :data:`OWN_FAILURE_MAX_BYTES` of it (never a FIFO, which would
block the host for ever, nor ``/dev/zero``).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract.artifact_tree import read_regular, write_file
from smlaunch.runtime.launchers.base import RunResult

OWN_FAILURE_MAX_BYTES = 64 * 1024
"""Of a ``failure`` file the script wrote itself, what is read (SageMaker shows 1024 characters)."""


def _write_text_if_absent(directory: Path, name: str, text: str) -> str:
    """Write ``text`` as ``directory/name`` unless something is there; return the text recorded:
    the script's own file (its first :data:`OWN_FAILURE_MAX_BYTES`) when it is a regular file,
    else ``text`` (a FIFO, a device or a link a rank left there is neither followed nor read)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        write_file(directory, name, text.encode("utf-8"), exclusive=True)
        return text
    except FileExistsError:
        pass
    try:
        return read_regular(directory, name, OWN_FAILURE_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return text


def wire_failure_reason(text: str, limit: int = contract.FAILURE_REASON_MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters at line boundaries: the first lines (who failed, the
    error message) and the last ones (where the traceback ends), joined by a line saying how many
    lines were left out. Only a single line longer than the whole budget is cut inside itself."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    head: list[str] = []
    used = 0
    for line in lines:
        if head and used + len(line) + 1 > limit // 3:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    marker_room = len("... (99999 lines left out)") + 1
    for line in reversed(lines[len(head) :]):
        if used + marker_room + len(line) + 1 > limit:
            break
        tail.insert(0, line)
        used += len(line) + 1
    left_out = len(lines) - len(head) - len(tail)
    marker = [f"... ({left_out} lines left out)"] if left_out else []
    wire = "\n".join([*head, *marker, *tail])
    if len(wire) > limit:  # one line alone exceeds the budget: nothing but a cut inside it fits
        wire = wire[: limit - 4] + " ..."
    return wire


def write_success(paths: contract.Paths) -> None:
    """Write ``output/success`` (empty), replacing whatever a rank left in its place."""
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    write_file(paths.output_dir, contract.SUCCESS_FILE, b"")


def write_failure(
    paths: contract.Paths,
    text: str,
    *,
    host: str,
    kind: str,
    exit_code: int,
    rank: int | None = None,
    label: str | None = None,
    when: float | None = None,
) -> str:
    """Write ``failure`` (if absent; the wire form of ``text``) and ``failure.json`` (the whole
    ``text``, or the user's own ``failure`` file); return the reason that was recorded."""
    wire = wire_failure_reason(text)
    recorded = _write_text_if_absent(paths.output_dir, contract.FAILURE_FILE, wire)
    reason = text if recorded == wire else recorded
    details: dict[str, Any] = {
        "host": host,
        "rank": rank,
        "label": label,
        "exit_code": exit_code,
        "time": when if when is not None else time.time(),
        "reason": reason,
        "kind": kind,
    }
    data = (json.dumps(details, indent=2) + "\n").encode("utf-8")
    write_file(paths.output_dir, contract.FAILURE_DETAILS_FILE, data)
    return reason


def report_run(paths: contract.Paths, result: RunResult) -> int:
    """Write the files for a finished run; return the host's exit code."""
    if result.first_failure is not None:
        failure = result.first_failure
        write_failure(
            paths,
            failure.describe(),
            host=failure.host,
            kind="failed",
            exit_code=failure.exit_code,
            rank=failure.rank,
            label=failure.label,
            when=failure.time,
        )
    elif result.stop_signal is not None:
        name = signal.Signals(result.stop_signal).name
        write_failure(
            paths,
            f"Stopped: host {result.host} received {name}; SIGTERM was forwarded to every process "
            f"(exit codes {result.exit_codes})",
            host=result.host,
            kind="stopped",
            exit_code=result.exit_code,
        )
    elif result.exit_code != 0:
        write_failure(
            paths,
            f"Framework Error: processes {result.unreaped} on host {result.host} did not exit after SIGKILL",
            host=result.host,
            kind="framework_error",
            exit_code=result.exit_code,
        )
    else:
        write_success(paths)
    return result.exit_code
