"""Daemons a rank starts never outlive the job (``smlaunch.runtime.supervision.containment``), checked by
process tree.

Each rank starts two daemons the way real scripts do (a TensorBoard or data server): one with
``subprocess.Popen(..., start_new_session=True)`` that keeps the rank's stdout, one by a double fork
with its own session and an empty environment (so no ``TRAINING_JOB_NAME`` gives it away). Every
daemon writes its pid; after the job ends normally, or after its agent is SIGKILLed, none of those
pids, nor any process that was in the job's tree while it ran, may still be alive.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    describe_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    wait_for_line,
    wait_terminal,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process containment needs Linux")

DAEMONS = """
import argparse, os, subprocess, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--pid-dir", type=str)
parser.add_argument("--release", type=str)
args = parser.parse_args()
where = f"{os.environ['SM_CURRENT_HOST']}-{os.environ.get('RANK', '0')}"
sleeper = [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
           "time.sleep(600)"]

# A daemon in its own session that keeps the rank's stdout open.
subprocess.Popen(sleeper + [os.path.join(args.pid_dir, where + "-session")], start_new_session=True)

# A classic double fork: the intermediate exits, the grandchild is orphaned, with a clean environment.
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execve(sys.executable, sleeper + [os.path.join(args.pid_dir, where + "-double")], {})
    os._exit(0)
os.waitpid(child, 0)

deadline = time.time() + 60
while len([n for n in os.listdir(args.pid_dir) if n.startswith(where)]) < 2 and time.time() < deadline:
    time.sleep(0.05)
print("daemons started", flush=True)
deadline = time.time() + 600
while not os.path.exists(args.release) and time.time() < deadline:  # the test looks at the tree first
    time.sleep(0.05)
print("rank done", flush=True)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")
    for pid_file in (tmp_path / "pids").glob("*"):  # a failing test must not leave its daemons
        try:
            psutil.Process(int(pid_file.read_text())).kill()
        except (psutil.Error, ValueError):
            pass


def _daemon_pids(pid_dir: Path, expected: int) -> dict[str, int]:
    deadline = time.monotonic() + 120
    while True:
        pids = {}
        for path in pid_dir.iterdir():
            text = path.read_text()
            if text:
                pids[path.name] = int(text)
        if len(pids) >= expected or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def _job_tree(agent_pid: int) -> list[psutil.Process]:
    """The agent and everything below it, as the process tree shows it now."""
    agent = psutil.Process(agent_pid)
    return [agent, *agent.children(recursive=True)]


def _assert_all_gone(procs: list[psutil.Process], settle: float = 60.0) -> None:
    deadline = time.monotonic() + settle
    while True:
        alive = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not alive, f"left behind: {describe_processes(alive)}"


def _run_with_daemons(tmp_path: Path, name: str) -> tuple[LocalBackend, list[psutil.Process]]:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    backend = LocalSession(tmp_path / "jobs", verbose=True).backend()  # each host names its cgroup
    assert isinstance(backend, LocalBackend)
    hyperparameters = {"pid-dir": str(pid_dir), "release": str(tmp_path / "release")}
    spec = make_spec(tmp_path, name, DAEMONS, hyperparameters=hyperparameters)
    backend.submit(job_request(spec))
    wait_for_line(backend, name, "[algo-1/rank 0] daemons started")
    wait_for_line(backend, name, "[algo-2/rank 0] daemons started")
    daemons = _daemon_pids(pid_dir, expected=4)
    assert len(daemons) == 4, daemons
    agent_pid = json.loads(backend.job_dir(name).agent_file.read_text())["pid"]
    tree = _job_tree(agent_pid)
    tree_pids = {p.pid for p in tree}
    # The subreaper at work: each double-forked daemon was reparented into its host's tree, not init.
    assert all(pid in tree_pids for pid in daemons.values()), (daemons, tree_pids)
    procs = [*tree, *(psutil.Process(pid) for pid in daemons.values() if pid not in tree_pids)]
    return backend, procs


@pytest.mark.slow
def test_daemons_of_the_ranks_die_when_the_job_ends_normally(tmp_path: Path) -> None:
    backend, procs = _run_with_daemons(tmp_path, "daemons-normal")
    (tmp_path / "release").touch()  # the ranks end normally now
    description = wait_terminal(backend, "daemons-normal")
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    _assert_all_gone(procs)
    assert_no_job_processes("daemons-normal", backend.job_dir("daemons-normal").path)
    log = "\n".join(backend.log_lines("daemons-normal"))
    assert log.count("2 process(es) the ranks left behind") == 2  # each host swept its own two
    for line in log.splitlines():  # each host's cgroup, where it had one, is gone with the job
        if "containment:" in line and " cgroup " in line:
            assert not Path(line.rsplit(" cgroup ", 1)[1]).exists()


@pytest.mark.slow
def test_daemons_of_the_ranks_die_when_the_agent_is_sigkilled(tmp_path: Path) -> None:
    backend, procs = _run_with_daemons(tmp_path, "daemons-orphaned")
    procs[0].send_signal(signal.SIGKILL)  # the agent
    _assert_all_gone(procs)
    job = backend.job_dir("daemons-orphaned")
    assert_no_job_processes("daemons-orphaned", job.path)
    assert backend.describe("daemons-orphaned")["TrainingJobStatus"] == contract.STATUS_FAILED


# A host without a usable cgroup (a container's read-only /sys/fs/cgroup): the subreaper alone.
SUBREAPER_ONLY = """
import sys
from smlaunch.runtime.supervision.containment import Containment
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec
from smlaunch.runtime.supervision.supervisor import Supervisor

rank = ProcessSpec(label="rank 0", argv=[sys.executable, "-c", sys.argv[1]], env={}, cwd=".", rank=0)
containment = Containment("algo-1", use_cgroup=False)
result = Supervisor("algo-1", containment=containment, verbose=True).run(LaunchPlan("process", [rank]))
assert containment.cgroup is None
sys.exit(result.exit_code)
"""

DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"])
    os._exit(0)
os.wait()
print("daemon", flush=True)
"""


def test_without_a_cgroup_the_subreaper_kills_a_double_forked_daemon() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SUBREAPER_ONLY, DOUBLE_FORK], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "containment: subreaper\n" in out.stdout
    killed = [line for line in out.stdout.splitlines() if "left behind" in line]
    assert len(killed) == 1 and "1 process(es)" in killed[0], out.stdout
    pid = int(killed[0].rsplit(": ", 1)[1].split()[0])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


# Every rank of a host runs in the host's cgroup from its first instruction (moved before exec).
IN_THE_CGROUP = """
import sys
from smlaunch.runtime.supervision.containment import Containment
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec
from smlaunch.runtime.supervision.supervisor import Supervisor

code = "print(open('/proc/self/cgroup').read().strip(), flush=True)"
ranks = [
    ProcessSpec(label=f"rank {r}", argv=[sys.executable, "-c", code], env={}, cwd=".", rank=r)
    for r in range(3)
]
containment = Containment("algo-1")
result = Supervisor("algo-1", containment=containment, verbose=True).run(LaunchPlan("process", ranks))
print("cgroup:", containment.describe())
sys.exit(result.exit_code)
"""


def test_every_rank_runs_in_the_hosts_cgroup() -> None:
    out = subprocess.run([sys.executable, "-c", IN_THE_CGROUP], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    used = [line for line in out.stdout.splitlines() if "containment: " in line and " cgroup " in line]
    if not used:
        pytest.skip("no writable cgroup v2 hierarchy here (the subreaper alone contains the ranks)")
    name = Path(used[0].rsplit(" cgroup ", 1)[1]).name
    where = [line for line in out.stdout.splitlines() if line.startswith("[algo-1/rank ") and "::" in line]
    assert len(where) == 3 and all(line.endswith("/" + name) for line in where), out.stdout


def test_the_cgroup_of_a_runtime_that_died_is_removed_by_the_next() -> None:
    enter = (
        "from smlaunch.runtime.supervision.containment import Containment as C; c = C('algo-9'); "
        "c.enter(); print(c.cgroup)"
    )

    def runtime_without_its_sweep() -> str:  # exits as a SIGKILLed runtime would: its cgroup stays
        done = subprocess.run([sys.executable, "-c", enter], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    left = runtime_without_its_sweep()
    if left == "None":
        pytest.skip("no writable cgroup v2 hierarchy here (the subreaper alone contains the ranks)")
    assert Path(left).is_dir()
    second = runtime_without_its_sweep()
    assert not Path(left).exists()
    Path(second).rmdir()
