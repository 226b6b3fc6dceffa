"""Hosts started before the agent loads its machinery (``smlaunch.sdk.backends.emulated.early_start``).

A process job that stages nothing is planned at submit and its agent starts the hosts first; these
tests check that what users see is what the agent alone gave them: every rank's first lines in order
with their ``[algo-N/rank R]`` prefixes after the topology line, the status transitions, the exact
root cause of a failing script (exit code and traceback), a stop that arrives while the agent is
still starting, and no process left behind. A job with a channel is never planned early. The
agent's head start to its hosts ends when each printed, at a stop, and in any case. While the agent
loads, the hosts' output is read for it (a rank that prints much at its start does not wait for the
agent), every byte in order, at most ``DRAINED_BYTES`` held.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated.executors.process import spawn
from smlaunch.sdk.backends.emulated.executors.process.early import EarlyHosts, drain_outputs, give_head_start
from smlaunch.sdk.backends.emulated.executors.process.executor import ProcessExecutor
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, ProcessSettings
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    wait_for_line,
    wait_terminal,
)

PROCESS = ProcessSettings(python=sys.executable)

FIRST_LINES = """
import os, time
rank = int(os.environ["RANK"])
print(f"first line of rank {rank} at {time.time():.6f}", flush=True)
for step in range(3):
    print(f"rank {rank} step {step}", flush=True)
"""

FAILS_WITH_7 = """
import sys, traceback

def train_step(batch):
    raise RuntimeError(f"loss is NaN at batch {batch}")

print("training", flush=True)
try:
    train_step(3)
except RuntimeError:
    traceback.print_exc()
    sys.exit(7)
"""

SLEEPER = """
import time
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _backend(tmp_path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    return LocalSession(tmp_path / "jobs", **kwargs).backend()  # type: ignore[arg-type]


def test_two_hosts_two_ranks_print_their_first_lines_in_order_with_their_prefixes(tmp_path: Path) -> None:
    backend = _backend(tmp_path, processes_per_host=2)
    backend.submit(job_request(make_spec(tmp_path, "first-lines", FIRST_LINES, instance_count=2, ddp=True)))
    description = wait_terminal(backend, "first-lines")
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    job = backend.job_dir("first-lines")
    assert not job.early_start_file.exists()  # used once, by the agent
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    lines = list(backend.log_lines("first-lines"))
    topology = next(
        i for i, line in enumerate(lines) if line.startswith("[smlaunch] Job first-lines: 2 host(s)")
    )
    for host, ranks in (("algo-1", (0, 1)), ("algo-2", (2, 3))):
        host_log = job.host_log(host).read_text().splitlines()
        for rank in ranks:
            prefix = f"[{host}/rank {rank}] "
            own = [line[len(prefix) :] for line in host_log if line.startswith(prefix)]
            assert own[0].startswith(f"first line of rank {rank} at ")
            assert own[1:] == [f"rank {rank} step {step}" for step in range(3)]
            first = next(i for i, line in enumerate(lines) if line.startswith(prefix + "first line"))
            assert first > topology  # the agent names the topology before any rank's line
            printed_at = float(own[0].rsplit(" ", 1)[1])
            assert description["TrainingStartTime"].timestamp() <= printed_at
    assert_no_job_processes("first-lines", job.path)


def test_a_failing_script_reports_its_exit_code_and_traceback(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    backend.submit(job_request(make_spec(tmp_path, "fails-7", FAILS_WITH_7, instance_count=1)))
    description = wait_terminal(backend, "fails-7")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert description["ExitCode"] == 7
    reason = description["FailureReason"]
    assert "algo-1" in reason and "rank 0" in reason and "code 7" in reason
    assert "Traceback (most recent call last):" in reason
    assert "in train_step" in reason and "RuntimeError: loss is NaN at batch 3" in reason
    failure = json.loads(
        (
            contract.Paths(backend.job_dir("fails-7").host_base("algo-1")).output_dir / "failure.json"
        ).read_text()
    )
    assert failure["exit_code"] == 7 and failure["host"] == "algo-1"
    assert "[algo-1/rank 0] training" in list(backend.log_lines("fails-7"))
    assert_no_job_processes("fails-7", backend.job_dir("fails-7").path)


def test_a_stop_while_the_agent_starts_stops_the_hosts_it_started_early(tmp_path: Path) -> None:
    backend = _backend(tmp_path, stop_grace_seconds=1)
    backend.submit(job_request(make_spec(tmp_path, "early-stop", SLEEPER, instance_count=2)))
    backend.stop("early-stop")  # the agent is still loading; its hosts may already run
    description = wait_terminal(backend, "early-stop")
    assert description["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert_no_job_processes("early-stop", backend.job_dir("early-stop").path)


def test_a_job_that_stages_a_channel_is_not_planned_early(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("1,2\n")
    spec = make_spec(tmp_path, "staged", FIRST_LINES, instance_count=1, inputs={"train": data.as_uri()})
    job = JobDir(tmp_path / "staged")
    job.path.mkdir()
    settings = JobSettings(executor=PROCESS, processes_per_host=1, stop_grace_seconds=1)
    assert ProcessExecutor().plan_early_start(spec, settings, job) is False
    assert not job.early_start_file.exists() and not job.hosts_dir.exists()


def test_the_plan_holds_each_hosts_variables_and_its_tree(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "planned", FIRST_LINES, instance_count=2)
    job = JobDir(tmp_path / "planned")
    job.path.mkdir()
    settings = JobSettings(executor=PROCESS, processes_per_host=2, stop_grace_seconds=5, num_gpus=0)
    assert ProcessExecutor().plan_early_start(spec, settings, job) is True
    plan = json.loads(job.early_start_file.read_text())
    assert Path(plan["scratch"]).parent == job.path and Path(plan["scratch"]).is_dir()
    assert [h["name"] for h in plan["hosts"]] == ["algo-1", "algo-2"]
    for host in plan["hosts"]:
        paths = contract.Paths(host["tree"])
        resource = json.loads(paths.resource_config_file.read_text())
        assert resource["current_host"] == host["name"] and resource["hosts"] == ["algo-1", "algo-2"]
        env = host["env"]
        assert env[contract.BASE_DIR_ENV] == host["tree"]
        assert env[contract.SMLAUNCH_MASTER_PORT] == str(plan["port"])
        assert env[contract.SMLAUNCH_PROCESSES_PER_HOST] == "2"
        assert env[contract.SMLAUNCH_STOP_GRACE_SECONDS] == "5"
        assert env[contract.TRAINING_JOB_NAME_ENV] == "planned"


def test_the_agent_started_early_is_the_hosts_parent(tmp_path: Path) -> None:
    backend = _backend(tmp_path, stop_grace_seconds=1)
    backend.submit(job_request(make_spec(tmp_path, "parent", SLEEPER, instance_count=2)))
    wait_for_line(backend, "parent", "[algo-2/rank 0] ready")
    job = backend.job_dir("parent")
    agent = psutil.Process(json.loads(job.agent_file.read_text())["pid"])
    assert "smlaunch.sdk.backends.emulated.early_start" in agent.cmdline()
    hosts = agent.children()
    assert len(hosts) == 2 and all(h.cmdline()[-2:] == ["-m", "smlaunch.runtime"] for h in hosts)
    # Forked from the agent (executors.forked), each still names its job where others look for it.
    assert all(h.environ()[contract.TRAINING_JOB_NAME_ENV] == "parent" for h in hosts)
    backend.stop("parent")
    assert wait_terminal(backend, "parent")["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert_no_job_processes("parent", job.path)


def test_hosts_meant_for_another_interpreter_are_started_as_new_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "other-python"  # another path: early_start must not fork itself for it
    python.symlink_to(sys.executable)
    backend = _backend(tmp_path, stop_grace_seconds=1)
    settings, other = backend.settings, ProcessSettings(python=str(python))
    monkeypatch.setattr(
        backend, "settings", lambda spec: settings(spec).model_copy(update={"executor": other})
    )
    backend.submit(job_request(make_spec(tmp_path, "other", SLEEPER, instance_count=1)))
    wait_for_line(backend, "other", "[algo-1/rank 0] ready")
    job = backend.job_dir("other")
    agent = psutil.Process(json.loads(job.agent_file.read_text())["pid"])
    (host,) = agent.children()
    assert host.cmdline() == [str(python), "-m", "smlaunch.runtime"]
    assert host.environ()[contract.BASE_DIR_ENV] == str(job.host_base("algo-1"))  # its own: exec-ed
    backend.stop("other")
    assert wait_terminal(backend, "other")["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert_no_job_processes("other", job.path)


def _early_hosts(tmp_path: Path, scripts: list[str]) -> EarlyHosts:
    hosts = EarlyHosts(0, tmp_path, 0.0)
    for i, script in enumerate(scripts):
        hosts.procs[f"algo-{i + 1}"] = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    drain_outputs(hosts)
    return hosts


def _returns(call: Callable[[], None]) -> bool:
    """Whether ``call`` returns within a generous bound (it must not wait for its limit)."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=60)
    return not thread.is_alive()


def test_the_head_start_ends_once_every_host_printed_and_leaves_the_lines_to_the_pumps(
    tmp_path: Path,
) -> None:
    printer = "import time; print('[algo-1] code extracted', flush=True); time.sleep(600)"
    hosts = _early_hosts(tmp_path, [printer, printer.replace("algo-1", "algo-2")])
    job = JobDir(tmp_path)
    try:
        assert _returns(lambda: give_head_start(job, hosts, limit=600))
        for name, output in hosts.outputs.items():
            assert hosts.procs[name].stdout is output
            received = output.read()
            while not received.endswith(b"\n"):  # as it came: a line may come in pieces
                received += output.read()
            assert received == f"[{name}] code extracted\n".encode()
    finally:
        for proc in hosts.procs.values():
            proc.kill()
            proc.wait()


def test_the_head_start_ends_at_a_stop_or_a_signal_even_if_no_host_printed(tmp_path: Path) -> None:
    hosts = _early_hosts(tmp_path, ["import time; time.sleep(600)"])
    job = JobDir(tmp_path)
    try:
        hosts.signals.append(signal.SIGTERM)
        assert _returns(lambda: give_head_start(job, hosts, limit=600))
        hosts.signals.clear()
        job.stop_file.touch()
        assert _returns(lambda: give_head_start(job, hosts, limit=600))
        job.stop_file.unlink()
        assert _returns(lambda: give_head_start(job, hosts, limit=0.2))  # bounded when all are silent
    finally:
        for proc in hosts.procs.values():
            proc.kill()
            proc.wait()


FLOOD = "import sys; sys.stdout.buffer.write(bytes(range(256)) * (int(sys.argv[1]) // 256)); print('end')"


def test_a_hosts_output_is_read_while_nothing_takes_it_yet_every_byte_in_order(tmp_path: Path) -> None:
    hosts = EarlyHosts(0, tmp_path, 0.0)
    hosts.procs["algo-1"] = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(8 << 20)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    drain_outputs(hosts)
    try:
        # Far more than a pipe holds: the host ends although nothing called read() yet.
        assert hosts.procs["algo-1"].wait(timeout=60) == 0
        output = hosts.outputs["algo-1"]
        received = b"".join(iter(output.read, b""))
        assert received == bytes(range(256)) * ((8 << 20) // 256) + b"end\n"
        assert output.read() == b"" and output.read() == b""  # the end, as often as it is asked
    finally:
        hosts.procs["algo-1"].kill()


def test_a_hosts_output_waits_in_its_pipe_beyond_the_drained_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawn, "DRAINED_BYTES", 1 << 20)
    hosts = EarlyHosts(0, tmp_path, 0.0)
    hosts.procs["algo-1"] = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(16 << 20)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    drain_outputs(hosts)
    proc = hosts.procs["algo-1"]
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # held back: 1 MiB drained, a pipe full
            proc.wait(timeout=2)
        received = b"".join(iter(hosts.outputs["algo-1"].read, b""))
        assert received == bytes(range(256)) * ((16 << 20) // 256) + b"end\n"
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
