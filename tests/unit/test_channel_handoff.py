"""FastFile and Pipe channels handed off to the hosts (Kubernetes pods): the agent decides each
host's share and writes it into the host's tree; the host delivers it with the local agent's code.
The cluster path: tests/kubernetes/test_channels.py."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated import handoff
from smlaunch.sdk.backends.emulated.data import JobData
from smlaunch.sdk.backends.kubernetes import host as k8s_host
from smlaunch.sdk.backends.kubernetes.plan import ClusterOptions, host_pods
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

PARTS = 4


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data")
        for i in range(PARTS):
            client.put_object(Bucket="data", Key=f"train/part-{i}.txt", Body=f"train {i}\n".encode())
            client.put_object(Bucket="data", Key=f"stream/s-{i}.bin", Body=bytes([i]) * (i + 1))
        yield client


def _channel(name: str, uri: str, mode: str, distribution: str = "FullyReplicated") -> dict[str, Any]:
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}
    return {"ChannelName": name, "InputMode": mode, "DataSource": {"S3DataSource": source}}


def _spec(*channels: dict[str, Any]) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(
        {
            "TrainingJobName": "job",
            "AlgorithmSpecification": {"TrainingInputMode": "File"},
            "RoleArn": "arn:aws:iam::000000000000:role/x",
            "OutputDataConfig": {"S3OutputPath": "s3://data/out"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
            "InputDataConfig": list(channels),
        }
    )


def _trees(root: Path, count: int = 2) -> list[tuple[int, contract.Paths]]:
    hosts = []
    for index in range(count):
        paths = contract.Paths(root / contract.host_name(index))
        for directory in paths.directories():
            directory.mkdir(parents=True, exist_ok=True)
        hosts.append((index, paths))
    return hosts


def _stage_handed_off(s3: Any, root: Path) -> list[tuple[int, contract.Paths]]:
    spec = _spec(
        _channel("train", "s3://data/train/", "FastFile", "ShardedByS3Key"),
        _channel("stream", "s3://data/stream/", "Pipe"),
        _channel("config", "s3://data/train/part-0.txt", "File"),
    )
    hosts = _trees(root)
    engine = TransferEngine(s3, progress=False)
    JobData(spec, hosts, root / "cache", engine, lambda line: None, hand_off=True).stage()
    return hosts


def test_the_agent_decides_the_shares_and_delivers_only_file_channels(s3: Any, tmp_path: Path) -> None:
    hosts = _stage_handed_off(s3, tmp_path)
    for index, paths in hosts:
        assert (paths.channel_dir("config") / "part-0.txt").read_text() == "train 0\n"  # File: here
        assert not paths.channel_dir("train").exists() or not any(paths.channel_dir("train").iterdir())
        assert not paths.pipe_path("stream", 0).exists()  # no FIFO the host could not read
        plan = handoff.read_plan(paths.base)
        train, stream = plan.channels
        assert (train.channel.ChannelName, train.mode, stream.mode) == ("train", "FastFile", "Pipe")
        assert [o.rel for o in train.objects] == [f"part-{i}.txt" for i in range(PARTS)][index::2]
        assert [o.rel for o in stream.objects] == [f"s-{i}.bin" for i in range(PARTS)]
        assert all(o.size > 0 and o.uri.startswith("s3://data/") for o in stream.objects)
    assert handoff.read_plan(tmp_path / "nowhere") == handoff.HandOffPlan()


def test_file_uris_in_fastfile_mode_stay_with_the_agent(s3: Any, tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.txt").write_text("a")
    hosts = _trees(tmp_path / "hosts")
    spec = _spec(_channel("train", local.as_uri(), "FastFile"))
    engine = TransferEngine(s3, progress=False)
    JobData(spec, hosts, tmp_path / "cache", engine, lambda line: None, hand_off=True).stage()
    for _, paths in hosts:
        assert (paths.channel_dir("train") / "a.txt").read_text() == "a"
        assert not (paths.base / handoff.PLAN_FILE).exists()


def _read_fifo(path: Path, into: list[bytes]) -> None:
    with open(path, "rb") as fifo:
        into.append(fifo.read())


def test_a_host_delivers_its_share_with_the_local_agents_code(s3: Any, tmp_path: Path) -> None:
    hosts = _stage_handed_off(s3, tmp_path / "agent")
    index, paths = hosts[1]
    lines: list[str] = []
    engine = TransferEngine(s3, progress=False)
    data = JobData.for_host(index, paths, tmp_path / "host-cache", engine, lines.append, "no FUSE here")
    try:
        assert data.deliver_handed_off() == 2
        train = paths.channel_dir("train")
        assert sorted(p.name for p in train.iterdir()) == ["part-1.txt", "part-3.txt"]  # algo-2's share
        assert (train / "part-3.txt").read_text() == "train 3\n"
        assert any("FastFile cannot be mounted here (no FUSE here)" in line for line in lines), lines
        fifo = paths.pipe_path("stream", 0)
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        got: list[bytes] = []
        reader = threading.Thread(target=_read_fifo, args=(fifo, got))
        reader.start()
        reader.join(timeout=20)
        assert got == [b"".join(bytes([i]) * (i + 1) for i in range(PARTS))]
    finally:
        data.close()
    assert not data.errors


def test_deliver_channels_without_a_plan_is_nothing(tmp_path: Path) -> None:
    assert k8s_host.deliver_channels(tmp_path) is None


def test_a_failed_channel_is_the_hosts_failure(tmp_path: Path) -> None:
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-2"}))
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "failure.json").write_text('{"kind": "stopped"}')  # the runtime's
    k8s_host.write_data_failure(tmp_path, "Pipe channel 'stream' on algo-2: NoSuchKey", 12.5)
    details = json.loads((tmp_path / "output" / "failure.json").read_text())
    assert details["kind"] == "failed" and details["host"] == "algo-2" and details["time"] == 12.5
    assert (
        details["reason"] == "ClientError: Data download failed: Pipe channel 'stream' on algo-2: NoSuchKey"
    )
    assert (tmp_path / "output" / "failure").read_text() == details["reason"]
    k8s_host.write_data_failure(tmp_path, "FastFile channel 'train': s3://b/k: NoSuchKey", 13.0)
    details = json.loads((tmp_path / "output" / "failure.json").read_text())
    assert details["reason"].endswith("s3://b/k: NoSuchKey (on algo-2)"), details


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def test_fuse_true_makes_host_pods_privileged_and_tells_them() -> None:
    spec = _spec()
    plain = host_pods(spec, ClusterOptions(namespace="ml", image="i"), "uid")
    fused = host_pods(spec, ClusterOptions(namespace="ml", image="i", fuse=True), "uid")
    for pod in plain:
        assert "securityContext" not in _main(pod)
        assert k8s_host.FUSE_ENV not in {item["name"] for item in _main(pod)["env"]}
    for pod in fused:
        assert _main(pod)["securityContext"] == {"privileged": True}
        assert {"name": k8s_host.FUSE_ENV, "value": "1"} in _main(pod)["env"]


def test_fuse_from_a_device_plugin_asks_for_it_and_adds_only_sys_admin() -> None:
    from tests.unit.test_kubernetes_session import FakeCore, backend, node

    offering = node()
    offering.status.allocatable["smarter-devices/fuse"] = "20"
    core = FakeCore([offering])
    session_backend = backend(core, resources="off", fuse="smarter-devices/fuse")
    request = JobRequest(_spec(), Strategy.NONE)
    session_backend.check(request)
    pods = host_pods(request.spec, session_backend.cluster_options(request.spec), "uid")
    for pod in pods:
        container = _main(pod)
        assert container["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
        assert container["resources"]["limits"] == {"smarter-devices/fuse": "1"}
        assert pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/main"] == (
            "unconfined"
        )
        assert {"name": k8s_host.FUSE_ENV, "value": "1"} in container["env"]
    without = backend(FakeCore([node()]), resources="off", fuse="smarter-devices/fuse")
    with pytest.raises(UnsupportedByBackendError, match=r"fuse=.*device plugin"):
        without.check(request)


@pytest.mark.parametrize("value", ["yes", "fuse", "kubernetes.io/fuse", 1, ["a/b"]])
def test_fuse_must_be_a_bool_or_a_resource_name(value: object) -> None:
    from smlaunch import KubernetesSession

    with pytest.raises(ConfigurationError, match="fuse"):
        KubernetesSession(fuse=value, api_client=object())  # type: ignore[arg-type]


def test_file_fastfile_and_pipe_pass_the_capability_check() -> None:
    from tests.unit.test_kubernetes_session import FakeCore, backend, node

    for mode in ("File", "FastFile", "Pipe"):
        spec = _spec(_channel("train", "s3://data/train/", mode))
        backend(FakeCore([node()]), resources="off").check(JobRequest(spec, Strategy.NONE))


@pytest.mark.timeout(60)
def test_the_host_stops_the_runtime_when_a_channel_fails(tmp_path: Path) -> None:
    """host.main's loop: a data error SIGTERMs the runtime and the host reports the data failure."""
    code = subprocess.run(
        [sys.executable, "-c", HOST_LOOP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert code.returncode == 1, code.stdout + code.stderr
    details = json.loads((tmp_path / "output" / "failure.json").read_text())
    assert details["reason"].startswith("ClientError: Data download failed: gone"), details
    assert "runtime got 15" in code.stdout, code.stdout


HOST_LOOP = """
import json, os, subprocess, sys, types
from pathlib import Path
from smlaunch.sdk.backends.kubernetes import host
base = Path(sys.argv[1])
(base / "input" / "config").mkdir(parents=True)
(base / "input" / "config" / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1"}))
host.BASE = base
host.POLL_SECONDS = 0.1
host.fetch_tree = lambda url, base: None
host.send_results = lambda url, base, names=(): None
class Data:
    errors = ["gone"]
    def close(self): pass
host.deliver_channels = lambda base: Data()
runtime = (
    "import signal, sys, time\\n"
    "signal.signal(signal.SIGTERM, lambda n, f: (print('runtime got', n, flush=True), sys.exit(0)))\\n"
    "time.sleep(30)\\n"
)
real = subprocess.Popen
host.subprocess.Popen = lambda argv, **kw: real([sys.executable, "-c", runtime], **kw)
os.environ[host.TREE_ENV] = "http://127.0.0.1:9/x"
sys.exit(host.main())
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["before the runtime", "while it runs"])
def test_an_in_band_signal_reaches_the_runtime_or_keeps_it_from_starting(tmp_path: Path, when: str) -> None:
    """host.main with a real tree server: the agent's in-band SIGTERM reaches the runtime; one that
    comes while the tree is fetched ends the host before the runtime starts."""
    shown = subprocess.run(
        [sys.executable, "-c", HOST_SIGNALS, str(tmp_path), when],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    if when == "while it runs":
        assert shown.returncode == 0 and "runtime got 15" in shown.stdout, shown.stdout + shown.stderr
    else:
        assert shown.returncode == 143, shown.stdout + shown.stderr
        assert "stopped by SIGTERM before the runtime started" in shown.stdout
        assert "runtime got" not in shown.stdout


HOST_SIGNALS = """
import json, os, subprocess, sys, threading, time
from pathlib import Path
from smlaunch.sdk.backends.kubernetes import host
from smlaunch.sdk.backends.kubernetes.trees import TreeServer
base, when = Path(sys.argv[1]), sys.argv[2]
(base / "input" / "config").mkdir(parents=True)
(base / "input" / "config" / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1"}))
host.BASE = base
host.send_results = lambda *args, **kwargs: None
host.deliver_channels = lambda base: None
early = when == "before the runtime"
host.fetch_tree = (lambda url, base: time.sleep(2)) if early else (lambda url, base: None)
os.environ[host.TREE_TOKEN_ENV] = "token"
server = TreeServer("token", "127.0.0.1")
server.serve({"algo-1": base})
os.environ[host.TREE_ENV] = server.url("127.0.0.1", "algo-1")
def agent_stops_the_host():
    while not early and not (base / "up").exists():  # the runtime's handler is in place
        time.sleep(0.05)
    while not server.signal("algo-1", 15):  # once the host polls
        time.sleep(0.05)
threading.Thread(target=agent_stops_the_host, daemon=True).start()
runtime = (
    "import signal, sys, time\\n"
    "signal.signal(signal.SIGTERM, lambda n, f: (print('runtime got', n, flush=True), sys.exit(0)))\\n"
    f"open({str(base / 'up')!r}, 'w').close()\\n"
    "time.sleep(30)\\n"
)
real = subprocess.Popen
host.subprocess.Popen = lambda argv, **kw: real([sys.executable, "-c", runtime], **kw)
sys.exit(host.main())
"""
