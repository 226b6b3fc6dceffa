"""A host pod as the agent supervises it (:class:`~smlaunch.sdk.backends.kubernetes.pods.PodProcess`),
against a fake CoreV1Api with the official client's models: exit codes, a pod that cannot start,
signals as deletions, its log, its wait for the scheduler; the executor's side of them."""

from __future__ import annotations

import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from smlaunch.sdk.backends.kubernetes import executor, pods
from smlaunch.sdk.backends.kubernetes.pods import PodProcess


def pod(phase: str, state: client.V1ContainerState | None = None) -> client.V1Pod:
    statuses = [
        client.V1ContainerStatus(
            name="main", image="i", image_id="", ready=False, restart_count=0, state=state
        )
    ]
    return client.V1Pod(
        status=client.V1PodStatus(phase=phase, container_statuses=statuses if state else None)
    )


class Stream:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, amount: int, decode_content: bool = True) -> Any:
        yield from (self.data[i : i + 5] for i in range(0, len(self.data), 5))


class FakeCore:
    def __init__(self, *pods: client.V1Pod | None) -> None:
        self.pods = list(pods)
        self.deleted: list[tuple[str, int]] = []

    def read_namespaced_pod(self, name: str, namespace: str) -> client.V1Pod:
        current = self.pods[0] if len(self.pods) == 1 else self.pods.pop(0)
        if current is None:
            raise ApiException(status=404, reason="Not Found")
        return current

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        self.deleted.append((name, grace_period_seconds))

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Stream:
        assert kwargs == {"follow": True, "_preload_content": False}
        return Stream(b"[algo-1/rank 0] hello\n[algo-1/rank 1] world\n")


@pytest.fixture(autouse=True)
def every_poll_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pods, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(executor, "POLL_SECONDS", 0.0)


def process(core: FakeCore) -> PodProcess:
    return PodProcess(core, "ns", "job-algo-1", "algo-1", grace=5)


def test_the_exit_code_is_the_containers() -> None:
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    ended = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=3))
    proc = process(FakeCore(pod("Running", running), pod("Failed", ended)))
    assert proc.poll() is None
    assert proc.poll() == 3 and proc.wait(timeout=1) == 3


def test_signals_delete_the_pod_and_a_deleted_pod_ended_by_that_signal() -> None:
    core = FakeCore(None)
    proc = process(core)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGUSR1)  # not one Kubernetes can deliver: ignored
    proc.kill()
    assert core.deleted == [("job-algo-1", 5), ("job-algo-1", 0)]
    assert proc.poll() == 128 + signal.SIGTERM


def test_a_pod_that_cannot_start_ends_its_host_with_the_kubelets_reason() -> None:
    waiting = client.V1ContainerState(
        waiting=client.V1ContainerStateWaiting(reason="ErrImageNeverPull", message='image "x" is not present')
    )
    core = FakeCore(pod("Pending", waiting))
    proc = process(core)
    assert proc.poll() == 1
    assert proc.failure == 'ErrImageNeverPull: image "x" is not present'
    assert core.deleted == [("job-algo-1", 0)]
    assert (
        proc.stdout.readline()
        == b'[smlaunch] algo-1 cannot start: ErrImageNeverPull: image "x" is not present\n'
    )


def test_a_container_the_runtime_could_not_start_ends_its_host_with_that_reason() -> None:
    message = "failed to create shim task: unable to apply caps: operation not permitted"
    ended = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(
            exit_code=128, reason="ContainerCannotRun", message=message
        )
    )
    proc = process(FakeCore(pod("Failed", ended)))
    assert proc.poll() == 128
    assert proc.failure == f"ContainerCannotRun: {message}"


def test_the_log_is_read_once_the_container_runs_in_whole_lines() -> None:
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    proc = process(FakeCore(pod("Running", running)))
    assert proc.stdout.readline() == b"[algo-1/rank 0] hello\n"
    assert proc.stdout.readline() == b"[algo-1/rank 1] world\n"
    assert proc.stdout.readline() == b""


def deleting(phase: str = "Running") -> client.V1Pod:
    """A pod someone deleted: it is terminating (a deletion timestamp), its container still running."""
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    terminating = pod(phase, running)
    terminating.metadata = client.V1ObjectMeta(deletion_timestamp="2026-01-01T00:00:00Z")
    return terminating


def evicted() -> client.V1Pod:
    ended = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=137))
    gone = pod("Failed", ended)
    gone.status.reason, gone.status.message = "Evicted", "The node was low on resource: memory."
    return gone


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        ((deleting(), None), "deleted"),
        ((evicted(),), "Evicted: The node was low on resource: memory."),
        ((None,), "deleted"),
    ],
)
def test_a_spot_hosts_pod_lost_from_outside_runs_on_until_the_agent_signals_it(
    pods: tuple[client.V1Pod | None, ...], why: str
) -> None:
    core = FakeCore(*pods)
    proc = PodProcess(core, "ns", "job-algo-2", "algo-2", grace=5, spot=True)
    assert proc.poll() is None and proc.lost == why  # an interruption for the agent, not a failure
    proc.send_signal(signal.SIGTERM)  # the agent ends the attempt
    assert proc.wait(timeout=1) in (128 + signal.SIGTERM, 137)


def test_without_spot_a_pod_lost_from_outside_fails_its_host() -> None:
    proc = process(FakeCore(None))
    assert proc.poll() == 128 + signal.SIGKILL and proc.lost == "deleted"
    evicted_proc = process(FakeCore(evicted()))
    assert evicted_proc.poll() == 137


def test_a_pod_the_agent_deleted_is_not_lost() -> None:
    core = FakeCore(deleting(), None)
    proc = PodProcess(core, "ns", "job-algo-2", "algo-2", grace=5, spot=True)
    proc.send_signal(signal.SIGTERM)
    assert proc.poll() is None and proc.lost is None  # terminating: still running
    assert proc.poll() == 128 + signal.SIGTERM


class Namespace(FakeCore):
    """The host pods of one job as ``kill_everything`` lists and deletes them; each deletion
    records whether the pod's log had been read to its end by then."""

    def __init__(self, proc: PodProcess | None, *pods: client.V1Pod | None) -> None:
        super().__init__(*pods)
        self.proc = proc
        self.left = ["job-algo-1"]
        self.read_before_deletion: list[bool] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> client.V1PodList:
        items = [client.V1Pod(metadata=client.V1ObjectMeta(name=name)) for name in self.left]
        return client.V1PodList(items=items)

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        assert self.proc is not None
        self.read_before_deletion.append(self.proc.log_read.is_set())
        self.left = []


def _executor(core: Namespace) -> executor.KubernetesExecutor:
    from types import SimpleNamespace

    from smlaunch.sdk.backends.emulated.job_settings import KubernetesSettings

    pod_plan = {"metadata": {"name": "job-algo-1", "labels": {executor.JOB_LABEL: "job"}}}
    fields = KubernetesSettings(namespace="ns", host_pods=[pod_plan])
    return executor.KubernetesExecutor(fields, core, SimpleNamespace(), "127.0.0.1")  # type: ignore[arg-type]


def test_a_pod_that_ended_on_its_own_is_deleted_once_its_log_was_read() -> None:
    ended = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=0))
    core = Namespace(None, pod("Succeeded", ended))
    proc = process(core)
    core.proc = proc
    assert proc.poll() == 0 and proc.ended_on_its_own and not proc.log_read.is_set()
    lines: list[bytes] = []

    def pump() -> None:  # the agent's pump, late: the script printed its result and exited at once
        time.sleep(0.3)
        while line := proc.stdout.readline():
            lines.append(line)

    reader = threading.Thread(target=pump)
    reader.start()
    proc.send_signal(signal.SIGTERM)  # the agent ends every host once one failed: not this one's pod
    killer = _executor(core)
    killer.pods["algo-1"] = proc
    killer.kill_everything(SimpleContext())  # type: ignore[arg-type]
    reader.join(5)
    assert core.read_before_deletion == [True]
    assert lines == [b"[algo-1/rank 0] hello\n", b"[algo-1/rank 1] world\n"]


def test_a_pod_the_agent_stops_is_deleted_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    core = Namespace(None, pod("Running", running))
    proc = process(core)
    core.proc = proc
    proc.send_signal(signal.SIGTERM)  # a stop: its pod goes with the grace, then kill_everything
    core.left = ["job-algo-1"]  # still terminating
    monkeypatch.setattr(executor, "DRAIN_SECONDS", 30.0)  # never waited for
    killer = _executor(core)
    killer.pods["algo-1"] = proc
    started = time.monotonic()
    killer.kill_everything(SimpleContext())  # type: ignore[arg-type]
    assert time.monotonic() - started < 5 and not proc.ended_on_its_own
    assert core.read_before_deletion == [False, False]  # deleted at once, its log still open


class SimpleContext:
    def say(self, text: str) -> None:
        raise AssertionError(text)


def test_once_a_spot_hosts_pod_is_lost_no_report_handed_back_counts(tmp_path: Any) -> None:
    from types import SimpleNamespace

    from smlaunch.sdk.backends.emulated.spot import INTERRUPT_FILE
    from smlaunch.sdk.backends.kubernetes.executor import KubernetesExecutor

    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    trees = SimpleNamespace(keeps_output=None)
    said: list[str] = []
    chosen = KubernetesExecutor(None, FakeCore(), trees, "127.0.0.1")  # type: ignore[arg-type]
    chosen._context = SimpleNamespace(say=said.append, job=SimpleNamespace(path=tmp_path))  # type: ignore[assignment]
    alive = PodProcess(FakeCore(pod("Running", running)), "ns", "j-algo-1", "algo-1", grace=5, spot=True)
    chosen.pods = {"algo-1": alive}
    assert trees.keeps_output("algo-1") is True  # nothing lost: a report counts
    chosen.pods["algo-2"] = PodProcess(FakeCore(deleting()), "ns", "j-algo-2", "algo-2", grace=5, spot=True)
    assert trees.keeps_output("algo-1") is False  # a peer failing on the lost host: a consequence
    assert (tmp_path / INTERRUPT_FILE).exists()
    assert said == ["algo-2: pod j-algo-2 deleted: a spot interruption"]
    assert trees.keeps_output("algo-2") is False and len(said) == 1  # asked once per attempt


# --- MPI between pods: ssh material in every host's tree ----------------------------------------


def _fake_keygen(directory: Any) -> None:
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        (directory / name).write_text(f"PRIVATE {name}\n")
        (directory / f"{name}.pub").write_text(f"ssh-ed25519 AAAA {name}\n")


def _mpi_context(tmp_path: Any, hyperparameters: dict[str, str]) -> Any:
    from types import SimpleNamespace

    from smlaunch.sdk.request.spec import TrainingJobSpec

    spec = TrainingJobSpec(
        TrainingJobName="job",
        AlgorithmSpecification={"TrainingImage": "", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": "s3://bucket/out"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
        HyperParameters=hyperparameters,
    )
    tmp_path.mkdir(exist_ok=True)
    hosts = [SimpleNamespace(name=f"algo-{i}", base=tmp_path / f"algo-{i}") for i in (1, 2)]
    for host in hosts:
        host.base.mkdir()
    (tmp_path / "job").mkdir()
    return SimpleNamespace(spec=spec, hosts=hosts, job=SimpleNamespace(path=tmp_path / "job"))


def _ssh_executor(host_network: bool) -> executor.KubernetesExecutor:
    from types import SimpleNamespace

    from smlaunch.sdk.backends.emulated.job_settings import KubernetesSettings

    fields = KubernetesSettings(namespace="ns", host_pods=[], host_network=host_network)
    return executor.KubernetesExecutor(fields, None, SimpleNamespace(), "127.0.0.1")  # type: ignore[arg-type]


def test_an_mpi_job_gets_fresh_keys_and_its_own_sshd_config_in_each_hosts_tree(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from smlaunch.sdk.backends.emulated.executors import ssh

    monkeypatch.setattr(ssh, "_ssh_keygen", _fake_keygen)
    context = _mpi_context(tmp_path, {"sagemaker_mpi_enabled": "true"})
    ports = _ssh_executor(host_network=True)._ssh_material(context)
    assert sorted(ports) == ["algo-1", "algo-2"] and len(set(ports.values())) == 2
    for index, host in enumerate(context.hosts, start=1):
        tree = host.base / ".smlaunch-ssh"
        assert executor.POD_SSH_DIR == "/opt/ml/.smlaunch-ssh"
        assert sorted(p.name for p in tree.iterdir()) == sorted(
            [
                "authorized_keys",
                "id_ed25519",
                "id_ed25519.pub",
                "ssh_config",
                f"sshd_config-{host.name}",
                "ssh_host_ed25519_key",
                "ssh_host_ed25519_key.pub",
            ]
        )
        sshd = (tree / f"sshd_config-{host.name}").read_text()
        assert f"Port {ports[host.name]}\nListenAddress 127.0.0.{index}\n" in sshd
        assert f"HostKey {executor.POD_SSH_DIR}/ssh_host_ed25519_key" in sshd
        assert f"IdentityFile {executor.POD_SSH_DIR}/id_ed25519" in (tree / "ssh_config").read_text()
        assert all(p.stat().st_mode & 0o077 == 0 for p in [tree, *tree.iterdir()])
    assert not (context.job.path / "ssh").exists()  # only the trees hold the keys


def test_on_a_pod_network_sshd_listens_everywhere_on_one_port_and_hosts_are_dialled_by_name(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from smlaunch.sdk.backends.emulated.executors import ssh

    monkeypatch.setattr(ssh, "_ssh_keygen", _fake_keygen)
    context = _mpi_context(tmp_path, {"sagemaker_mpi_enabled": "true"})
    chosen = _ssh_executor(host_network=False)
    assert chosen._ssh_material(context) == {"algo-1": 2222, "algo-2": 2222}
    tree = context.hosts[1].base / ".smlaunch-ssh"
    assert "ListenAddress" not in (tree / "sshd_config-algo-2").read_text()
    assert "Host algo-1\n    HostName algo-1\n    Port 2222\n" in (tree / "ssh_config").read_text()
    (tree / "stale").write_text("")  # a new attempt: new keys, nothing of the last one
    chosen._ssh_material(context)
    assert not (tree / "stale").exists()


def test_smp_and_single_host_jobs_get_no_ssh(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from smlaunch.sdk.backends.emulated.executors import ssh

    monkeypatch.setattr(ssh, "_ssh_keygen", _fake_keygen)
    smp = _mpi_context(tmp_path, {"sagemaker_mpi_enabled": "true", "mp_parameters": '{"partitions": 2}'})
    assert _ssh_executor(host_network=True)._ssh_material(smp) == {}
    plain = _mpi_context(tmp_path / "plain", {"sagemaker_mpi_enabled": "false"})
    assert _ssh_executor(host_network=True)._ssh_material(plain) == {}
    single = _mpi_context(tmp_path / "single", {"sagemaker_mpi_enabled": "true"})
    single.hosts = single.hosts[:1]
    assert _ssh_executor(host_network=True)._ssh_material(single) == {}
    assert not list((tmp_path / "algo-1").iterdir())


def unscheduled(message: str | None = None, node: str | None = None) -> client.V1Pod:
    """A pending pod: before the scheduler answered (no condition), refused by it (``message``),
    or bound to ``node`` (its containers being created)."""
    conditions = (
        [client.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=message)]
        if message
        else None
    )
    return client.V1Pod(
        spec=client.V1PodSpec(containers=[], node_name=node),
        status=client.V1PodStatus(phase="Pending", conditions=conditions),
    )


def test_the_hosts_wait_for_the_scheduler_until_every_pod_is_on_a_node() -> None:
    """``waiting``: ``""`` before the scheduler answered, its reason for the first host pod it
    refused, None once all are bound (or ran, or ended): then the agent records Training."""
    reason = "0/1 nodes are available: 1 Insufficient cpu."
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    first = FakeCore(unscheduled(), pod("Running", running))
    second = FakeCore(unscheduled(), unscheduled(reason), unscheduled(reason), unscheduled(node="localhost"))
    chosen = _executor(Namespace(None))
    chosen.pods = {
        "algo-1": PodProcess(first, "ns", "j-algo-1", "algo-1", grace=5),
        "algo-2": PodProcess(second, "ns", "j-algo-2", "algo-2", grace=5),
    }
    context = SimpleNamespace(hosts=[SimpleNamespace(name="algo-1"), SimpleNamespace(name="algo-2")])
    assert chosen.waiting(context) == ""  # type: ignore[arg-type]
    assert chosen.waiting(context) == f"algo-2: Pending: {reason}"  # type: ignore[arg-type]
    assert chosen.pods["algo-1"].unplaced() is None  # running: it was placed
    assert chosen.waiting(context) == f"algo-2: Pending: {reason}"  # type: ignore[arg-type]
    assert chosen.waiting(context) is None  # type: ignore[arg-type]
    gone = PodProcess(FakeCore(None), "ns", "j-algo-3", "algo-3", grace=5)
    assert gone.unplaced() is None  # its host ends through poll(), not as a wait


def test_a_signal_taken_in_band_leaves_the_pod_and_its_log_to_be_read() -> None:
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    ended = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=143))
    core = FakeCore(pod("Running", running), pod("Failed", ended))
    taken: list[int] = []
    proc = PodProcess(core, "ns", "job-algo-1", "algo-1", grace=5, in_band=lambda sig: not taken.append(sig))
    proc.send_signal(signal.SIGTERM)
    assert taken == [signal.SIGTERM] and core.deleted == []  # the host's process got it, the pod stays
    assert proc.poll() is None and proc.poll() == 143
    assert proc.ended_on_its_own  # so kill_everything reads its log to the end before deleting it
    refused = FakeCore(pod("Running", running))
    stubborn = PodProcess(refused, "ns", "job-algo-2", "algo-2", grace=5, in_band=lambda sig: False)
    stubborn.send_signal(signal.SIGTERM)  # not polling: deleted with the grace
    stubborn.kill()  # SIGKILL is never in-band
    assert refused.deleted == [("job-algo-2", 5), ("job-algo-2", 0)]
