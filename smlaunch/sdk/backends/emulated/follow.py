"""The notebook-side follower of a local job: its log as it grows, the agent's transfer bars, its end.

:meth:`LocalBackend.log_blocks <smlaunch.sdk.backends.emulated.backend.LocalBackend.log_blocks>`
reads the merged job log with :func:`read_log`. Following it (``follow=True``, what
``TrainingJob.wait(logs=True)`` and ``smlaunch logs -f`` do), the follower also draws the agent's
large transfers (:class:`TransferBars`), watches for the job's end cheaply (:class:`_EndWatch`),
and closes with the transitions no agent logged, the training seconds and one closing line
(:func:`closing_lines`). Everything here reads files of the job directory only, so it runs in any
process that follows a job.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from smlaunch.contract.progress import ProgressBar, interactive_output
from smlaunch.sdk.backends.emulated.state import JobDir, JobState
from smlaunch.sdk.backends.status import summary_lines, transition_line
from smlaunch.sdk.jobs.metrics import LOCAL_SOURCE

_POLL_SECONDS = 0.1
"""While following a log that has nothing new, the job's state and its agent are looked at this often."""
_FOLLOW_SECONDS = 0.01
"""...and ``state.json`` is stat'ed this often (re-read when it changed), so that the job's end is
seen within about this long after the agent wrote it."""
_PROGRESS_SECONDS = 0.5
"""While following a log, the transfer bars are brought up to date at least this often."""
_STATUS_LINE = re.compile(rf"^\[{LOCAL_SOURCE}\] \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \w+ - ", re.M)
"""A status line the agent (or ``submit``) wrote into the job log, one per transition."""


def read_log(
    job: JobDir,
    follow: bool,
    agent_alive: Callable[[JobDir], bool | None],
    describe: Callable[[], dict[str, Any]],
) -> Iterator[list[str]]:
    """The job log's lines as they are read, up to 64 KiB of whole lines at a time; with
    ``follow``, tail it until the job is terminal (or ``agent_alive`` says its agent is gone),
    then end with :func:`closing_lines` of ``describe()``."""
    bars = TransferBars(job.progress_file) if follow else None
    checked = 0.0
    buffer = b""
    logged = 0  # status lines seen in the log: the transitions it has told
    ended = _EndWatch(job, agent_alive)
    with open(job.job_log, "rb") as handle:
        while True:
            if bars is not None and time.monotonic() - checked >= _PROGRESS_SECONDS:
                checked = time.monotonic()
                bars.update()
            chunk = handle.read(1 << 16)
            if not chunk:
                if not follow:
                    break
                if not ended():
                    time.sleep(_FOLLOW_SECONDS)
                    continue
                # The agent closes the job log before it writes a terminal state: drain.
                chunk = handle.read()
                if not chunk:
                    break
            buffer += chunk
            end = buffer.rfind(b"\n") + 1
            if end:  # whole lines only, decoded together
                text, buffer = buffer[: end - 1].decode("utf-8", errors="replace"), buffer[end:]
                if f"[{LOCAL_SOURCE}] " in text:
                    logged += len(_STATUS_LINE.findall(text))
                yield text.split("\n")
    if buffer:
        yield [buffer.decode("utf-8", errors="replace")]
    if bars is not None:
        bars.update(final=True)
        yield closing_lines(describe(), logged)


def closing_lines(description: dict[str, Any], logged: int) -> list[str]:
    """What follows a followed job's log: the transitions no agent logged (past the ``logged``
    first; one that died: its job's end is the backend's), the training seconds, the closing line."""
    missed = description.get("SecondaryStatusTransitions", [])[logged:]
    return [f"[{LOCAL_SOURCE}] {transition_line(transition)}" for transition in missed] + summary_lines(
        description, LOCAL_SOURCE, billable_seconds=False
    )


class _EndWatch:
    """Whether a followed job has ended (terminal state, or its agent gone), cheap enough to ask every
    :data:`_FOLLOW_SECONDS`: ``state.json`` is re-read when a ``stat`` shows it replaced, and at
    least every :data:`_POLL_SECONDS` (a replacement a ``stat`` cannot tell apart); the agent's
    liveness is checked every :data:`_POLL_SECONDS`."""

    def __init__(self, job: JobDir, agent_alive: Callable[[JobDir], bool | None]) -> None:
        self._job = job
        self._agent_alive = agent_alive
        self._seen: tuple[int, int, int] | None = None
        self._looked_at = 0.0

    def __call__(self) -> bool:
        try:
            stat = os.stat(self._job.state_file)
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            seen = None
        now = time.monotonic()
        if seen == self._seen and now - self._looked_at < _POLL_SECONDS:
            return False
        self._seen, self._looked_at = seen, now
        if JobState.of(self._job.read_state()).is_terminal:
            return True
        return self._agent_alive(self._job) is False


class TransferBars:
    """Draws the agent's large transfers (channel downloads, checkpoint uploads) in the process that
    follows the job: one :class:`smlaunch.contract.progress.ProgressBar` per transfer published in
    ``progress.json`` (a widget in Jupyter, text in a terminal, nothing in a pipe), replaced by its
    summary line when it ends. A transfer that ended before the follower saw it is not drawn."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._id: str | None = None
        self._bar: ProgressBar | None = None
        self._shown = 0
        self._done_ids: set[str] = set()

    def update(self, final: bool = False) -> None:
        """Catch up with the file; with ``final`` (the job ended) close any bar left open."""
        try:
            state = json.loads(self._path.read_text())
        except (OSError, ValueError):
            state = None
        if state is not None and state.get("id") not in self._done_ids:
            if state["id"] != self._id:
                self._close()
                if state["closed"]:  # it ran and ended between two looks: nothing to draw
                    self._done_ids.add(state["id"])
                    return
                self._id, self._shown = state["id"], 0
                self._bar = ProgressBar(int(state["total"]), str(state["label"]), interactive_output())
            assert self._bar is not None
            self._bar(int(state["done"]) - self._shown)
            self._shown = int(state["done"])
            if state["closed"]:
                self._close(str(state.get("summary") or ""))
        if final:
            self._close()

    def _close(self, summary: str = "") -> None:
        if self._bar is None or self._id is None:
            return
        self._bar.close()
        if summary:
            self._bar.report(summary)
        self._done_ids.add(self._id)
        self._bar, self._id = None, None
