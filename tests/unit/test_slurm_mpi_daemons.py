"""MPI daemons (``orted``) on Slurm: each gets its own OpenMPI session directory, and one that dies
before ``mpirun`` heard from it fails the job instead of leaving ``mpirun`` waiting forever.

The race these guard against was seen on the two-node test cluster (both nodes on one machine): two
``orted`` steps of one job creating ``/tmp/ompi.<host>.<uid>/jf.<family>`` at once, one failing
``orte_init`` with ``mkdir ... File exists`` (exit code 213), and the job hanging in Training.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from smlaunch.sdk.backends.emulated.executors.base import Host, LaunchContext
from smlaunch.sdk.backends.emulated.executors.slurm import executor as slurm_executor
from smlaunch.sdk.backends.emulated.executors.slurm.executor import SlurmExecutor
from smlaunch.sdk.backends.emulated.state import JobDir
from tests.unit.test_slurm import client, job_settings, spec

# The daemon's stand-in: says where OpenMPI would keep its session, checks it is a private
# directory, makes the subtree OpenMPI makes, and ends with the code it is given.
DAEMON = textwrap.dedent(
    """
    import os, stat, sys, time
    base = os.environ["OMPI_MCA_orte_tmpdir_base"]
    mode = stat.S_IMODE(os.stat(base).st_mode)
    os.makedirs(os.path.join(base, "ompi.vm.0", "jf.5760", "1"))
    print(base, oct(mode), flush=True)
    time.sleep(float(sys.argv[2]))
    sys.exit(int(sys.argv[1]))
    """
)
RUN_ORTED = (
    "import sys; from smlaunch.sdk.backends.emulated.executors.slurm.host import run_orted; "
    "sys.exit(run_orted(sys.argv[1:]))"
)


def start_daemon(code: int, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RUN_ORTED, sys.executable, "-c", DAEMON, str(code), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_each_daemon_gets_a_private_session_directory_removed_when_it_ends() -> None:
    first, second = start_daemon(0, 0.5), start_daemon(213, 0.5)  # at the same time, as mpirun does
    out_first, _ = first.communicate(timeout=60)
    out_second, _ = second.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 213)
    (base_first, mode_first), (base_second, mode_second) = out_first.split(), out_second.split()
    assert base_first != base_second
    assert mode_first == mode_second == "0o700"
    assert not Path(base_first).exists() and not Path(base_second).exists()


def test_a_daemon_ended_by_slurms_sigterm_still_has_its_directory_removed() -> None:
    daemon = subprocess.Popen(
        [sys.executable, "-c", RUN_ORTED, sys.executable, "-c", DAEMON, "0", "60"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert daemon.stdout is not None
    base = daemon.stdout.readline().split()[0]
    os.killpg(daemon.pid, signal.SIGTERM)  # as Slurm ends a step: every process in it
    assert daemon.wait(timeout=60) == 128 + signal.SIGTERM
    assert not Path(base).exists()


class Step:
    """An ``orted`` step's ``srun`` as the agent holds it."""

    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


def mpi_executor(tmp_path: Path, daemon_code: int | None) -> tuple[SlurmExecutor, LaunchContext, list[str]]:
    slurm, runner = client(
        {"squeue --noheader --steps": (0, "7.0|algo-1\n7.1|algo-2\n", ""), "scancel": (0, "", "")}
    )
    executor = SlurmExecutor(client=slurm, job_id="7", nodelist="node[1-2]")
    executor._mpi_dir = tmp_path / "mpi"
    executor._mpi_dir.mkdir()
    (executor._mpi_dir / "orted-algo-2.log").write_text(
        "A call to mkdir was unable to create the desired directory:\n"
        "  Directory: /tmp/ompi.vm.0/jf.5760\n  Error:     File exists\n"
        "srun: error: node2: task 0: Exited with exit code 213\n"
    )
    executor._placement = {"algo-1": ("node1", "127.0.0.1"), "algo-2": ("node2", "127.0.0.1")}
    executor._mpi_steps = {"algo-1": Step(None), "algo-2": Step(daemon_code)}  # type: ignore[dict-item]
    hosts = [Host(name=f"algo-{i + 1}", index=i, base=tmp_path / f"algo-{i + 1}") for i in range(2)]
    for host in hosts:
        host.proc = Step(None)  # type: ignore[assignment]
    said: list[str] = []
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), hosts, 10.0, said.append)
    executor.runner_calls = runner.calls  # type: ignore[attr-defined]
    return executor, context, said


def test_a_daemon_that_died_before_mpirun_heard_from_it_fails_the_job_naming_it(tmp_path: Path) -> None:
    executor, context, said = mpi_executor(tmp_path, daemon_code=213)
    grace = slurm_executor.MPI_DAEMON_GRACE_SECONDS
    executor._check_mpi_steps(context, 1000.0)
    executor._check_mpi_steps(context, 1000.0 + grace - 1)  # mpirun may still be ending the job
    assert executor.root_cause(context) is None and said == []
    executor._check_mpi_steps(context, 1000.0 + grace)
    cause = executor.root_cause(context)
    assert cause is not None and cause["ExitCode"] == 213
    reason = cause["FailureReason"]
    assert reason.startswith(
        "InternalServerError: algo-2's MPI daemon (orted, Slurm step algo-2-mpi on node2)"
    )
    assert "exited with code 213" in reason and "Error:     File exists" in reason
    assert any("algo-2's orted step exited with code 213" in line for line in said)
    cancels = [call[0] for call in executor.runner_calls if call[0][0] == "scancel"]  # type: ignore[attr-defined]
    assert cancels == [["scancel", "--signal=TERM", "7.0"], ["scancel", "--signal=TERM", "7.1"]]


def test_a_daemon_that_ended_well_is_no_fault(tmp_path: Path) -> None:
    executor, context, said = mpi_executor(tmp_path, daemon_code=0)
    executor._check_mpi_steps(context, 1000.0)
    executor._check_mpi_steps(context, 5000.0)
    assert executor.root_cause(context) is None and said == []


def test_a_daemon_that_failed_once_the_hosts_ended_is_no_fault(tmp_path: Path) -> None:
    executor, context, said = mpi_executor(tmp_path, daemon_code=1)
    for host in context.hosts:
        host.proc = Step(1)  # type: ignore[assignment]  # a rank crashed: mpirun ended the job
    executor._check_mpi_steps(context, 1000.0)
    executor._check_mpi_steps(context, 5000.0)
    assert executor.root_cause(context) is None and said == []
