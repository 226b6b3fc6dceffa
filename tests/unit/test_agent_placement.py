"""The agent's state while a scheduler has not placed every host of an attempt
(:meth:`Executor.waiting`, pods on Kubernetes): ``Starting`` with the scheduler's reason, kept
current in one transition and written to ``state.json`` (what the Kubernetes agent copies into the
job's root), then ``Training`` once every host is placed; a stop meanwhile never says Training."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

from smlaunch import contract
from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.executors.base import Executor, LaunchContext
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, KubernetesSettings
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.request.spec import TrainingJobSpec
from tests.unit.test_kubernetes_session import spec


class NoOutput:
    def readline(self) -> bytes:
        return b""


class FakeHost:
    """A host that runs until its executor has placed every host, then exits 0 (or as signalled)."""

    pid = -1

    def __init__(self, executor: Scheduled) -> None:
        self.executor = executor
        self.stdout = NoOutput()
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.executor.placed_at is not None:
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        while (code := self.poll()) is None:
            time.sleep(0.01)
        return code

    def send_signal(self, sig: int) -> None:
        self.returncode = 128 + sig

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Scheduled(Executor):
    """Hosts a scheduler places after it answered ``answers``, one per poll of the agent; the last
    transition in ``state.json`` is seen at each of them."""

    name: ClassVar[str] = "scheduled"

    def __init__(self, answers: list[str], stop_at: int | None = None) -> None:
        self.answers = list(answers)
        self.stop_at = stop_at
        self.asked = 0
        self.placed_at: int | None = None
        self.seen: list[tuple[str, str]] = []

    def settings(self, spec: TrainingJobSpec) -> Any:
        raise NotImplementedError

    def launch(self, context: LaunchContext) -> None:
        for host in context.hosts:
            host.proc = FakeHost(self)

    def waiting(self, context: LaunchContext) -> str | None:
        last = context.job.read_state()["SecondaryStatusTransitions"][-1]
        self.seen.append((last["Status"], last["StatusMessage"]))
        self.asked += 1
        if self.asked == self.stop_at:
            context.job.stop_file.touch()
        if self.answers:
            return self.answers.pop(0)
        self.placed_at = self.placed_at or self.asked
        return None


def _agent(tmp_path: Path, executor: Scheduled) -> Agent:
    job = JobDir(tmp_path / "job")
    job.logs_dir.mkdir(parents=True)
    job.job_log.touch()
    write_json_atomic(job.spec_file, spec().to_request())
    settings = JobSettings(
        executor=KubernetesSettings(namespace="ns", host_pods=[]), processes_per_host=1, stop_grace_seconds=1
    )
    job.settings_file.write_text(settings.model_dump_json())
    downloading = {"Status": contract.SECONDARY_DOWNLOADING, "StartTime": 1.0, "StatusMessage": "x"}
    job.write_state(
        {
            "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
            "SecondaryStatus": contract.SECONDARY_DOWNLOADING,
            "SecondaryStatusTransitions": [downloading],
        }
    )
    return Agent(job, executor)


def test_starting_with_the_schedulers_reason_until_every_host_is_placed(tmp_path: Path) -> None:
    full, still = "algo-2: Pending: 0/1 nodes are available: 1 Insufficient cpu.", "algo-2: Pending: other"
    executor = Scheduled(["", full, full, "", still])
    agent = _agent(tmp_path, executor)
    agent._launch()
    assert agent._supervise().outcome.status == contract.STATUS_COMPLETED
    assert executor.seen == [
        (contract.SECONDARY_DOWNLOADING, "x"),  # the scheduler has not answered: nothing said yet
        (contract.SECONDARY_DOWNLOADING, "x"),
        (contract.SECONDARY_STARTING, full),
        (contract.SECONDARY_STARTING, full),
        (contract.SECONDARY_STARTING, full),
        (contract.SECONDARY_STARTING, still),  # the same wait, its reason current
    ]
    state = json.loads(agent.job.state_file.read_text())
    statuses = [(t["Status"], t["StatusMessage"]) for t in state["SecondaryStatusTransitions"]]
    assert statuses[1:] == [
        (contract.SECONDARY_STARTING, still),
        (contract.SECONDARY_TRAINING, "Training in progress on the emulated hosts"),
    ]
    assert state["SecondaryStatus"] == contract.SECONDARY_TRAINING
    log = agent.job.job_log.read_text()
    assert f"Starting - {full}" in log and log.index("Starting - ") < log.index("Training - ")


def test_hosts_placed_at_launch_go_straight_to_training(tmp_path: Path) -> None:
    executor = Scheduled([])
    agent = _agent(tmp_path, executor)
    agent._launch()
    assert executor.seen == [(contract.SECONDARY_DOWNLOADING, "x")]
    assert agent.state["SecondaryStatus"] == contract.SECONDARY_TRAINING
    assert agent._supervise().outcome.status == contract.STATUS_COMPLETED


def test_a_job_stopped_while_its_hosts_wait_never_says_training(tmp_path: Path) -> None:
    executor = Scheduled(["algo-1: Pending: no nodes"] * 1000, stop_at=3)
    agent = _agent(tmp_path, executor)
    agent._launch()
    assert agent._supervise().outcome.status == contract.STATUS_STOPPED
    statuses = [t["Status"] for t in agent.state["SecondaryStatusTransitions"]]
    assert statuses == [
        contract.SECONDARY_DOWNLOADING,
        contract.SECONDARY_STARTING,
        contract.SECONDARY_STOPPING,
    ]


class ScheduledPods(Scheduled):
    hosts_called: ClassVar[str] = "pods"


def test_the_status_messages_say_what_the_hosts_are(tmp_path: Path) -> None:
    """ "Training in progress on the pods" on Kubernetes, as "... on the emulated hosts" here."""
    from smlaunch.sdk.backends.emulated.executors.docker.executor import DockerExecutor
    from smlaunch.sdk.backends.emulated.executors.process.executor import ProcessExecutor
    from smlaunch.sdk.backends.emulated.executors.slurm.executor import SlurmExecutor
    from smlaunch.sdk.backends.kubernetes.executor import KubernetesExecutor

    called = [e.hosts_called for e in (ProcessExecutor, DockerExecutor, SlurmExecutor, KubernetesExecutor)]
    assert called == ["emulated hosts", "containers", "Slurm nodes", "pods"]
    agent = _agent(tmp_path, ScheduledPods([]))
    agent._launch()
    assert agent._supervise().outcome.status == contract.STATUS_COMPLETED
    state = json.loads(agent.job.state_file.read_text())
    messages = [t["StatusMessage"] for t in state["SecondaryStatusTransitions"]]
    assert "Training in progress on the pods" in messages, messages
