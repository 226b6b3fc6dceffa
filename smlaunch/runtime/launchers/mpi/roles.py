"""The host roles of a multi-node MPI job (SageMaker, Docker, Kubernetes): workers serve sshd, the
master runs mpirun.

``mpirun`` on the master reaches the other hosts over ssh and starts OpenMPI's ``orted`` there, which
starts the ranks. So a worker host has nothing to launch: it starts ``sshd`` and waits for the
master's job to end. The toolkit's version of these roles waits without bounds and ends workers by
polling for an SSH-touched file every 30 s (reference §4.5, §5.3, §7); here every wait is bounded
and every end is noticed within seconds:

**Master** (:class:`MasterRole`): :meth:`~MasterRole.wait_for_workers` probes every worker's sshd
port (TCP connect, 1 s apart) until all answer, at most ``timeout`` seconds
(``SMLAUNCH_MPI_WAIT_SECONDS``, default 600) — then a ``TimeoutError`` names the hosts that never
answered. After ``mpirun`` returns, :meth:`~MasterRole.finish` runs ``ssh <worker> touch
<marker>`` on every worker (bounded retries), whatever the outcome.

**Worker** (:class:`WorkerRole`): starts ``/usr/sbin/sshd -D`` (with an error naming the package
when it is missing), then waits until one of these ends the job for it, checked every second:

1. the master's marker file ``/tmp/smlaunch-mpi-done-<job>`` exists (normal end);
2. an ``orted`` process ran on this host and has been gone for ``orted_grace`` seconds (the
   master's mpirun ended without reaching us, e.g. it crashed);
3. no ``orted`` appeared within ``timeout`` seconds (the master never started the job);
4. optionally (``master_port`` set), the master stopped answering on that port for
   ``unreachable_after`` seconds (the master host is gone). Off by default: the master runs no
   sshd, and when it vanishes its ``orted`` children lose their connection and exit, so 2 fires.

Then it stops sshd and returns (the worker's runtime reports success; the master reports the job's
outcome, as on SageMaker). Every external effect (TCP probe, process listing, sshd, ssh, clock,
sleep) is injected, so the roles are unit-tested with fakes and run for real in the Docker tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from smlaunch import contract

SSH_PORT = 22
SSHD = "/usr/sbin/sshd"
POLL_SECONDS = 1.0

Probe = Callable[[str, int], bool]
Log = Callable[[str], None]


def tcp_probe(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a TCP connection within 2 s."""
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def orted_running() -> bool:
    """Whether an OpenMPI ``orted`` daemon runs on this machine (an exited one its parent has not
    reaped yet, a zombie, does not: in a container whose init never reaps, it would stay forever)."""
    import psutil

    for proc in psutil.process_iter(["name", "status"]):
        if proc.info.get("name") == "orted" and proc.info.get("status") != psutil.STATUS_ZOMBIE:
            return True
    return False


def ssh_ports(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """``SMLAUNCH_SSH_PORTS`` (host -> sshd port; set by the Docker and Kubernetes executors), else
    empty (port 22)."""
    raw = (os.environ if environ is None else environ).get(contract.SMLAUNCH_SSH_PORTS, "")
    return {str(host): int(port) for host, port in json.loads(raw).items()} if raw.strip() else {}


def sshd_argv(environ: Mapping[str, str] | None = None) -> list[str]:
    """``sshd -D``, with ``-f $SMLAUNCH_SSHD_CONFIG`` when set (one sshd port per host)."""
    config = (os.environ if environ is None else environ).get(contract.SMLAUNCH_SSHD_CONFIG)
    return [SSHD, "-D", *(["-f", config] if config else [])]


def ssh_argv(environ: Mapping[str, str] | None = None) -> list[str]:
    """``ssh``, with ``-F $SMLAUNCH_SSH_CONFIG`` when set: the job's client config (each host's
    address, port and key) where it cannot be put in ``/etc/ssh/ssh_config.d`` (Kubernetes pods)."""
    config = (os.environ if environ is None else environ).get(contract.SMLAUNCH_SSH_CONFIG)
    return ["ssh", *(["-F", config] if config else [])]


def done_marker(job: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job)
    return f"/tmp/smlaunch-mpi-done-{safe}"


def _ssh_touch(host: str, path: str) -> bool:
    try:
        done = subprocess.run(
            [*ssh_argv(), "-o", "StrictHostKeyChecking=no", "-o", "ConnectTimeout=5", host, "touch", path],
            capture_output=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _no_log(message: str) -> None:
    return None


@dataclass
class MasterRole:
    workers: Sequence[str]
    job: str
    timeout: float = 600.0
    log: Log = _no_log
    port: int = SSH_PORT
    probe: Probe = tcp_probe
    touch: Callable[[str, str], bool] = _ssh_touch
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    retries: int = 5
    ports: Mapping[str, int] = field(default_factory=ssh_ports)

    def wait_for_workers(self) -> None:
        """Return when every worker's sshd answers; TimeoutError naming the others after ``timeout``."""
        deadline = self.clock() + self.timeout
        pending = list(self.workers)
        self.log(f"MPI master: waiting for sshd on {len(pending)} worker(s), at most {self.timeout:g} s")
        while pending:
            pending = [h for h in pending if not self.probe(h, self.ports.get(h, self.port))]
            if not pending:
                break
            if self.clock() >= deadline:
                raise TimeoutError(
                    f"MPI: workers {pending} did not accept ssh on port {self.port} within {self.timeout:g} s"
                )
            self.sleep(POLL_SECONDS)
        self.log("MPI master: every worker is reachable")

    def finish(self) -> list[str]:
        """Tell every worker the job is over; returns the workers that could not be told."""
        marker = done_marker(self.job)
        failed = []
        for host in self.workers:
            for attempt in range(self.retries):
                if self.touch(host, marker):
                    break
                if attempt + 1 < self.retries:
                    self.sleep(POLL_SECONDS)
            else:
                failed.append(host)
        if failed:
            self.log(f"MPI master: could not tell {failed} that the job ended; they stop on their own")
        return failed


@dataclass
class WorkerRole:
    master: str
    job: str
    timeout: float = 600.0
    log: Log = _no_log
    master_port: int | None = None
    orted_grace: float = 10.0
    unreachable_after: float = 30.0
    probe: Probe = tcp_probe
    orted: Callable[[], bool] = orted_running
    start_sshd: Callable[[], subprocess.Popen[bytes] | None] | None = None
    marker_exists: Callable[[str], bool] = field(default=lambda path: Path(path).exists())
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def _sshd(self) -> subprocess.Popen[bytes] | None:
        if self.start_sshd is not None:
            return self.start_sshd()
        if not Path(SSHD).exists():
            raise RuntimeError(
                f"MPI worker: {SSHD} is missing; install openssh-server in the image "
                "(Debian/Ubuntu: apt-get install openssh-server)"
            )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(sshd_argv())

    def run(self) -> str:
        """Serve until the master's job ends; returns why it ended (``done``, ``orted-exited``).
        Raises TimeoutError / RuntimeError for the failure ends (3 and 4 of the module docstring)."""
        sshd = self._sshd()
        try:
            return self._wait()
        finally:
            if sshd is not None:
                sshd.terminate()
                try:
                    sshd.wait(10)
                except subprocess.TimeoutExpired:
                    sshd.kill()

    def _wait(self) -> str:
        marker = done_marker(self.job)
        start = self.clock()
        seen_orted = False
        orted_gone_since: float | None = None
        unreachable_since: float | None = None
        self.log(f"MPI worker: serving ssh; waiting for {self.master}'s job to end")
        while True:
            now = self.clock()
            if self.marker_exists(marker):
                self.log("MPI worker: the master's job ended")
                return "done"
            if self.orted():
                seen_orted, orted_gone_since = True, None
            elif seen_orted:
                orted_gone_since = orted_gone_since if orted_gone_since is not None else now
                if now - orted_gone_since >= self.orted_grace:
                    self.log("MPI worker: orted ended and the master sent no marker; ending")
                    return "orted-exited"
            elif now - start >= self.timeout:
                raise TimeoutError(
                    f"MPI worker: the master {self.master} started no rank here in {self.timeout:g} s"
                )
            if self.master_port is None or self.probe(self.master, self.master_port):
                unreachable_since = None
            else:
                unreachable_since = unreachable_since if unreachable_since is not None else now
                if now - unreachable_since >= self.unreachable_after:
                    raise RuntimeError(
                        f"MPI worker: the master {self.master} has been unreachable for "
                        f"{self.unreachable_after:g} s"
                    )
            self.sleep(POLL_SECONDS)
