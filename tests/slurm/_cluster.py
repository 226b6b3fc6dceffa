"""A real two-node Slurm cluster on this machine, for the ``slurm`` tests.

One ``munged`` with its own key and socket, one ``slurmctld`` and two ``slurmd -N node1|node2``, all
on 127.0.0.1 with ports picked free at start, configured by a generated ``slurm.conf`` whose state,
spool and log directories live under one temporary directory. ``SLURM_CONF`` points the Slurm
commands at it. Nothing listens on or talks to any address but 127.0.0.1.

``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none`` need no cgroup set-up; both
nodes share this machine's CPUs, so each declares them all. The daemons run in the foreground as
children of the test process so that teardown ends them by pid. ``cred_expire=10`` (default 120)
also bounds how long a requeued job waits before Slurm starts it again (``slurm.conf(5)``,
``AuthInfo``), so the requeue test does not wait two minutes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
NODES = ("node1", "node2")
PARTITION = "debug"
START_TIMEOUT = 60.0


class ClusterUnavailable(RuntimeError):
    """Slurm cannot be started here; the message says why (the tests skip with it)."""


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def missing_requirements() -> str | None:
    """Why this machine cannot run the cluster (not root, a package missing), or ``None``."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd runs jobs as their submitting user)"
    missing = [name for name in (*DAEMONS, *CLIENTS, "munge") if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm or MUNGE is not installed (missing {', '.join(missing)}): "
            "apt-get install slurmd slurmctld slurm-client munge"
        )
    return None


def slurm_conf(root: Path, ports: dict[str, int], cpus: int) -> str:
    """The ``slurm.conf`` of the test cluster rooted at ``root``."""
    nodes = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 Port={ports[name]} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
        for name in NODES
    )
    return f"""\
ClusterName=smlaunch-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge-socket/munge.socket,cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=5
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    """A running test cluster: its directory, its ``slurm.conf`` and the environment its commands need."""

    root: Path
    conf: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against the cluster, capturing its output."""
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def logs(self, lines: int = 20) -> str:
        """The last ``lines`` of every daemon log (for failure messages)."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"== {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as ``sinfo`` reports it (empty when the controller does not answer)."""
        result = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", timeout=10)
        if result.returncode != 0:
            return {}
        return dict(line.split(maxsplit=1) for line in result.stdout.splitlines() if line.strip())

    def stop(self) -> None:
        """End every daemon (SIGTERM, then SIGKILL after 10 s) in reverse start order."""
        for name, proc in reversed(list(self.processes.items())):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            self.processes.pop(name)


def _start(cluster: Cluster, name: str, argv: list[str]) -> None:
    log = (cluster.root / "log" / f"{name}.stdout").open("wb")
    with log:
        cluster.processes[name] = subprocess.Popen(
            argv, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def _wait(cluster: Cluster, what: str, ready: object) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        dead = [name for name, proc in cluster.processes.items() if proc.poll() is not None]
        if dead:
            raise ClusterUnavailable(f"{', '.join(dead)} exited while waiting for {what}:\n{cluster.logs()}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise ClusterUnavailable(f"timed out after {START_TIMEOUT:.0f} s waiting for {what}:\n{cluster.logs()}")


@contextlib.contextmanager
def running_cluster(root: Path) -> Iterator[Cluster]:
    """Start the cluster under ``root``, wait until ``sinfo`` shows both nodes idle, yield it, stop it.

    Raises ``ClusterUnavailable`` (with the daemons' logs) when it cannot start.
    """
    reason = missing_requirements()
    if reason:
        raise ClusterUnavailable(reason)
    for sub in ("state", "run", "log", "munge", "munge-socket", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses key, log and socket directories that others may write to, whatever the umask.
        (root / sub).chmod(0o700 if sub == "munge" else 0o755)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    names = ("slurmctld", *NODES)
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, ports, os.cpu_count() or 1))
    cluster = Cluster(root=root, conf=conf)
    socket_path = root / "munge-socket" / "munge.socket"
    try:
        _start(
            cluster,
            "munged",
            [
                "munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
                f"--log-file={root}/log/munged.log", f"--pid-file={root}/run/munged.pid",
                f"--seed-file={root}/munge/munged.seed",
            ],
        )  # fmt: skip
        _wait(cluster, "munged's socket", socket_path.exists)
        _start(cluster, "slurmctld", ["slurmctld", "-D", "-i"])
        _wait(cluster, "slurmctld", lambda: cluster.run("scontrol", "ping", timeout=10).returncode == 0)
        for node in NODES:
            _start(cluster, node, ["slurmd", "-D", "-N", node])
        _wait(
            cluster,
            "both nodes idle in sinfo",
            lambda: all(cluster.node_states().get(node) == "idle" for node in NODES),
        )
        yield cluster
    finally:
        cluster.stop()
