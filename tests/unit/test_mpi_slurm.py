"""MPI on Slurm without a cluster: ``mpirun``'s command line, its remote agent
(``smlaunch.contract.mpi_slurm``) and the Slurm executor's answer to it (``srun`` recorded, never run).
``tests/slurm/test_slurm_mpi.py`` runs the same on the real two-node test cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.contract import mpi_slurm
from smlaunch.runtime.launchers.mpi.launcher import MpiLauncher
from smlaunch.sdk.backends.emulated.executors.base import Host, LaunchContext
from smlaunch.sdk.backends.emulated.executors.slurm import executor as slurm_executor
from smlaunch.sdk.backends.emulated.executors.slurm.executor import (
    MPI_STEP_LOG_LINES,
    SlurmExecutor,
    mpi_step_prefix,
)
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.backends.slurm.client import SlurmClient
from tests.unit.test_mpi_launcher import mpi_env
from tests.unit.test_slurm import client, job_settings, spec

ORTED = ["orted", "-mca", "ess", "env", "--daemonize", "-mca", "orte_hnp_uri", '"1.0;tcp://127.0.0.1:5"']


def test_mpirun_on_slurm_starts_orted_through_the_agent_not_ssh(tmp_path: Path) -> None:
    env = mpi_env(tmp_path, "algo-1", extra={contract.SMLAUNCH_MPI_SLURM: "1"})
    launcher = MpiLauncher(env)
    assert launcher.on_slurm and not launcher.local_emulation  # loopback addresses or not
    [process] = launcher.plan().processes
    argv = process.argv
    assert argv[:5] == ["mpirun", "--host", "algo-1:2,algo-2:2", "-np", "4"]
    mca = {argv[i + 1]: argv[i + 2] for i, word in enumerate(argv) if word == "-mca"}
    assert mca["plm"] == "rsh" and mca["ras"] == "^slurm" and mca["plm_rsh_no_tree_spawn"] == "1"
    assert mca["plm_rsh_agent"].endswith(" -m smlaunch.contract.mpi_slurm")
    assert "btl_tcp_if_include" not in mca and "--oversubscribe" not in argv
    assert process.env[contract.SMLAUNCH_MPI_RANK_MAP] == str(tmp_path / "meet" / "ranks.json")
    # Slurm signals mpirun in the master's step: the runtime must not send it a second SIGTERM.
    assert process.signalled_with_host
    assert not MpiLauncher(mpi_env(tmp_path / "local", "algo-1")).plan().processes[0].signalled_with_host


def test_shell_command_drops_daemonize_and_keeps_openmpi_quoting() -> None:
    assert mpi_slurm.shell_command(ORTED) == 'orted -mca ess env -mca orte_hnp_uri "1.0;tcp://127.0.0.1:5"'


def _answer(directory: Path, host: str, error: str | None) -> threading.Thread:
    """Plays the job's agent: answers ``host``'s request once it appears."""

    def serve() -> None:
        request = mpi_slurm.request_file(directory, host)
        while not request.exists():
            threading.Event().wait(0.01)
        mpi_slurm.write_private_json(mpi_slurm.answer_file(directory, host), {"error": error})

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_request_is_private_and_returns_once_the_step_started(tmp_path: Path) -> None:
    _answer(tmp_path, "algo-2", None)
    assert mpi_slurm.request(tmp_path, "algo-2", ORTED, timeout=30) is None
    request = mpi_slurm.request_file(tmp_path, "algo-2")
    assert request.stat().st_mode & 0o777 == 0o600
    assert json.loads(request.read_text())["command"].startswith("orted -mca ess env")


def test_request_reports_the_agents_refusal_and_a_silent_agent(tmp_path: Path) -> None:
    _answer(tmp_path, "algo-2", "cannot start srun: no such file")
    assert mpi_slurm.request(tmp_path, "algo-2", ORTED, timeout=30) == "cannot start srun: no such file"
    why = mpi_slurm.request(tmp_path, "algo-3", ORTED, timeout=0.3)
    assert why is not None and "did not start algo-3's MPI step within 0.3 s" in why
    assert contract.SMLAUNCH_MPI_WAIT_SECONDS in why


def test_the_agent_runs_as_mpirun_runs_it(tmp_path: Path) -> None:
    """``python -m``, as ``plm_rsh_agent``: everything ``main`` calls is defined before it runs."""
    _answer(tmp_path, "algo-2", None)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        **{
            contract.SMLAUNCH_MPI_DIR: str(tmp_path),
            contract.SMLAUNCH_MPI_SLURM: "1",
            contract.SMLAUNCH_MPI_WAIT_SECONDS: "30",
        },
    )
    agent = [sys.executable, "-m", "smlaunch.contract.mpi_slurm", "algo-2", *ORTED]
    done = subprocess.run(agent, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(mpi_slurm.request_file(tmp_path, "algo-2").read_text())["host"] == "algo-2"


def test_request_refuses_a_host_name_that_leaves_the_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host name"):
        mpi_slurm.request(tmp_path, "../algo-2", ORTED, timeout=0.1)


def test_agent_main_without_its_environment_says_how_it_is_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(contract.SMLAUNCH_MPI_SLURM, raising=False)
    monkeypatch.setenv(contract.SMLAUNCH_MPI_DIR, "/nonexistent")
    assert mpi_slurm.main(["algo-2", "orted"]) == 2
    assert "plm_rsh_agent on Slurm" in capsys.readouterr().err


class _Recorder:
    """Stands in for ``subprocess.Popen``: remembers each command, starts nothing of it."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.popen = subprocess.Popen

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self.started.append({"argv": argv, **kwargs})
        return self.popen(["true"])


def _hosts(tmp_path: Path) -> list[Host]:
    return [Host(name=f"algo-{i + 1}", index=i, base=tmp_path / f"algo-{i + 1}") for i in range(2)]


def test_executor_starts_each_asked_orted_once_as_a_step_on_its_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meet = tmp_path / "mpi-x"
    meet.mkdir(mode=0o700)
    hosts = _hosts(tmp_path)
    executor = SlurmExecutor(client=SlurmClient(), job_id="12", nodelist="node[1-2]", python="/venv/python")
    executor._mpi_dir = meet
    executor._placement = {"algo-1": ("node1", "10.0.0.1"), "algo-2": ("node2", "10.0.0.2")}
    executor._host_env = {h.name: {"SM_CURRENT_HOST": h.name} for h in hosts}
    recorder = _Recorder()
    monkeypatch.setattr(slurm_executor.subprocess, "Popen", recorder)
    said: list[str] = []
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), hosts, 10.0, said.append)
    mpi_slurm.write_private_json(
        mpi_slurm.request_file(meet, "algo-2"), {"host": "algo-2", "command": "orted -mca ess env"}
    )
    mpi_slurm.write_private_json(
        mpi_slurm.request_file(meet, "algo-9"), {"host": "algo-9", "command": "orted"}
    )
    executor.watch(context)
    executor._mpi_seen_at = 0.0  # the next poll looks again: a request already served is not restarted
    executor.watch(context)
    [started] = recorder.started
    prefix = mpi_step_prefix("node2", "algo-2", "/venv/python", str(hosts[1].base))
    assert started["argv"] == [*prefix, "/bin/sh", "-c", "orted -mca ess env"]
    assert "--overlap" in prefix and "--nodelist=node2" in prefix and "--job-name=algo-2-mpi" in prefix
    assert started["env"] == {"SM_CURRENT_HOST": "algo-2"}  # the host's own, never the request's
    assert json.loads(mpi_slurm.answer_file(meet, "algo-2").read_text()) == {"error": None}
    refused = json.loads(mpi_slurm.answer_file(meet, "algo-9").read_text())["error"]
    assert "no host 'algo-9' in this job" in refused
    assert said == ["MPI: started algo-2's orted as a step on node2"]
    executor.attempt_ended(context)


def test_a_fifo_in_place_of_an_orted_request_never_blocks_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The meeting directory is the job's hosts' too: what is there is read as they left it.
    meet = tmp_path / "mpi-x"
    meet.mkdir(mode=0o700)
    os.mkfifo(mpi_slurm.request_file(meet, "algo-2"))
    executor = SlurmExecutor(client=SlurmClient(), job_id="12", nodelist="node[1-2]", python="/venv/python")
    executor._mpi_dir = meet
    recorder = _Recorder()
    monkeypatch.setattr(slurm_executor.subprocess, "Popen", recorder)
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), _hosts(tmp_path), 10.0, lambda _: None)
    watching = threading.Thread(target=executor.watch, args=(context,), daemon=True)
    watching.start()
    watching.join(timeout=10)
    assert not watching.is_alive() and recorder.started == []


def test_what_an_orted_step_printed_reaches_the_job_log_when_the_attempt_ends(tmp_path: Path) -> None:
    # srun's and orted's own messages go to the meeting directory, which goes with the job: a daemon
    # that could not start or never reached mpirun must still be explained in the job's log.
    meet = tmp_path / "mpi-x"
    meet.mkdir(mode=0o700)
    executor = SlurmExecutor(client=SlurmClient(), job_id="12", nodelist="node[1-2]", python="/venv/python")
    executor._mpi_dir = meet
    executor._mpi_steps = {"algo-1": subprocess.Popen(["true"]), "algo-2": subprocess.Popen(["true"])}
    (meet / "orted-algo-2.log").write_text("".join(f"srun: retrying {i}\n" for i in range(60)))
    said: list[str] = []
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), _hosts(tmp_path), 10.0, said.append)
    executor.attempt_ended(context)
    assert said == [f"[algo-2/orted] srun: retrying {i}" for i in range(60 - MPI_STEP_LOG_LINES, 60)]


STEPS = "12.0|algo-1\n12.1|algo-2\n12.2|algo-2-mpi\n12.3|algo-1-mpi\n"


def test_a_stop_signals_host_steps_only_and_a_kill_reaches_the_mpi_steps(tmp_path: Path) -> None:
    slurm, runner = client(
        {
            "squeue --noheader --steps": (
                0,
                "12.0|algo-1\n12.1|algo-2\n12.2|algo-2-mpi\n12.3|algo-1-mpi\n",
                "",
            ),
            "scancel": (0, "", ""),
        }
    )
    executor = SlurmExecutor(client=slurm, job_id="12", nodelist="node[1-2]")
    hosts = _hosts(tmp_path)
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), hosts, 10.0, lambda _line: None)
    executor.signal(context, hosts, signal.SIGTERM)
    cancels = [argv for argv, _stdin, _env in runner.calls if argv[0] == "scancel"]
    assert cancels == [["scancel", "--signal=TERM", "12.0"], ["scancel", "--signal=TERM", "12.1"]]
    runner.calls.clear()
    executor.kill_everything(context)
    killed = {argv[-1] for argv, _stdin, _env in runner.calls if argv[:2] == ["scancel", "--signal=KILL"]}
    assert {"12.2", "12.3"} <= killed
