"""The files of one local job directory, shared by the local backend (any client process) and its agent.

A local job is a directory ``<session root>/<job>/``; every handle on the job, in any Python process,
talks to the job only through these files, so ``fit(wait=False)`` in one notebook and
``LocalSession(root).backend().describe(name)`` in another see the same job:

- ``spec.json``      the CreateTrainingJob request (``TrainingJobSpec.to_request()``), written by submit;
- ``settings.json``  how this machine runs it (ranks per host, grace, S3 endpoint): a
  :class:`~smlaunch.sdk.backends.emulated.job_settings.JobSettings`, written by submit;
- ``agent.json``     ``{"pid", "create_time"}`` of the supervising agent, written by submit;
- ``state.json``     the job's status, written ONLY by the agent, atomically (tmp + rename), so a
  reader never sees half a file;
- ``stop``           present once someone asked the job to stop (StopTrainingJob); the agent polls it;
- ``early-start.json`` the first attempt's hosts, started by the agent at once (process jobs that
  stage nothing), written by submit and removed by the agent;
- ``logs/job.log``   merged log of every host, ``logs/<host>.log`` per host, ``logs/agent.log``;
  ``logs/progress.json`` the agent's large transfer under way (channel downloads, uploads);
- ``hosts/<host>/``  each emulated host's ``/opt/ml`` tree.

The directory is 0700 and its logs 0600, whatever the umask
(:func:`smlaunch.sdk.backends.emulated.store.claim`, :func:`private_opener`): on a shared store (a Slurm
``shared_dir``, a store under ``/srv``) other users see the job's name and nothing of it, neither
its logs nor its models.

The hosts never see this directory as it is: each process host runs in a mount namespace in which
the whole store (the session's root) is an empty read-only directory on which only what the job's
hosts need is mounted back (:func:`smlaunch.sdk.backends.emulated.layout.host_view`: the host trees, the
attempt's scratch, the job's code...), and a container sees only its mounts. ``state.json``,
``spec.json``, ``settings.json``, ``stop`` and the logs are the agent's and the submitter's alone.

Only file I/O here; no processes are started.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO

from smlaunch import contract

SPACE_RESERVE_BYTES = 1 << 20
"""Set aside in the job directory while the agent runs, freed to write the terminal state."""
HOST_REPORT_BYTES = 4 << 20
"""A file a host wrote larger than this is not read (a ``failure.json`` holds a few KiB)."""
STORE_FULL_FIX = "free space on that filesystem, or pass LocalSession(root=...) a job store with more room"
"""What to do when the job store is full (a failed submit, or a job that ended for it)."""


PRIVATE_DIR_MODE = 0o700
"""A job directory's mode: only its owner may list or enter it."""
PRIVATE_FILE_MODE = 0o600
"""A job log's mode: only its owner may read it."""


def private_opener(path: str, flags: int) -> int:
    """``open(path, mode, opener=private_opener)``: a file only its owner may read or write
    (:data:`PRIVATE_FILE_MODE`), whatever the umask; one that existed is made so too."""
    handle = os.open(path, flags, PRIVATE_FILE_MODE)
    os.fchmod(handle, PRIVATE_FILE_MODE)
    return handle


class JobDir:
    """Path arithmetic and atomic state I/O for one local job directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def open_log(self, path: Path) -> BinaryIO:
        """Open one of the job's logs for appending, created :data:`PRIVATE_FILE_MODE` (with the
        logs directory, :data:`PRIVATE_DIR_MODE`) whatever the umask."""
        path.parent.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
        return open(path, "ab", opener=private_opener)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec_file(self) -> Path:
        return self.path / "spec.json"

    @property
    def settings_file(self) -> Path:
        return self.path / "settings.json"

    @property
    def agent_file(self) -> Path:
        return self.path / "agent.json"

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def stop_file(self) -> Path:
        return self.path / "stop"

    @property
    def early_start_file(self) -> Path:
        """The first attempt's hosts, for the agent to start before anything else, written by
        submit for process jobs that stage nothing (:mod:`.executors.process.early`)."""
        return self.path / "early-start.json"

    @property
    def space_reserve(self) -> Path:
        """:data:`SPACE_RESERVE_BYTES` the agent keeps while it runs and frees to write the
        terminal state, so that the job's end is recorded even on a store its ranks filled."""
        return self.path / ".space-reserve"

    def set_space_aside(self) -> None:
        """Write :attr:`space_reserve` unless it is there whole already (a full store never takes
        back what it holds); raises ``OSError`` when the store has no room for it."""
        try:
            if self.space_reserve.stat().st_size == SPACE_RESERVE_BYTES:
                return
        except FileNotFoundError:
            pass
        try:
            with open(self.space_reserve, "wb") as handle:
                handle.write(bytes(SPACE_RESERVE_BYTES))
        except OSError:
            self.space_reserve.unlink(missing_ok=True)
            raise

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def job_log(self) -> Path:
        return self.logs_dir / "job.log"

    @property
    def agent_log(self) -> Path:
        return self.logs_dir / "agent.log"

    @property
    def progress_file(self) -> Path:
        """The agent's transfer in progress (:class:`smlaunch.contract.progress.ProgressFile`), drawn by
        whoever follows the job's log."""
        return self.logs_dir / "progress.json"

    def host_log(self, host: str) -> Path:
        return contract.child_path(self.logs_dir, f"{host}.log", "host name", single=True)

    @property
    def hosts_dir(self) -> Path:
        return self.path / "hosts"

    def host_base(self, host: str) -> Path:
        return contract.child_path(self.hosts_dir, host, "host name", single=True)

    @property
    def s3_cache_dir(self) -> Path:
        """Where ``s3://`` channels are downloaded once per job, before each host gets its view."""
        return self.path / "s3-inputs"

    @property
    def artifacts_dir(self) -> Path:
        """Where model.tar.gz / output.tar.gz are built before they go to the output path."""
        return self.path / "artifacts"

    def read_json(self, path: Path) -> dict[str, Any]:
        with open(path, encoding="utf-8") as handle:
            data: dict[str, Any] = json.load(handle)  # written by write_json_atomic
        return data

    def read_state(self) -> dict[str, Any]:
        return self.read_json(self.state_file)

    def write_state(self, state: dict[str, Any]) -> None:
        write_json_atomic(self.state_file, state)

    def record_agent(self, proc: subprocess.Popen[bytes], **fields: Any) -> None:
        """Record the detached agent ``proc`` (pid and start time, which :meth:`agent_alive` checks,
        and ``fields``), or kill it: an agent no one could see or stop must not run."""
        import psutil

        try:
            write_json_atomic(
                self.agent_file,
                {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), **fields},
            )
        except BaseException:
            proc.kill()
            proc.wait()
            raise

    def agent_alive(self) -> bool | None:
        """True/False once submit recorded the agent; None before (the agent is starting)."""
        try:
            agent = self.read_json(self.agent_file)
        except FileNotFoundError:
            return None
        import psutil  # not at the top: the agent starts its hosts before it loads anything else

        try:
            proc = psutil.Process(int(agent["pid"]))
            if abs(proc.create_time() - float(agent["create_time"])) > 1.0:
                return False  # the pid was reused by another process
            return proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON so that readers see the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def host_report(path: Path) -> dict[str, Any] | None:
    """A JSON object a host wrote (its ``output/failure.json``, an ``orted`` request), or None. Read
    as what it is, a file the job's ranks can replace: only a regular file (never a FIFO, which
    would block the agent for ever, nor a link to a device) of at most :data:`HOST_REPORT_BYTES`."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with open(handle, "rb") as report:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        data = report.read(HOST_REPORT_BYTES + 1)
    try:
        details = json.loads(data) if len(data) <= HOST_REPORT_BYTES else None
    except ValueError:
        return None
    return details if isinstance(details, dict) else None


class JobState(str, Enum):
    """A local job's ``TrainingJobStatus`` (DescribeTrainingJob's), and the transitions the agent makes.

    ::

        InProgress --> Completed              every host exited 0 and the artifacts were delivered
                   --> Failed                 a host, a channel, the job store or the agent failed
                   --> Stopping --> Stopped   stop(), MaxRuntimeInSeconds or MaxWaitTimeInSeconds
        (any)      --> Failed                 readers only: the agent's process is gone
                                              (``LocalBackend.describe``)

    ``SecondaryStatus`` refines ``InProgress`` (``Starting`` -> ``Downloading`` -> ``Training`` ->
    ``Uploading``; hosts a scheduler has not placed yet go ``Downloading`` -> ``Starting`` (its
    reason the message) -> ``Training``; a spot interruption goes ``Training`` -> ``Interrupted``
    -> ``Starting`` and again) and names the terminal cause (``MaxRuntimeExceeded``...); the constants are
    :mod:`smlaunch.contract`'s ``SECONDARY_*``. Only the agent writes the state; a terminal state is
    never left.
    """

    IN_PROGRESS = contract.STATUS_IN_PROGRESS
    STOPPING = contract.STATUS_STOPPING
    COMPLETED = contract.STATUS_COMPLETED
    FAILED = contract.STATUS_FAILED
    STOPPED = contract.STATUS_STOPPED

    @property
    def is_terminal(self) -> bool:
        """Whether the job has ended (Completed, Failed or Stopped): nothing will change any more."""
        return self.value in contract.TERMINAL_STATUSES

    @classmethod
    def of(cls, state: dict[str, Any]) -> JobState:
        """The status recorded in a ``state.json`` dict."""
        return cls(state["TrainingJobStatus"])
