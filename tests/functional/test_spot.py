"""Managed spot in local runs: a script that checkpoints every epoch is interrupted mid-run, restarted
on fresh hosts with its checkpoints restored from S3 (a moto server on 127.0.0.1), resumes at the
right epoch and ends with exactly the result of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.request.spec import CheckpointConfig, StoppingCondition
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    moto_s3_server,
    wait_for_line,
    wait_terminal,
)

EPOCHS = 10

# The training step: deterministic, so an interrupted-and-resumed run must equal an uninterrupted one.
STEP = """
import hashlib
def step(state, epoch):
    return hashlib.sha256(f"{state}:{epoch}".encode()).hexdigest()
"""

CHECKPOINTING_SCRIPT = (
    STEP
    + """
import argparse, json, os, pathlib, re, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
base = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
config = json.loads((base / "input/config/checkpointconfig.json").read_text())
ckpt_dir = pathlib.Path(config["LocalPath"])
found = sorted((int(re.search(r"(\\d+)", p.name).group(1)), p) for p in ckpt_dir.glob("ckpt-*.json"))
state, start = "init", 0
if found:
    last_epoch, path = found[-1]
    state, start = json.loads(path.read_text())["state"], last_epoch + 1
print(f"resuming at epoch {start} with {len(found)} checkpoint(s) restored", flush=True)
for epoch in range(start, args.epochs):
    state = step(state, epoch)
    tmp = ckpt_dir / f".ckpt-{epoch:03d}.tmp"
    tmp.write_text(json.dumps({"state": state}))
    tmp.rename(ckpt_dir / f"ckpt-{epoch:03d}.json")
    for old in ckpt_dir.glob("ckpt-*.json"):      # keep only the two newest locally
        if int(old.name[5:8]) < epoch - 1:
            old.unlink()
    print(f"saved epoch {epoch}", flush=True)
    time.sleep(0.6)
pathlib.Path(os.environ["SM_MODEL_DIR"], "result.json").write_text(
    json.dumps({"state": state, "start": start}))
"""
)


def _uninterrupted() -> str:
    namespace: dict[str, Any] = {}
    exec(STEP, namespace)
    state = "init"
    for epoch in range(EPOCHS):
        state = namespace["step"](state, epoch)
    return state


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_s3_server(monkeypatch, "ckpt") as client:
        yield client


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _keys(client: Any, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket="ckpt", Prefix=prefix).get("Contents", []))


def _spot_spec(tmp_path: Path, name: str, environment: dict[str, str] | None = None) -> Any:
    spec = make_spec(
        tmp_path,
        name,
        CHECKPOINTING_SCRIPT,
        instance_count=1,
        hyperparameters={"epochs": EPOCHS},
        max_run=120,
    )
    return spec.model_copy(
        update={
            "EnableManagedSpotTraining": True,
            "StoppingCondition": StoppingCondition(MaxRuntimeInSeconds=120, MaxWaitTimeInSeconds=300),
            "CheckpointConfig": CheckpointConfig(S3Uri=f"s3://ckpt/{name}"),
            "Environment": environment,
        }
    )


def _assert_resumed(tmp_path: Path, name: str, description: dict[str, Any], log: str) -> int:
    """The job completed in two attempts, the second resuming after the first's last checkpoint
    with exactly the uninterrupted result; returns that last checkpoint's epoch."""
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    # The first attempt's last local checkpoint decides where the second attempt resumes.
    first_attempt = tmp_path / "jobs" / name / "hosts-attempt-1" / "algo-1" / "checkpoints"
    last_saved = max(int(p.name[5:8]) for p in first_attempt.glob("ckpt-*.json"))
    assert last_saved < EPOCHS - 1, log
    model = Path(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as tar:
        result = json.loads(tar.extractfile("result.json").read())  # type: ignore[union-attr]
    assert result == {"state": _uninterrupted(), "start": last_saved + 1}
    assert f"resuming at epoch {last_saved + 1} with " in log

    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses.index("Interrupted") < statuses.index("Training", statuses.index("Interrupted"))
    attempts = description["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Interrupted", "Completed"]
    assert all(a["EndTime"] >= a["StartTime"] for a in attempts)
    assert 0 < description["BillableTimeInSeconds"] <= description["TrainingTimeInSeconds"]
    assert_no_job_processes(name, tmp_path / "jobs" / name)
    return last_saved


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_spot_interruption_resumes_from_checkpoint(tmp_path: Path, moto_s3: Any) -> None:
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3, stop_grace_seconds=10)
    backend = session.backend()
    backend.submit(job_request(_spot_spec(tmp_path, "spot-job")))

    # Sync while training: checkpoints reach S3 before the job ends.
    wait_for_line(backend, "spot-job", "saved epoch 2")
    deadline = time.monotonic() + 30
    while not _keys(moto_s3, "spot-job/"):
        assert time.monotonic() < deadline, "no checkpoint synced to S3 while training"
        time.sleep(0.1)
    assert backend.describe("spot-job")["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS
    TrainingJob(backend, "spot-job").stop(reason="spot")

    description = wait_terminal(backend, "spot-job", timeout=120)
    log = "\n".join(backend.log_lines("spot-job"))
    last_saved = _assert_resumed(tmp_path, "spot-job", description, log)
    assert last_saved >= 2, log

    # Pruned locally, so deleted in S3 (as SageMaker does): the second attempt restored only what
    # the first kept, and S3 ends with the two newest checkpoints.
    restored = int(log.split(f"resuming at epoch {last_saved + 1} with ")[1].split(" ")[0])
    assert 1 <= restored <= 3, log
    assert _keys(moto_s3, "spot-job/") == [f"spot-job/ckpt-{e:03d}.json" for e in (EPOCHS - 2, EPOCHS - 1)]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_spot_fault_interrupts_the_first_attempt_at_a_given_line(tmp_path: Path, moto_s3: Any) -> None:
    """The fault-injection route: ``{"kind": "spot", "rank": 0, "after_lines": 3}`` interrupts
    attempt 1 when rank 0 has printed its third line ("saved epoch 1"); attempt 2 runs to the end."""
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3, stop_grace_seconds=10)
    backend = session.backend()
    faults = json.dumps([{"kind": "spot", "rank": 0, "after_lines": 3}])
    backend.submit(job_request(_spot_spec(tmp_path, "spot-fault", {contract.SMLAUNCH_FAULTS: faults})))

    description = wait_terminal(backend, "spot-fault", timeout=120)
    log = "\n".join(backend.log_lines("spot-fault"))
    assert "fault injection: spot of attempt 1, rank 0 after 3 lines: interrupting the job" in log
    last_saved = _assert_resumed(tmp_path, "spot-fault", description, log)
    assert last_saved >= 1, log  # the interruption came after "saved epoch 1"


def test_spot_stop_reason_needs_a_spot_job(tmp_path: Path) -> None:
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=2)
    backend = session.backend()
    faulty = make_spec(tmp_path, "spot-fault-not-spot", "pass", instance_count=1).model_copy(
        update={"Environment": {contract.SMLAUNCH_FAULTS: '[{"kind": "spot", "after_seconds": 1}]'}}
    )
    with pytest.raises(ConfigurationError, match="use_spot_instances=True"):
        backend.check(job_request(faulty))
    spec = make_spec(tmp_path, "not-spot", "import time; time.sleep(30)", instance_count=1)
    backend.submit(job_request(spec))
    try:
        with pytest.raises(ConfigurationError, match="use_spot_instances"):
            backend.stop("not-spot", reason="spot")
        with pytest.raises(ConfigurationError, match="reason"):
            backend.stop("not-spot", reason="preempted")
    finally:
        backend.stop("not-spot")
        assert wait_terminal(backend, "not-spot")["TrainingJobStatus"] == contract.STATUS_STOPPED


# --- a requeueing scheduler's preemption (Slurm's), its signals in either order --------------------

_REQUEUEING_AGENT = """
import sys
from pathlib import Path

from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.executors.process.executor import ProcessExecutor
from smlaunch.sdk.backends.emulated.state import JobDir


class RequeueingProcesses(ProcessExecutor):
    requeues = True  # as SlurmExecutor: a signal to the agent of a spot job is a preemption


sys.exit(Agent(JobDir(Path(sys.argv[1])), RequeueingProcesses()).run())
"""


class _AgentStartedByTheTest(LocalBackend):
    """Stages the job but leaves starting its agent to the test."""

    def _start_agent(self, job: JobDir) -> None:
        return None


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("agent_signalled", [True, False])
def test_a_host_stopped_before_the_agent_hears_of_a_preemption(tmp_path: Path, agent_signalled: bool) -> None:
    """Slurm signals every step and the batch script (the agent) at once, in no set order. When the
    host has already ended "Stopped" by that signal before the agent's arrives, the attempt still
    ends Interrupted (the job stays InProgress for the requeued run); a host stopped by a signal
    the agent never hears of is a failure once ``PREEMPTION_HOLD_SECONDS`` have passed."""
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=10)
    backend = _AgentStartedByTheTest(session=session)
    name = f"requeued-{agent_signalled}".lower()
    spec = make_spec(tmp_path, name, CHECKPOINTING_SCRIPT, instance_count=1, hyperparameters={"epochs": 50})
    backend.submit(
        job_request(
            spec.model_copy(
                update={
                    "EnableManagedSpotTraining": True,
                    "StoppingCondition": StoppingCondition(MaxRuntimeInSeconds=120, MaxWaitTimeInSeconds=300),
                    "CheckpointConfig": CheckpointConfig(S3Uri=(tmp_path / "ckpt").as_uri()),
                }
            )
        )
    )
    job = backend.job_dir(name)
    runner = tmp_path / "requeueing_agent.py"
    runner.write_text(_REQUEUEING_AGENT)
    agent = subprocess.Popen([sys.executable, str(runner), str(job.path)], stdout=subprocess.DEVNULL)
    # recorded as the backend records the agents it starts: from then on the job is started
    started = psutil.Process(agent.pid).create_time()
    write_json_atomic(job.agent_file, {"pid": agent.pid, "create_time": started})
    try:
        wait_for_line(backend, name, "saved epoch 1")
        (host,) = [p for p in psutil.Process(agent.pid).children() if "smlaunch.runtime" in p.cmdline()]
        host.send_signal(signal.SIGTERM)  # the scheduler's signal reaches the host first ...
        host.wait(timeout=30)
        time.sleep(1.0)
        if agent_signalled:
            agent.send_signal(signal.SIGTERM)  # ... and the agent's arrives after the host ended
        assert agent.wait(timeout=60) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    state = job.read_state()
    log = job.job_log.read_text()
    if agent_signalled:
        assert state["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS, (state, log[-2000:])
        assert state["SecondaryStatus"] == contract.SECONDARY_INTERRUPTED, (state, log[-2000:])
        assert [a["Outcome"] for a in state["Attempts"]] == [contract.SECONDARY_INTERRUPTED]
        assert "Preempted: every host has ended" in log
    else:
        assert state["TrainingJobStatus"] == contract.STATUS_FAILED, (state, log[-2000:])
        assert "Stopped: host algo-1 received SIGTERM" in state["FailureReason"], state
    assert_no_job_processes(name, job.path)
