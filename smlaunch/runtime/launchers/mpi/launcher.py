"""MPI (``distribution={"mpi": {"enabled": True, "processes_per_host": N, "custom_mpi_options": ...}}``).

The master host runs one OpenMPI ``mpirun`` that starts every rank of the job; the other hosts only
serve it. The command (reference §4.5, minus the toolkit's faults) is an argv list, never a shell::

    mpirun --host algo-1:N,algo-2:N -np <N*hosts> --allow-run-as-root --tag-output
      -mca orte_abort_on_non_zero_status 1 -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib
      [-mca btl_tcp_if_include eth0 -mca oob_tcp_if_include eth0 -mca plm_rsh_no_tree_spawn 1]
      -x SM_... (every SM_* variable) -x PATH -x LD_LIBRARY_PATH -x PYTHONPATH ... <custom options>
      python -m smlaunch.runtime.launchers.mpi.rank python train.py <args>

- ``custom_mpi_options`` is split with :func:`shlex.split` (quotes are honoured, nothing is
  evaluated); ``--NCCL_DEBUG X`` becomes ``-x NCCL_DEBUG=X`` as in the toolkit, the rest is appended.
- ``sagemaker_mpi_num_processes`` overrides ``-np``.
- Each rank runs :mod:`smlaunch.runtime.launchers.mpi.rank`, which maps OpenMPI's rank variables to ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``... and the rank's own host, then execs the script.
- ``--tag-output`` lines (``[1,3]<stderr>:text``) are split back into ``[algo-2/rank 3] text``; the
  failure reason names the first failing rank, its host, its exit code and its own stderr tail
  (parsed from mpirun's report), not mpirun's (:mod:`smlaunch.runtime.launchers.mpi.output`).

**Local emulation** (every host maps to a loopback address, as the local backend arranges): one
``mpirun`` on the master host serves all emulated hosts (``--host localhost:<all ranks>
--oversubscribe``, loopback only). The hosts meet in a shared private directory (``SMLAUNCH_MPI_DIR``,
which the local agent creates with ``mkdtemp`` inside the job directory; required, never a guessable
path in the system temp directory): every non-master host writes ``env-<host>.json`` (the variables
its ranks need that differ from what every host inherits, and its code dir) and then waits; the
master waits for all of them (bounded by ``SMLAUNCH_MPI_WAIT_SECONDS``, default 600), writes the rank
map, runs ``mpirun``, and writes ``done.json`` (``{"exit_code"}``). Files are 0600. Secrets never go
there: credentials and every other inherited variable reach the ranks through ``mpirun``'s own
environment (the master's, which every host shares), not through a file. A non-master host exits 0
once ``done.json`` appears, or fails if the master's runtime dies without writing it; so for the
local backend a non-master host is an ordinary host process that ends with the job, and any failure
is reported by the master (whose ``failure.json`` names the rank and its emulated host). The meeting
place is :class:`smlaunch.runtime.launchers.mpi.local.LocalRendezvous`.

**Slurm** (``SMLAUNCH_MPI_SLURM`` set by the Slurm executor; chosen by that variable, never from
the addresses): the hosts meet in ``SMLAUNCH_MPI_DIR`` (on the shared directory) as in the local
emulation, but the master's ``mpirun`` starts each host's ranks on that host's node, through Slurm:
OpenMPI's ``rsh`` launcher with :mod:`smlaunch.contract.mpi_slurm` as its agent has the job's agent start one
``orted`` per host as a step of the job (``srun --overlap --nodes=1 --nodelist=<node>``, in the
host's tree at ``/opt/ml``, with the environment the host started with), and each rank takes its
host's published environment from the rank map (the master's too)::

    mpirun --host algo-1:N,algo-2:N -np <N*hosts> ... -mca plm rsh -mca ras ^slurm
      -mca plm_rsh_agent "<python> -m smlaunch.contract.mpi_slurm" -mca plm_rsh_no_tree_spawn 1

(``ras ^slurm``: the master's own step is a one-node allocation, which must not replace
``--host``; no ``btl`` choice: the cluster's OpenMPI picks its fabric, or ``custom_mpi_options``
does). The hosts are on different nodes, so no process id is compared across them: a non-master
host ends when ``done.json`` appears, and the agent ends the job's steps if the master dies first.

**Real multi-node** (SageMaker, Docker, Kubernetes): the roles of
:mod:`smlaunch.runtime.launchers.mpi.roles` (workers run sshd and wait for the master's job to end;
the master waits, bounded, for every worker's sshd, then runs ``mpirun``, then tells the workers it
is done). With ``SMLAUNCH_SSH_CONFIG`` (Kubernetes pods) ``mpirun``'s remote agent is
``ssh -F <that config>`` (``-mca plm_rsh_agent``).
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.contract.mpi_slurm import wait_seconds
from smlaunch.runtime.env_vars import process_env
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec, RunResult
from smlaunch.runtime.launchers.launcher import Launcher
from smlaunch.runtime.launchers.mpi.local import LocalRendezvous
from smlaunch.runtime.launchers.mpi.output import MpiOutput
from smlaunch.runtime.launchers.mpi.roles import ssh_argv
from smlaunch.runtime.supervision.supervisor import Supervisor

EXPORTED = (
    "PATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "CURRENT_HOST",
    "TRAINING_JOB_NAME",
    "SAGEMAKER_JOB_NAME",
    "SAGEMAKER_REGION",
    "OMP_NUM_THREADS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    contract.SMLAUNCH_FAULTS,
    contract.SMLAUNCH_MPI_RANK_MAP,
)
"""Variables exported to every rank (``-x``) besides every ``SM_*`` one, when set."""

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def _is_loopback(address: str) -> bool:
    if address in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def split_custom_options(options: str) -> list[str]:
    """``custom_mpi_options`` as argv: shlex-split (never a shell).

    ``--NCCL_DEBUG X`` becomes ``-x NCCL_DEBUG=X``, as the toolkit does."""
    try:
        tokens = shlex.split(options)
    except ValueError as error:
        raise HostConfigurationError(
            contract.HP_MPI_CUSTOM_OPTIONS, options, f"cannot be split: {error}", "balance the quotes"
        ) from None
    out: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "--NCCL_DEBUG" and index + 1 < len(tokens):
            out += ["-x", f"NCCL_DEBUG={tokens[index + 1]}"]
            index += 2
            continue
        if token.startswith("--NCCL_DEBUG="):
            out += ["-x", "NCCL_DEBUG=" + token.split("=", 1)[1]]
        else:
            out.append(token)
        index += 1
    return out


class MpiLauncher(Launcher):
    name: ClassVar[str] = "mpi"
    options_key: ClassVar[str] = contract.HP_MPI_CUSTOM_OPTIONS

    # --- topology (pure) -------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        return list(self.env.distribution_hosts)

    @property
    def ppn(self) -> int:
        return self.env.processes_per_host

    @property
    def num_processes(self) -> int:
        raw = self.env.framework_params.get(contract.HP_MPI_NUM_PROCESSES)
        if raw in (None, ""):
            return self.ppn * len(self.hosts)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise HostConfigurationError(contract.HP_MPI_NUM_PROCESSES, raw, "must be an integer >= 1")
        return value

    @property
    def on_slurm(self) -> bool:
        """``SMLAUNCH_MPI_SLURM`` is set: the Slurm executor starts each host's ``orted`` on request."""
        return bool(self.env.environ.get(contract.SMLAUNCH_MPI_SLURM))

    @property
    def local_emulation(self) -> bool:
        """Every host is this machine (the local backend maps all of them to loopback), off Slurm."""
        if self.on_slurm:
            return False
        return bool(self.env.host_addresses) and all(_is_loopback(self.env.address_of(h)) for h in self.hosts)

    @property
    def meets_in_directory(self) -> bool:
        """The hosts meet in ``SMLAUNCH_MPI_DIR`` (local emulation and Slurm), not over ssh."""
        return self.local_emulation or self.on_slurm

    def rendezvous(self) -> LocalRendezvous:
        raw = self.env.environ.get(contract.SMLAUNCH_MPI_DIR, "")
        if not raw:
            raise HostConfigurationError(
                contract.SMLAUNCH_MPI_DIR,
                raw,
                "emulated MPI hosts meet in a private directory they share, and none was given",
                "set it to a directory only you can read (mkdtemp), the same for every host; the local "
                "backend does this for you",
            )
        return LocalRendezvous(Path(raw), wait_seconds(self.env.environ), same_machine=not self.on_slurm)

    def published_env(self) -> dict[str, str]:
        """What a non-master host's ranks need beyond the environment every emulated host inherits
        (the master's, which ``mpirun`` passes on): the variables this runtime set or changed, and
        this host's ``SAGEMAKER_BASE_DIR``. Inherited secrets are identical on every host, so they
        are never in it, and never written to the rendezvous directory."""
        inherited = self.env.environ
        env = {k: v for k, v in process_env(self.env).items() if inherited.get(k) != v}
        if contract.BASE_DIR_ENV in inherited:
            env[contract.BASE_DIR_ENV] = inherited[contract.BASE_DIR_ENV]
        return env

    def rank_map(self) -> dict[str, Any]:
        """What :mod:`smlaunch.runtime.launchers.mpi.rank` needs, without the emulated hosts' environments."""
        return {
            "hosts": self.hosts,
            "ppn": self.ppn,
            "master_addr": self.env.master_addr,
            "master_port": self.env.master_port,
            "addresses": {h: self.env.address_of(h) for h in self.hosts},
        }

    def rank_map_value(self) -> str:
        """``SMLAUNCH_MPI_RANK_MAP``: a file in the rendezvous dir locally, inline JSON across nodes."""
        if self.meets_in_directory:
            return str(self.rendezvous().rank_map_file)
        return json.dumps(self.rank_map(), separators=(",", ":"))

    def base_env(self) -> dict[str, str]:
        env = process_env(self.env)
        env[contract.SMLAUNCH_MPI_RANK_MAP] = self.rank_map_value()
        if self.ppn > 1 and "OMP_NUM_THREADS" not in self.env.environ:
            env["OMP_NUM_THREADS"] = "1"
        return env

    def command(self, env: Mapping[str, str]) -> list[str]:
        """The ``mpirun`` argv."""
        from smlaunch.runtime.env_vars import program_argv

        total = self.num_processes
        hosts = self.hosts if self.ppn == 1 else [f"{h}:{self.ppn}" for h in self.hosts]
        if self.on_slurm:
            argv = ["mpirun", "--host", ",".join(hosts), "-np", str(total)]
            network = [
                "-mca",
                "plm",
                "rsh",
                "-mca",
                "ras",
                "^slurm",
                "-mca",
                "plm_rsh_agent",
                f"{self.python} -m smlaunch.contract.mpi_slurm",
                "-mca",
                "plm_rsh_no_tree_spawn",
                "1",
            ]
        elif self.local_emulation:
            argv = ["mpirun", "--host", f"localhost:{total}", "-np", str(total), "--oversubscribe"]
            network = [
                "-mca",
                "oob_tcp_if_include",
                "lo",
                "-mca",
                "btl",
                "self,vader,tcp",
                "-mca",
                "btl_tcp_if_include",
                "lo",
            ]
        else:
            argv = ["mpirun", "--host", ",".join(hosts), "-np", str(total)]
            interface = self.env.network_interface_name
            network = [
                "-mca",
                "btl_tcp_if_include",
                interface,
                "-mca",
                "oob_tcp_if_include",
                interface,
                "-mca",
                "plm_rsh_no_tree_spawn",
                "1",
                "-mca",
                "btl",
                "^openib",
            ]
            if self.env.environ.get(contract.SMLAUNCH_SSH_CONFIG):  # the job's own ssh client config
                network += ["-mca", "plm_rsh_agent", " ".join(ssh_argv(self.env.environ))]
        argv += [
            "--allow-run-as-root",
            "--tag-output",
            "-mca",
            "orte_abort_on_non_zero_status",
            "1",
            "-bind-to",
            "none",
            "-map-by",
            "slot",
            "-mca",
            "pml",
            "ob1",
            *network,
        ]
        exported = sorted(k for k in env if k.startswith(contract.SM_PREFIX)) + [
            k for k in EXPORTED if k in env
        ]
        for name in exported:
            argv += ["-x", name]
        argv += split_custom_options(str(self.env.framework_params.get(self.options_key) or ""))
        return [
            *argv,
            self.python,
            "-m",
            "smlaunch.runtime.launchers.mpi.rank",
            *program_argv(self.env, self.python),
        ]

    def plan(self) -> LaunchPlan:
        """The master's ``mpirun`` (a non-master host starts nothing; see :meth:`run`)."""
        env = self.base_env()
        output = MpiOutput(self.hosts, self.ppn)
        spec = ProcessSpec(
            label="mpirun",
            argv=self.command(env),
            env=env,
            cwd=str(self.env.code_dir),
            rank=None,
            split_line=output,
            signalled_with_host=self.on_slurm,  # Slurm signals every process of the master's step
        )
        topology = {
            "hosts": ", ".join(self.hosts),
            "ranks": f"{self.num_processes} ({self.ppn} per host, placed host-major)",
            "master": self.env.master_hostname,
            "mode": self._mode(),
        }
        where = f"host {self.env.host_rank + 1} of {len(self.hosts)}"
        if self.env.is_master:
            summary = f"mpirun starts {self.num_processes} ranks ({self.ppn} per host) from {where}"
        else:
            summary = f"{where}, its ranks started by {self.env.master_hostname}'s mpirun"
        return LaunchPlan(
            launcher=self.name,
            processes=[spec] if self.env.is_master else [],
            topology=topology,
            summary=summary,
        )

    def _mode(self) -> str:
        if self.on_slurm:
            return "Slurm: mpirun starts each host's ranks on its node as a step of the job (srun)"
        if self.local_emulation:
            return "local emulation: one mpirun on this machine serves every host"
        return "multi-node: mpirun over ssh"

    # --- roles -----------------------------------------------------------------------------------

    def run(self, supervisor: Supervisor) -> RunResult:
        if shutil.which("mpirun", path=self.env.environ.get("PATH")) is None:
            raise HostConfigurationError(
                "distribution",
                "mpi",
                "needs OpenMPI's mpirun, which is not on PATH",
                "install it (Debian/Ubuntu: apt-get install openmpi-bin)",
            )
        if self.meets_in_directory:
            return self._run_rendezvous(supervisor)
        from smlaunch.runtime.launchers.mpi.roles import MasterRole, WorkerRole

        workers = [h for h in self.hosts if h != self.env.master_hostname]
        timeout = wait_seconds(self.env.environ)
        if not self.env.is_master:
            WorkerRole(
                self.env.master_hostname, job=self.env.run_id, timeout=timeout, log=supervisor.log
            ).run()
            return RunResult(host=self.env.current_host)
        master = MasterRole(workers, job=self.env.run_id, timeout=timeout, log=supervisor.log)
        master.wait_for_workers()
        result = self._supervise(supervisor)
        master.finish()
        return result

    def _supervise(self, supervisor: Supervisor) -> RunResult:
        plan = self.plan()
        result = supervisor.run(plan)
        output = plan.processes[0].split_line
        if result.first_failure is not None and isinstance(output, MpiOutput):
            result.first_failure = output.root_cause(result.first_failure)
        return result

    def _run_rendezvous(self, supervisor: Supervisor) -> RunResult:
        meeting = self.rendezvous()
        host = self.env.current_host
        if not self.env.is_master:
            meeting.publish(host, self.published_env(), str(self.env.code_dir))
            how = "runs this host's ranks"
            if self.on_slurm:
                how = "starts this host's ranks through Slurm"
            supervisor.log(f"MPI: the master ({self.env.master_hostname}) {how}; waiting for it")
            for hook in supervisor.hooks:  # fault injection (kill_host) applies to a waiting host too
                hook.on_start([])
            try:
                code = meeting.wait_for_master(host)
            finally:
                for hook in supervisor.hooks:
                    hook.close()
            # One closing line: "training succeeded" after a master's success, else what it was.
            failed = f"training failed on the master ({self.env.master_hostname}): exit code {code}"
            return RunResult(host=host, outcome=None if code == 0 else failed)
        meeting.announce_master()
        others = [h for h in self.hosts if h != host]
        result: RunResult | None = None
        try:
            published = meeting.gather(others)
            rank_map = self.rank_map()
            rank_map["env"] = {h: published[h]["env"] for h in others}
            rank_map["env"][host] = self.published_env()  # the ranks' own env on Slurm; no-op locally
            rank_map["cwd"] = {h: published[h]["cwd"] for h in others}
            rank_map["cwd"][host] = str(self.env.code_dir)
            meeting.write_rank_map(rank_map)
            result = self._supervise(supervisor)
            return result
        finally:
            meeting.finish(result.exit_code if result is not None else 1, others)
