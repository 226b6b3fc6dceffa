"""``python -m smlaunch.contract.mpi_slurm <host> <orted command...>``: ``mpirun``'s remote agent on Slurm.

On a Slurm cluster (``SMLAUNCH_MPI_SLURM`` set by the Slurm executor) the master host's ``mpirun``
uses OpenMPI's ``rsh`` launcher with this module as its ``plm_rsh_agent``, in place of ``ssh``: for
each host it runs ``<agent> <host> <orted command>``. This agent asks the job's agent (the batch
script, outside every host's step) to start that command as a new step of the job on the host's
node, and returns once it has started, as ``ssh`` returns once ``orted`` has daemonized; so Slurm
itself starts, tracks, signals and ends every ``orted`` and its ranks, as Slurm clusters run MPI.

Why not ``srun`` from here: a step signalled by Slurm (``scancel --signal=TERM`` on ``stop()``)
signals every process in it, and an ``srun`` that receives SIGTERM kills its step at once, so the
ranks would never get their SIGTERM and their grace period. The job's agent is in no host's step.

The request is ``orted-<host>.json`` (``{"host", "command"}``, 0600) in the hosts' meeting
directory (``SMLAUNCH_MPI_DIR``, on the shared filesystem); the answer is ``orted-<host>.started``
(``{"error": null | "why"}``), awaited at most ``SMLAUNCH_MPI_WAIT_SECONDS``. As with ``ssh`` the
command's words are joined with spaces for ``/bin/sh -c`` (OpenMPI quotes them for a remote shell);
``--daemonize`` is dropped: a daemonized ``orted`` would leave its step, and Slurm would no longer
track, signal or end it with the job. Secrets never go into the request: the step inherits the
environment the executor started the host with.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError

DAEMONIZE = "--daemonize"
POLL_SECONDS = 0.1


def request_file(directory: Path, host: str) -> Path:
    """Where the request to start ``host``'s ``orted`` goes."""
    return contract.child_path(directory, f"orted-{host}.json", "host name", single=True)


def answer_file(directory: Path, host: str) -> Path:
    """Where the job's agent says whether ``host``'s ``orted`` step started."""
    return contract.child_path(directory, f"orted-{host}.started", "host name", single=True)


def write_private_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, atomically (through ``<path>.tmp``), readable by this user only."""
    tmp = path.with_name(path.name + ".tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(descriptor, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def shell_command(words: Sequence[str]) -> str:
    """OpenMPI's words for a remote shell as one ``/bin/sh -c`` string, without ``--daemonize``. Pure."""
    return " ".join(word for word in words if word != DAEMONIZE)


def request(directory: Path, host: str, words: Sequence[str], timeout: float) -> str | None:
    """Ask for ``host``'s ``orted`` step and wait for the answer: None once it started, else why not."""
    answer = answer_file(directory, host)
    answer.unlink(missing_ok=True)
    write_private_json(request_file(directory, host), {"host": host, "command": shell_command(words)})
    deadline = time.monotonic() + timeout
    while not answer.exists():
        if time.monotonic() >= deadline:
            return (
                f"the job's agent did not start {host}'s MPI step within {timeout:g} s "
                f"({contract.SMLAUNCH_MPI_WAIT_SECONDS})"
            )
        time.sleep(POLL_SECONDS)
    error = json.loads(answer.read_text(encoding="utf-8")).get("error")
    return None if error is None else str(error)


def wait_seconds(environ: Mapping[str, str]) -> float:
    """How long hosts wait for each other before ``mpirun`` (``SMLAUNCH_MPI_WAIT_SECONDS``, > 0)."""
    raw = environ.get(contract.SMLAUNCH_MPI_WAIT_SECONDS, "").strip()
    if not raw:
        return contract.DEFAULT_MPI_WAIT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise HostConfigurationError(
            contract.SMLAUNCH_MPI_WAIT_SECONDS, raw, "must be seconds > 0", "e.g. 600"
        )
    return value


def main(argv: list[str]) -> int:
    directory = os.environ.get(contract.SMLAUNCH_MPI_DIR, "")
    if len(argv) < 2 or not directory or not os.environ.get(contract.SMLAUNCH_MPI_SLURM):
        print(
            "usage: python -m smlaunch.contract.mpi_slurm <host> <command...> "
            "(mpirun's plm_rsh_agent on Slurm, "
            f"with {contract.SMLAUNCH_MPI_SLURM} and {contract.SMLAUNCH_MPI_DIR} set)",
            file=sys.stderr,
        )
        return 2
    why = request(Path(directory), argv[0], argv[1:], wait_seconds(os.environ))
    if why is not None:
        print(f"smlaunch.contract.mpi_slurm: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
