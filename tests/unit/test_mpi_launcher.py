"""MPI launcher plans, the rank wrapper's mapping, mpirun output parsing, and the host roles (fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.rank.boot import BOOT_DIR
from smlaunch.runtime.environment import Environment, HostConfigurationError
from smlaunch.runtime.launchers import launcher_name
from smlaunch.runtime.launchers.base import RankFailure
from smlaunch.runtime.launchers.mpi.launcher import MpiLauncher, split_custom_options
from smlaunch.runtime.launchers.mpi.output import MpiOutput
from smlaunch.runtime.launchers.mpi.rank import rank_environment
from smlaunch.runtime.launchers.mpi.roles import MasterRole, WorkerRole, done_marker, ssh_argv
from tests.functional._runtime_tree import write_host_tree

HOSTS = ["algo-1", "algo-2"]


def mpi_env(
    tmp_path: Path,
    host: str,
    options: str = "",
    local: bool = True,
    ppn: int = 2,
    extra: dict[str, str] | None = None,
) -> Environment:
    base = tmp_path / host
    hps = {
        contract.HP_PROGRAM: '"train.py"',
        contract.HP_JOB_NAME: '"mpi-job"',
        contract.HP_MPI_ENABLED: "true",
        contract.HP_MPI_PROCESSES_PER_HOST: str(ppn),
        contract.HP_MPI_CUSTOM_OPTIONS: json.dumps(options),
        "epochs": "3",
    }
    write_host_tree(base, host, HOSTS, hps)
    (base / "code" / "train.py").write_text("print('hi')\n")
    environ = {contract.SMLAUNCH_MASTER_PORT: "41000", "PATH": "/usr/bin:/bin"}
    if local:
        environ[contract.SMLAUNCH_HOST_ADDRESSES] = json.dumps({h: "127.0.0.1" for h in HOSTS})
        environ[contract.SMLAUNCH_MPI_DIR] = str(tmp_path / "meet")
    environ.update(extra or {})
    return Environment.from_files(base, environ)


def test_selected_for_mpi_enabled(tmp_path: Path) -> None:
    assert launcher_name(mpi_env(tmp_path, "algo-1")) == "mpi"


def test_local_emulation_command(tmp_path: Path) -> None:
    launcher = MpiLauncher(mpi_env(tmp_path, "algo-1", options='-x FOO="a b" --NCCL_DEBUG WARN ; rm -rf /'))
    assert launcher.local_emulation
    plan = launcher.plan()
    [spec] = plan.processes
    argv = spec.argv
    assert argv[:6] == ["mpirun", "--host", "localhost:4", "-np", "4", "--oversubscribe"]
    for flag in ("--allow-run-as-root", "--tag-output"):
        assert flag in argv
    assert argv[argv.index("orte_abort_on_non_zero_status") + 1] == "1"
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {
        "SM_HOSTS",
        "SM_CURRENT_HOST",
        "SM_MODEL_DIR",
        "SM_TRAINING_ENV",
        "PATH",
        "PYTHONPATH",
    } <= exported
    assert {"FOO=a b", "NCCL_DEBUG=WARN"} <= exported
    assert "rm" in argv and "/" in argv and "rm -rf /" not in argv  # split, never evaluated
    tail = argv[argv.index("smlaunch.runtime.launchers.mpi.rank") - 2 :]
    assert tail[1:] == ["-m", "smlaunch.runtime.launchers.mpi.rank", tail[0], "train.py", "--epochs", "3"]
    assert spec.rank is None and spec.split_line is not None
    rank_map = spec.env[contract.SMLAUNCH_MPI_RANK_MAP]
    assert rank_map == str(tmp_path / "meet" / "ranks.json")


def test_local_emulation_needs_a_private_meeting_directory(tmp_path: Path) -> None:
    launcher = MpiLauncher(mpi_env(tmp_path, "algo-1", extra={contract.SMLAUNCH_MPI_DIR: ""}))
    with pytest.raises(HostConfigurationError, match=contract.SMLAUNCH_MPI_DIR):
        launcher.plan()


def test_published_environment_holds_only_this_hosts_variables(tmp_path: Path) -> None:
    """What a waiting host writes for the master: its own SM_* view, never inherited secrets."""
    secrets = {"AWS_SECRET_ACCESS_KEY": "planted-secret", "HF_TOKEN": "planted-token"}
    base = str(tmp_path / "algo-2")
    env = mpi_env(tmp_path, "algo-2", extra={**secrets, contract.BASE_DIR_ENV: base})
    published = MpiLauncher(env).published_env()
    assert published["SM_CURRENT_HOST"] == "algo-2" and published[contract.BASE_DIR_ENV] == base
    assert published["SM_MODEL_DIR"] == str(tmp_path / "algo-2" / "model")
    assert not set(secrets) & set(published) and "PATH" not in published
    meeting = MpiLauncher(env).rendezvous()
    meeting.publish("algo-2", published, "/code")
    assert meeting.directory.stat().st_mode & 0o777 == 0o700
    assert meeting.env_file("algo-2").stat().st_mode & 0o777 == 0o600
    assert "planted" not in meeting.env_file("algo-2").read_text()


def test_multi_node_command_and_worker_plan(tmp_path: Path) -> None:
    launcher = MpiLauncher(mpi_env(tmp_path, "algo-1", local=False))
    assert not launcher.local_emulation
    argv = launcher.plan().processes[0].argv
    assert argv[:5] == ["mpirun", "--host", "algo-1:2,algo-2:2", "-np", "4"]
    assert "--oversubscribe" not in argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth0"
    rank_map = json.loads(launcher.plan().processes[0].env[contract.SMLAUNCH_MPI_RANK_MAP])
    assert rank_map["hosts"] == HOSTS and rank_map["ppn"] == 2
    single = MpiLauncher(mpi_env(tmp_path / "one", "algo-1", local=False, ppn=1))
    assert single.plan().processes[0].argv[2] == "algo-1,algo-2"
    assert MpiLauncher(mpi_env(tmp_path / "w", "algo-2", local=False)).plan().processes == []


def test_a_jobs_own_ssh_client_config_reaches_mpiruns_remote_agent_and_the_marker(tmp_path: Path) -> None:
    """Pods cannot hold the job's ssh config in /etc/ssh: the master's ssh reads it with -F."""
    config = "/opt/ml/.smlaunch-ssh/ssh_config"
    env = mpi_env(tmp_path, "algo-1", local=False, extra={contract.SMLAUNCH_SSH_CONFIG: config})
    argv = MpiLauncher(env).plan().processes[0].argv
    assert argv[argv.index("plm_rsh_agent") + 1] == f"ssh -F {config}"
    assert ssh_argv({contract.SMLAUNCH_SSH_CONFIG: config}) == ["ssh", "-F", config]
    assert ssh_argv({}) == ["ssh"]
    plain = MpiLauncher(mpi_env(tmp_path / "plain", "algo-1", local=False)).plan().processes[0].argv
    assert "plm_rsh_agent" not in plain  # the image's OMPI_MCA_plm_rsh_agent=ssh (SageMaker, Docker)


def test_custom_options_are_split_like_a_shell_but_never_run_by_one() -> None:
    assert split_custom_options("--NCCL_DEBUG=INFO -x A='1 2' --verbose") == [
        "-x",
        "NCCL_DEBUG=INFO",
        "-x",
        "A=1 2",
        "--verbose",
    ]
    assert split_custom_options("") == []
    assert split_custom_options("$(whoami) `id`") == ["$(whoami)", "`id`"]
    with pytest.raises(HostConfigurationError, match="quotes"):
        split_custom_options("-x 'unbalanced")


def test_rank_wrapper_maps_open_mpi_ranks_to_torch_and_host_variables() -> None:
    rank_map = {
        "hosts": HOSTS,
        "ppn": 2,
        "master_addr": "127.0.0.1",
        "master_port": 41000,
        "addresses": {h: "127.0.0.1" for h in HOSTS},
        "env": {"algo-2": {"SM_MODEL_DIR": "/jobs/algo-2/model", "SM_CURRENT_HOST": "algo-2"}},
        "cwd": {"algo-1": "/jobs/algo-1/code", "algo-2": "/jobs/algo-2/code"},
    }
    environ = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "SM_MODEL_DIR": "/jobs/algo-1/model",
        "SM_CURRENT_HOST": "algo-1",
    }
    env, cwd = rank_environment(rank_map, environ)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
        "3",
        "1",
        "4",
        "2",
    )
    assert (env["NODE_RANK"], env["GROUP_RANK"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
        "1",
        "1",
        "127.0.0.1",
        "41000",
    )
    assert env["SM_CURRENT_HOST"] == env["CURRENT_HOST"] == "algo-2"
    assert env["SM_MODEL_DIR"] == "/jobs/algo-2/model" and env[contract.SM_CURRENT_HOST_RANK] == "1"
    assert cwd == "/jobs/algo-2/code"
    rank_map["env"]["algo-2"]["PYTHONPATH"] = "/jobs/algo-2/code"
    boot = "SMLAUNCH_RANK_DIR"
    traced, _ = rank_environment(
        rank_map, {**environ, boot: "/tmp/ranks", "PYTHONPATH": f"{BOOT_DIR}:/jobs/algo-1/code"}
    )
    assert traced["PYTHONPATH"] == f"{BOOT_DIR}:/jobs/algo-2/code"  # the stack/fault bootstrap stays first
    env0, cwd0 = rank_environment(rank_map, {**environ, "OMPI_COMM_WORLD_RANK": "0"})
    assert (
        env0["SM_MODEL_DIR"] == "/jobs/algo-1/model"
        and env0["LOCAL_RANK"] == "0"
        and cwd0 == "/jobs/algo-1/code"
    )


MPIRUN_FAILURE = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[18482,1],3]
  Exit code:    7
--------------------------------------------------------------------------"""


def test_tagged_output_is_labelled_by_host_and_rank_and_the_root_cause_is_the_rank() -> None:
    output = MpiOutput(HOSTS, 2)
    assert output("[1,0]<stdout>:hello[1,0]<stdout>: [1,0]<stdout>:0") == ("algo-1/rank 0", "hello 0")
    # pieces of two ranks on one output line: each rank's line is reassembled
    assert output("[1,1]<stdout>:rank 1 total [1,2]<stdout>:rank 2 total 10") == (
        "algo-2/rank 2",
        "rank 2 total 10",
    )
    assert output("[1,1]<stdout>:10") == ("algo-1/rank 1", "rank 1 total 10")
    assert output("[1,3]<stderr>:Traceback (most recent call last):") == (
        "algo-2/rank 3",
        "Traceback (most recent call last):",
    )
    output('[1,3]<stderr>:  File "train.py", line 3, in <module>')
    output("[1,3]<stderr>:ValueError: boom")
    output("[1,2]<stderr>:unrelated warning")
    for line in MPIRUN_FAILURE.splitlines():
        assert output(line) == (None, line)
    mpirun = RankFailure("algo-1", "mpirun", None, 7, 1.0, ["mpirun noise"])
    cause = output.root_cause(mpirun)
    assert (cause.host, cause.rank, cause.label, cause.exit_code) == ("algo-2", 3, "rank 3", 7)
    assert cause.stderr_tail[-1] == "ValueError: boom"
    assert cause.describe().startswith("AlgorithmError: rank 3 on host algo-2 exited with code 7")


def test_mpi_abort_names_the_rank_and_its_error_code() -> None:
    output = MpiOutput(HOSTS, 2)
    for line in ("MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD", "with errorcode 5."):
        output(line)
    cause = output.root_cause(RankFailure("algo-1", "mpirun", None, 5, 1.0, []))
    assert (cause.rank, cause.exit_code, cause.host) == (2, 5, "algo-2")


def test_signalled_rank_is_reported_with_its_signal() -> None:
    output = MpiOutput(HOSTS, 2)
    output("mpirun noticed that process rank 1 with PID 0 on node box exited on signal 9 (Killed).")
    cause = output.root_cause(RankFailure("algo-1", "mpirun", None, 137, 1.0, []))
    assert (cause.rank, cause.exit_code, cause.host) == (1, 137, "algo-1")
    unknown = RankFailure("algo-1", "mpirun", None, 1, 1.0, [])
    assert MpiOutput(HOSTS, 2).root_cause(unknown) is unknown


def test_lost_mpirun_report_falls_back_to_the_first_rank_with_a_traceback() -> None:
    output = MpiOutput(HOSTS, 2)
    output("[1,1]<stderr>:a warning")
    output("[1,2]<stderr>:Traceback (most recent call last):")
    output("[1,2]<stderr>:ValueError: boom")
    output("[1,0]<stderr>:Traceback (most recent call last):")
    output("[vm:25779] [[2125,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer")
    cause = output.root_cause(RankFailure("algo-1", "mpirun", None, 1, 1.0, []))
    assert (cause.rank, cause.host, cause.exit_code) == (2, "algo-2", 1)
    assert cause.stderr_tail[-1] == "ValueError: boom"


# --- roles, with fakes ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_master_waits_for_every_worker_then_gives_up_naming_the_missing() -> None:
    clock = Clock()
    up_at = {"algo-2": 3.0, "algo-3": 5.0}
    master = MasterRole(
        ["algo-2", "algo-3"],
        "job",
        timeout=10,
        probe=lambda h, _p: clock.now >= up_at[h],
        clock=clock,
        sleep=clock.sleep,
    )
    master.wait_for_workers()
    assert clock.now == 5.0
    clock.now = 0.0
    never = MasterRole(
        ["algo-2", "algo-3"],
        "job",
        timeout=10,
        probe=lambda h, _p: h == "algo-2",
        clock=clock,
        sleep=clock.sleep,
    )
    with pytest.raises(TimeoutError, match=r"\['algo-3'\].*10 s"):
        never.wait_for_workers()
    assert 10.0 <= clock.now <= 11.0


def test_master_tells_every_worker_with_bounded_retries() -> None:
    clock = Clock()
    calls: list[tuple[str, str]] = []

    def touch(host: str, path: str) -> bool:
        calls.append((host, path))
        return host == "algo-2" or len(calls) > 3

    master = MasterRole(
        ["algo-2", "algo-3", "algo-4"], "my job", touch=touch, clock=clock, sleep=clock.sleep, retries=3
    )
    failed = master.finish()
    assert (
        calls[0] == ("algo-2", done_marker("my job"))
        and done_marker("my job") == "/tmp/smlaunch-mpi-done-my_job"
    )
    assert failed == []  # algo-3 succeeded on its 3rd try, algo-4 on its 1st
    master = MasterRole(["algo-5"], "j", touch=lambda *_: False, clock=clock, sleep=clock.sleep, retries=3)
    assert master.finish() == ["algo-5"]


def worker(clock: Clock, **kwargs: object) -> WorkerRole:
    sshd_started: list[bool] = []
    role = WorkerRole(
        "algo-1",
        "job",
        timeout=60,
        start_sshd=lambda: sshd_started.append(True),  # type: ignore[arg-type, return-value]
        clock=clock,
        sleep=clock.sleep,
        **kwargs,
    )  # type: ignore[arg-type]
    role.sshd_started = sshd_started  # type: ignore[attr-defined]
    return role


def test_worker_ends_on_the_marker() -> None:
    clock = Clock()
    role = worker(clock, orted=lambda: 2 < clock.now < 8, marker_exists=lambda _p: clock.now >= 9)
    assert role.run() == "done"
    assert role.sshd_started == [True]  # type: ignore[attr-defined]
    assert clock.now == 9


def test_worker_ends_when_orted_is_gone_without_a_marker() -> None:
    clock = Clock()
    role = worker(clock, orted=lambda: 2 < clock.now < 8, marker_exists=lambda _p: False, orted_grace=5)
    assert role.run() == "orted-exited"
    assert 13 <= clock.now <= 14


def test_worker_waits_for_the_master_with_a_bound() -> None:
    clock = Clock()
    role = worker(clock, orted=lambda: False, marker_exists=lambda _p: False)
    with pytest.raises(TimeoutError, match="started no rank here in 60 s"):
        role.run()


def test_worker_gives_up_on_an_unreachable_master_when_asked_to_watch_it() -> None:
    clock = Clock()
    role = worker(
        clock,
        orted=lambda: True,
        marker_exists=lambda _p: False,
        master_port=22,
        probe=lambda _h, _p: clock.now < 5,
        unreachable_after=30,
    )
    with pytest.raises(RuntimeError, match="unreachable for 30 s"):
        role.run()
    assert 35 <= clock.now <= 36


def test_local_rendezvous_waits_are_bounded(tmp_path: Path) -> None:
    import json as _json
    import subprocess
    import sys

    from smlaunch.runtime.launchers.mpi.local import LocalRendezvous

    meeting = LocalRendezvous(tmp_path / "meet", timeout=0.3, poll=0.05)
    with pytest.raises(TimeoutError, match=r"hosts \['algo-2'\] did not start within 0.3 s"):
        meeting.gather(["algo-2"])
    meeting.publish("algo-2", {"SM_CURRENT_HOST": "algo-2"}, "/code")
    with pytest.raises(TimeoutError, match="master host did not start"):
        meeting.wait_for_master("algo-2")
    assert not meeting.env_file("algo-2").exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    meeting.publish("algo-2", {}, "/code")
    meeting.master_file.write_text(_json.dumps({"pid": dead.pid}))
    with pytest.raises(RuntimeError, match="ended without finishing"):
        meeting.wait_for_master("algo-2")
    assert not meeting.directory.exists()  # the last host out cleans up for a dead master
    meeting.publish("algo-2", {"A": "1"}, "/code")
    assert meeting.gather(["algo-2"])["algo-2"]["env"] == {"A": "1"}
    meeting.env_file("algo-2").write_text(_json.dumps({"env": {}, "cwd": "/code", "pid": dead.pid}))
    meeting.finish(0, ["algo-2"])  # a dead host is not waited for
    assert not meeting.directory.exists()


def test_real_probes(tmp_path: Path) -> None:
    import shutil
    import socket
    import subprocess
    import time

    import psutil

    from smlaunch.runtime.launchers.mpi.roles import orted_running, tcp_probe

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert tcp_probe("127.0.0.1", port) is True
    assert tcp_probe("127.0.0.1", port) is False

    # orted_running looks at the whole machine (a container is one host): another job's daemon may
    # run here already, so the test starts one of its own (a sleep named orted) and sees it come and go.
    before = orted_running()
    orted = tmp_path / "orted"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", orted)
    daemon = subprocess.Popen([str(orted), "60"])
    try:
        deadline = time.monotonic() + 30
        while not orted_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orted_running() is True
        daemon.kill()
        deadline = time.monotonic() + 30
        while psutil.Process(daemon.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        if not before:  # exited but not reaped yet: a zombie is not a running daemon
            assert orted_running() is False
    finally:
        daemon.kill()
        daemon.wait()
