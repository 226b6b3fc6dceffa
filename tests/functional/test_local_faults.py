"""Faults on the local backend: status, root cause and the process tree after each one.

Policy under test (``smlaunch.sdk.backends.emulated.agent``): a failing host ends every host; the first
failure is the reported cause with its exit code; ``max_run`` stops the job with SIGTERM, grace and
SIGKILL; an agent killed with SIGKILL takes every process of its job with it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from smlaunch import contract
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    wait_for_line,
    wait_terminal,
)

# Every rank blocks (as a rank waiting on a dead peer's collective would) except global rank 3.
EXIT_3_ON_ONE_RANK = """
import os, sys, time
print("started", flush=True)
if os.environ["RANK"] == "3":
    time.sleep(0.5)
    print("rank 3 gives up", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(600)
"""

RAISE_ON_EVERY_RANK = """
import os
raise ValueError(f"boom from rank {os.environ['RANK']}")
"""

# One host ignores SIGTERM, so only SIGKILL after the grace period can end it.
SLEEPER = """
import os, signal, time
if os.environ["SM_CURRENT_HOST"] == "algo-2":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _session(tmp_path: Path, **kwargs: object) -> LocalSession:
    return LocalSession(tmp_path / "jobs", **kwargs)  # type: ignore[arg-type]


def test_exit_3_on_one_rank_fails_the_job_with_that_rank_as_root_cause(tmp_path: Path) -> None:
    backend = _session(tmp_path, processes_per_host=2).backend()
    spec = make_spec(tmp_path, "exit-three", EXIT_3_ON_ONE_RANK, ddp=True)
    backend.submit(job_request(spec))
    with pytest.raises(JobFailedError) as failed:
        TrainingJob(backend, "exit-three").wait(logs=False)
    assert failed.value.status == contract.STATUS_FAILED
    assert failed.value.exit_code == 3
    description = backend.describe("exit-three")
    assert description["ExitCode"] == 3
    reason = description["FailureReason"]
    assert "rank 3" in reason and "algo-2" in reason and "code 3" in reason
    assert "rank 3 gives up" in reason  # the tail of that rank's stderr
    assert len(reason) <= contract.FAILURE_REASON_MAX_CHARS
    assert_no_job_processes("exit-three", backend.job_dir("exit-three").path)


def test_raise_on_every_rank_reports_the_traceback(tmp_path: Path) -> None:
    backend = _session(tmp_path, processes_per_host=2).backend()
    spec = make_spec(tmp_path, "raise-all", RAISE_ON_EVERY_RANK, ddp=True)
    backend.submit(job_request(spec))
    description = wait_terminal(backend, "raise-all")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert description["SecondaryStatus"] == contract.SECONDARY_FAILED
    assert description["ExitCode"] == 1
    reason = description["FailureReason"]
    assert "ValueError: boom from rank" in reason and "Traceback" in reason
    # The earliest failure across hosts is the one reported. (A host may be stopped by the agent
    # before its own ranks get to raise; then only the other host has a failure record.)
    job = backend.job_dir("raise-all")
    records = [contract.Paths(job.host_base(h)).output_dir / "failure.json" for h in ("algo-1", "algo-2")]
    details = [json.loads(r.read_text()) for r in records if r.exists()]
    failed = [d for d in details if d.get("kind") != "stopped"]
    assert failed
    first = min(failed, key=lambda d: d["time"])
    assert f"rank {first['rank']}" in reason and first["host"] in reason
    assert_no_job_processes("raise-all", job.path)


def test_max_run_stops_the_job_and_escalates_to_sigkill(tmp_path: Path) -> None:
    backend = _session(tmp_path, stop_grace_seconds=1).backend()
    spec = make_spec(tmp_path, "too-long", SLEEPER, max_run=3)
    backend.submit(job_request(spec))
    description = wait_terminal(backend, "too-long")
    assert description["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert description["SecondaryStatus"] == contract.SECONDARY_MAX_RUNTIME_EXCEEDED
    assert "MaxRuntimeInSeconds" in description["FailureReason"]
    lines = list(backend.log_lines("too-long"))
    assert any("SIGKILL" in line for line in lines)
    assert description["ModelArtifacts"]["S3ModelArtifacts"].endswith("/too-long/output/model.tar.gz")
    assert_no_job_processes("too-long", backend.job_dir("too-long").path)


def test_sigkill_of_the_agent_leaves_no_process_behind(tmp_path: Path) -> None:
    backend = _session(tmp_path).backend()
    spec = make_spec(tmp_path, "orphaned", SLEEPER)
    backend.submit(job_request(spec))
    wait_for_line(backend, "orphaned", "[algo-1/rank 0] ready")
    wait_for_line(backend, "orphaned", "[algo-2/rank 0] ready")
    job = backend.job_dir("orphaned")
    agent = psutil.Process(json.loads(job.agent_file.read_text())["pid"])
    hosts = agent.children()
    assert len(hosts) == 2  # the agent is the host runtimes' parent
    agent.send_signal(signal.SIGKILL)
    assert_no_job_processes("orphaned", job.path)
    description = backend.describe("orphaned")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert "agent" in description["FailureReason"]
    assert list(backend.log_lines("orphaned", follow=True))  # following a dead job's log ends


# A rendezvous without torch: rank 0 serves the job's master port, every other rank must reach the
# server of ITS job there (a collision would connect it to the other job's rank 0, or fail to bind).
RENDEZVOUS = """
import os, socket, time
port, rank, job = int(os.environ["MASTER_PORT"]), int(os.environ["RANK"]), os.environ["TRAINING_JOB_NAME"]
if rank == 0:
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(60)
    for _ in range(int(os.environ["WORLD_SIZE"]) - 1):
        conn, _ = server.accept()
        conn.sendall(job.encode())
        conn.close()
else:
    deadline = time.time() + 60
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    served = conn.recv(200).decode()
    assert served == job, f"rank {rank} of {job} reached the master of {served}"
print(f"rendezvous ok on port {port}", flush=True)
"""


def test_concurrent_jobs_get_their_own_ports_and_directories(tmp_path: Path) -> None:
    backend = _session(tmp_path, processes_per_host=2).backend()
    names = ["concurrent-a", "concurrent-b"]
    for name in names:
        backend.submit(job_request(make_spec(tmp_path, name, RENDEZVOUS, ddp=True)))
    ports = set()
    for name in names:
        description = wait_terminal(backend, name)
        assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
        lines = [line for line in backend.log_lines(name) if "rendezvous ok" in line]
        assert len(lines) == 4
        ports |= {line.rsplit(" ", 1)[1] for line in lines}
        assert_no_job_processes(name, backend.job_dir(name).path)
    assert len(ports) == 2


# Each host saves a different model under the same name.
SAME_NAME_DIFFERENT_BYTES = """
import os
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write(os.environ["SM_CURRENT_HOST"])
"""


def test_artifact_clash_warns_by_default_and_fails_when_asked(tmp_path: Path) -> None:
    warn = _session(tmp_path).backend()
    warn.submit(job_request(make_spec(tmp_path, "clash-warn", SAME_NAME_DIFFERENT_BYTES)))
    description = wait_terminal(warn, "clash-warn")
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED
    log = "\n".join(warn.log_lines("clash-warn"))
    assert "'model.txt' differs between algo-1 and algo-2" in log

    strict = _session(tmp_path, artifact_conflicts="error").backend()
    strict.submit(job_request(make_spec(tmp_path, "clash-error", SAME_NAME_DIFFERENT_BYTES)))
    description = wait_terminal(strict, "clash-error")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert "'model.txt' differs between algo-1 and algo-2" in description["FailureReason"]
    assert "ModelArtifacts" not in description
    assert_no_job_processes("clash-error", strict.job_dir("clash-error").path)
