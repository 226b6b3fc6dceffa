"""The local job store as a whole: what each directory under the session's root is, claims, removal,
and the paths a job may not use.

Every directory of the store whose name is a job name is exactly one :class:`Entry`:

- a job (its ``TrainingJobStatus``): its agent was started and its record reads;
- ``Claimed``: a submitter holds the name and has not started the agent yet (packaging, staging);
- ``Abandoned``: claimed, never started, and its submitter is dead (a notebook killed while
  packaging): nothing will ever start it, so ``smlaunch gc`` collects it;
- ``Damaged``: a record file cannot be read (``damaged: <file>: <why>``); ``smlaunch rm`` removes it;
- ``Foreign``: its ``spec.json`` names another job (``cp -r jobs/A jobs/a-backup``): smlaunch does not
  act on it, since acting on the job its record names would act on another directory.

How a dead submitter is known: :func:`claim` creates the job directory atomically (a hidden
directory renamed into place) already holding ``claim.json``: the submitter's pid, that process's
start time, its host name and pid namespace. The claim is ``Abandoned`` only when that process is
provably gone on this host and pid namespace (no such pid, or the pid reused by a process started
at another time); a claim made on another host or in another pid namespace (a Slurm login node, a
container) cannot be checked from here and stays ``Claimed``, and so does every claim of a live
submitter. A submitter that died between writing ``state.json`` and recording the agent it started
leaves a ``Damaged`` directory instead (that agent may run): ``rm`` removes it, ``gc`` does not.
Once the agent is started (its ``agent.json``, or the Slurm job's ``slurm.json``), the
agent owns the directory and the claim no longer matters.

Removal (:func:`remove_tree`) renames the directory to a hidden name first, so the name is freed at
once, a reader never sees half a job, and a store where nothing can be renamed (read-only,
permissions) is left untouched; ``smlaunch gc`` also deletes what an interrupted removal or claim
left behind (:func:`leftovers`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from smlaunch.sdk.backends.emulated.state import PRIVATE_DIR_MODE, JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError, SmlaunchError

CLAIM_FILE = "claim.json"
"""In a job directory: who claimed the name (``{"pid", "create_time", "host", "pid_namespace",
"time"}``), written before the directory gets its name."""
DAMAGED = "Damaged"
ABANDONED = "Abandoned"
CLAIMED = "Claimed"
FOREIGN = "Foreign"
STORE_STATUSES = (CLAIMED, ABANDONED, DAMAGED, FOREIGN)
"""What ``smlaunch list`` shows for a store directory that is not a readable job of its own."""
_CLAIMING = ".claiming-"
_REMOVING = ".removing-"
_LEFTOVER_CLAIM_SECONDS = 600.0
"""A hidden claim directory without a readable ``claim.json`` is left alone this long: its submitter
may be writing it right now."""


class DamagedRecordError(SmlaunchError):
    """A file of a job's record cannot be read: ``damaged: <file>: <why>``."""

    def __init__(self, file: Path, why: str) -> None:
        self.file = file
        self.why = why
        super().__init__(f"damaged: {file}: {why}")


def read_record(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, a file of a job's record, or :class:`DamagedRecordError` saying
    why it cannot be read (missing, unreadable, truncated, not an object)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise DamagedRecordError(path, "missing") from None
    except OSError as exc:
        raise DamagedRecordError(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise DamagedRecordError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise DamagedRecordError(
            path, f"not valid JSON: {exc.msg}, line {exc.lineno} column {exc.colno} (truncated?)"
        ) from None
    if not isinstance(data, dict):
        raise DamagedRecordError(path, f"not a JSON object (a {type(data).__name__})")
    return data


def record_field(path: Path, data: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]`` checked to be a ``kind``, or :class:`DamagedRecordError` naming ``path``."""
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DamagedRecordError(path, f"{key} is {value!r}")
    return value


# --- claims -------------------------------------------------------------------------------------


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def claim(path: Path) -> None:
    """Create the job directory ``path`` already holding ``claim.json`` (this process as submitter);
    ``FileExistsError`` when the name is taken. One ``rename`` gives the directory its name, so of two
    claimants exactly one wins, and no one ever sees a claimed directory without its claim."""
    import psutil

    staging = path.with_name(f"{_CLAIMING}{path.name}-{secrets.token_hex(4)}")
    staging.mkdir(mode=PRIVATE_DIR_MODE)
    os.chmod(staging, PRIVATE_DIR_MODE)  # 0700 whatever the umask: a job is its submitter's alone
    try:
        write_json_atomic(
            staging / CLAIM_FILE,
            {
                "pid": os.getpid(),
                "create_time": psutil.Process().create_time(),
                "host": socket.gethostname(),
                "pid_namespace": _pid_namespace(),
                "time": time.time(),
            },
        )
        try:
            # Onto an existing non-empty directory (every claim holds claim.json) or a file this
            # fails; onto an empty directory (no claim: an older smlaunch's, or a stray mkdir) it
            # succeeds, which frees a name nothing held.
            os.rename(staging, path)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise FileExistsError(errno.EEXIST, "job name taken", str(path)) from None
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def submitter_alive(record: dict[str, Any]) -> bool | None:
    """Whether the process a ``claim.json`` names still runs: None when this machine cannot tell
    (another host, another pid namespace)."""
    import psutil

    if record.get("host") != socket.gethostname() or record.get("pid_namespace") != _pid_namespace():
        return None
    try:
        process = psutil.Process(int(record["pid"]))
        if abs(process.create_time() - float(record["create_time"])) > 1.0:
            return False  # the pid now belongs to a later process
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def describe_claim(path: Path) -> tuple[str, str, float | None]:
    """``(status, detail, claimed at)`` of a job directory whose agent was never started:
    ``Claimed``, ``Abandoned`` or ``Damaged``."""
    file = path / CLAIM_FILE
    try:
        record = read_record(file)
        pid = record_field(file, record, "pid", int)
        record_field(file, record, "create_time", (int, float))
    except DamagedRecordError as exc:
        if exc.why == "missing":
            exc = DamagedRecordError(
                file, "missing: not started, and no claim says who is submitting it (an older smlaunch's?)"
            )
        return DAMAGED, str(exc), None
    at = record.get("time") if isinstance(record.get("time"), (int, float)) else None
    alive = submitter_alive(record)
    if alive is False and JobDir(path).state_file.exists():
        # Submit writes state.json right before it starts the agent, and records the agent after:
        # the agent may run without a record of it, so nothing removes it unasked.
        return (
            DAMAGED,
            f"damaged: {JobDir(path).agent_file}: missing, and its submitter (pid {pid}) died while "
            "starting the agent, which may run: smlaunch rm removes it once you know it does not",
            at,
        )
    if alive is False:
        return ABANDONED, f"its submitter (pid {pid}) died before it started the job; gc removes it", at
    where = "" if alive else f" on {record.get('host')} (cannot be checked from here)"
    return CLAIMED, f"being submitted by pid {pid}{where}; not started yet", at


class ForeignRecordError(ConfigurationError):
    """The directory named holds the record of another job (a copy, or a renamed job directory)."""


# --- entries ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One directory of the job store (see the module docstring)."""

    name: str
    path: Path
    status: str
    """A ``TrainingJobStatus`` for a job, else one of :data:`STORE_STATUSES`."""
    description: dict[str, Any] | None = None
    """DescribeTrainingJob's response, for a job."""
    detail: str | None = None
    """Why it is not a job (``damaged: <file>: <why>``...), for the others."""
    created: datetime | None = None
    """When the job was created, or the claim made (the directory's mtime when unknown)."""

    running: bool = False
    """Whether something still works in the directory (a job's agent, a live submitter)."""


def directory_time(path: Path) -> datetime | None:
    """The directory's last modification, for entries whose record gives no time."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
    except OSError:
        return None


# --- removal ------------------------------------------------------------------------------------


def remove_tree(path: Path) -> None:
    """Delete the directory ``path``: renamed to a hidden name first (``OSError`` and nothing
    touched when the store does not allow it), then deleted; what cannot be deleted stays under the
    hidden name for :func:`leftovers` (the ``OSError`` is raised)."""
    hidden = path.with_name(f"{_REMOVING}{path.name}-{secrets.token_hex(4)}")
    os.rename(path, hidden)
    shutil.rmtree(hidden)


def leftovers(root: Path) -> Iterator[Path]:
    """Hidden directories an interrupted removal left, and claims whose submitter died before the
    claim got its name."""
    try:
        children = list(root.iterdir())
    except FileNotFoundError:
        return
    for child in children:
        if child.name.startswith(_REMOVING):
            yield child
        elif child.name.startswith(_CLAIMING):
            with contextlib.suppress(OSError, DamagedRecordError):
                record = read_record(child / CLAIM_FILE) if (child / CLAIM_FILE).exists() else None
                if record is None:
                    if time.time() - child.stat().st_mtime > _LEFTOVER_CLAIM_SECONDS:
                        yield child
                elif submitter_alive(record) is False:
                    yield child


# --- paths a job may not use --------------------------------------------------------------------


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _lineage(path: Path) -> list[Path]:
    """``path`` with symlinks and ``..`` resolved (as far as it exists), then each parent."""
    resolved = path.expanduser().resolve()
    return [resolved, *resolved.parents]


def same_directory(path: Path, directory: Path) -> bool:
    """Whether ``path`` and ``directory`` are one directory, however each is spelled."""
    mine, theirs = _identity(path.expanduser().resolve()), _identity(directory)
    if mine is None or theirs is None:  # not made yet: compare the resolved spellings
        return path.expanduser().resolve() == directory.expanduser().resolve()
    return mine == theirs


def _within(path: Path, directory: Path) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, however either is spelled: symlinks,
    ``..``, and other mounts of the same directory (compared by device and inode) included."""
    target = _identity(directory)
    if target is None:  # not made yet: compare the resolved spellings
        resolved = directory.expanduser().resolve()
        return resolved in _lineage(path)
    return any(_identity(p) == target for p in _lineage(path))


def refuse_inside_store(root: Path, field: str, uri: str, path: Path, contains: bool = False) -> None:
    """Raise naming ``field`` when ``path`` (the local path of ``uri``) is the job store ``root`` or
    inside it (with ``contains``, also when the store is inside ``path``): a job writing there would
    write into job directories that ``smlaunch rm``/``gc`` delete; a job reading there reads job
    directories that change and disappear (and, holding the store, its own)."""
    if _within(path, root):
        problem = f"{path} is inside the job store {root}: smlaunch rm and gc delete what is there"
    elif contains and _within(root, path):
        problem = f"{path} holds the job store {root}, which the job would read (its own directory too)"
    else:
        return
    raise ConfigurationError(
        field,
        uri,
        problem,
        f"use a directory outside {root} (copy what you need out of the job's directory first)",
    )
