"""What the server keeps beside the job store: its jobs' records and every job's tags.

Under ``<store>/.serve/`` (a name no job can take, so the store's listings skip it):

- ``jobs/<job>.json``: each job the server accepted, from ``CreateTrainingJob`` on: the request as
  received (the job's ``Tags`` included), ``CreationTime`` and ``State``: ``Queued`` (waiting for
  capacity), ``Submitted`` (handed to the platform: the job store describes it from then on) or
  ``Ended`` (it ended before it ran: stopped while queued, or refused at its start; ``Description``
  holds its end);
- ``tags/<job>.json``: the job's tags as ``AddTags``/``DeleteTags`` left them.

Each file is written whole and replaced in one ``rename`` (``write_json_atomic``), before the call
that made it is answered, so a client never reads a half-written job and a restarted server finds
every job it accepted. One server owns a store's records at a time (:meth:`Records.lock`, held while
it runs), so they are read from disk once and kept in memory from then on.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from smlaunch.sdk.backends.emulated.state import write_json_atomic
from smlaunch.sdk.errors import ConfigurationError

SERVE_DIR = ".serve"
QUEUED = "Queued"
SUBMITTED = "Submitted"
ENDED = "Ended"


class Records:
    """The server's records under ``<root>/.serve``; file names are job names (checked by the caller)."""

    def __init__(self, root: Path) -> None:
        self.base = root / SERVE_DIR
        self.jobs_dir = self.base / "jobs"
        self.tags_dir = self.base / "tags"
        self._jobs: dict[str, dict[str, Any]] | None = None
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the store's server lock (``.serve/lock``) for as long as this process lives; a
        second server on the same store is refused, naming the store."""
        self.base.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.base / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigurationError(
                "store",
                str(self.base.parent),
                "another smlaunch serve is running on this job store",
                "stop it first, or pass --store naming another directory",
            ) from None
        self._lock_fd = fd

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def job(self, name: str) -> dict[str, Any] | None:
        """The server's record of job ``name`` (a copy), or None."""
        record = self._all().get(name)
        return None if record is None else dict(record)

    def put_job(self, name: str, record: dict[str, Any]) -> None:
        """Write the record to disk, then keep it."""
        write_json_atomic(self.jobs_dir / f"{name}.json", record)
        self._all()[name] = dict(record)

    def jobs(self) -> dict[str, dict[str, Any]]:
        """Every record, by job name (the records themselves: read, never change them)."""
        return dict(self._all())

    def _all(self) -> dict[str, dict[str, Any]]:
        if self._jobs is None:
            found: dict[str, dict[str, Any]] = {}
            for path in sorted(self.jobs_dir.glob("*.json")):
                record = self._read(path)
                if record is not None:
                    found[path.stem] = record
            self._jobs = found
        return self._jobs

    def tags(self, name: str) -> list[dict[str, str]] | None:
        """The job's tags as last set (None: never set through the server)."""
        data = self._read(self.tags_dir / f"{name}.json")
        return None if data is None else list(data.get("Tags", []))

    def put_tags(self, name: str, tags: list[dict[str, str]]) -> None:
        write_json_atomic(self.tags_dir / f"{name}.json", {"Tags": tags})
