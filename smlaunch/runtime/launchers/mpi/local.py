"""Local emulation of a multi-host MPI job: the hosts meet in a private directory.

One ``mpirun`` on the master host serves every emulated host (see
:mod:`smlaunch.runtime.launchers.mpi.launcher`, "Local emulation"). :class:`LocalRendezvous` is that
meeting place: non-master hosts publish what their ranks need and wait for ``done.json``; the master
gathers them, writes the rank map, runs ``mpirun`` and writes the exit code. Files are 0600; every
wait is bounded by ``SMLAUNCH_MPI_WAIT_SECONDS`` (:func:`smlaunch.contract.mpi_slurm.wait_seconds`).
On Slurm the hosts meet the same way in a directory on the shared filesystem, from different nodes
(``same_machine=False``): no process id is compared across them;
a host that has read ``done.json`` says so by removing its ``env-<host>.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract.mpi_slurm import write_private_json
from smlaunch.contract.processes import pid_alive


@dataclass
class LocalRendezvous:
    """The directory where the emulated hosts of one local MPI job meet (see the module docstring)."""

    directory: Path
    timeout: float
    poll: float = 0.1
    same_machine: bool = True
    """Every host runs on this machine, so their process ids can be checked (False on Slurm)."""

    def env_file(self, host: str) -> Path:
        return contract.child_path(self.directory, f"env-{host}.json", "host name", single=True)

    @property
    def master_file(self) -> Path:
        return self.directory / "master.json"

    @property
    def done_file(self) -> Path:
        return self.directory / "done.json"

    def _write(self, path: Path, data: Any) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_json(path, data)

    def write_rank_map(self, rank_map: Mapping[str, Any]) -> Path:
        self._write(self.rank_map_file, rank_map)
        return self.rank_map_file

    @property
    def rank_map_file(self) -> Path:
        return self.directory / "ranks.json"

    def publish(self, host: str, env: Mapping[str, str], cwd: str) -> None:
        self._write(self.env_file(host), {"env": dict(env), "cwd": cwd, "pid": os.getpid()})

    def announce_master(self) -> None:
        self._write(self.master_file, {"pid": os.getpid()})

    def gather(self, hosts: list[str]) -> dict[str, dict[str, Any]]:
        """Every other host's published environment; raises TimeoutError naming the missing hosts."""
        deadline = time.monotonic() + self.timeout
        while True:
            missing = [h for h in hosts if not self.env_file(h).exists()]
            if not missing:
                return {h: json.loads(self.env_file(h).read_text(encoding="utf-8")) for h in hosts}
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"MPI: hosts {missing} did not start within {self.timeout:g} s "
                    f"({contract.SMLAUNCH_MPI_WAIT_SECONDS})"
                )
            time.sleep(self.poll)

    def finish(self, exit_code: int, hosts: list[str]) -> None:
        """Tell the waiting hosts the job is over, give them a moment to read it, clean up."""
        self._write(self.done_file, {"exit_code": exit_code})
        deadline = time.monotonic() + 5.0
        while any(self._waiting(h) for h in hosts) and time.monotonic() < deadline:
            time.sleep(self.poll)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _waiting(self, host: str) -> bool:
        """Whether ``host`` is still alive and has not yet read ``done.json``."""
        if not self.same_machine:
            return self.env_file(host).exists()
        try:
            return pid_alive(int(json.loads(self.env_file(host).read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError):
            return False

    def wait_for_master(self, host: str) -> int:
        """Block until the master's job ends; its exit code. Bounded: the master must announce itself
        within the timeout, and a master that dies without finishing fails the wait."""
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                if self.done_file.exists():
                    return int(json.loads(self.done_file.read_text(encoding="utf-8"))["exit_code"])
                if self.master_file.exists():
                    if not self.same_machine:  # another node's pid: the agent ends us if it dies
                        time.sleep(self.poll)
                        continue
                    pid = int(json.loads(self.master_file.read_text(encoding="utf-8"))["pid"])
                    if not pid_alive(pid) and not self.done_file.exists():
                        raise RuntimeError(
                            f"MPI: the master host's runtime (pid {pid}) ended without finishing"
                        )
                elif time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"MPI: the master host did not start within {self.timeout:g} s "
                        f"({contract.SMLAUNCH_MPI_WAIT_SECONDS})"
                    )
                time.sleep(self.poll)
        finally:
            self.env_file(host).unlink(missing_ok=True)
            if not any(self.directory.glob("env-*.json")) and not self._master_alive():
                shutil.rmtree(self.directory, ignore_errors=True)  # the master cannot clean up any more

    def _master_alive(self) -> bool:
        if not self.same_machine:
            return True  # unknown from here; the master (or the job's end) cleans up
        try:
            return pid_alive(int(json.loads(self.master_file.read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError):
            return False
