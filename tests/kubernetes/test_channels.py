"""FastFile and Pipe channels on the dev cluster: a 2-host job whose script reads a ShardedByS3Key
FastFile channel (each host its share) and a Pipe channel, two epochs, as SageMaker's examples read
them; each host pod delivers its own channels (docs/kubernetes.md). Then FastFile as a real FUSE
mount in a privileged host pod (``fuse=True``) and in one that a device plugin gave /dev/fuse
(``fuse="<resource>"``). S3 is a moto server on 127.0.0.1."""

from __future__ import annotations

import ctypes.util
import hashlib
import importlib.util
import shutil
import subprocess
import sysconfig
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch import KubernetesSession, TrainingInput
from smlaunch.sdk.errors import JobFailedError
from tests.kubernetes._fuse_device_plugin import KUBELET_SOCKET, FuseDevicePlugin
from tests.kubernetes.conftest import S3_BUCKET, estimator, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(600)]

PARTS = 4

TRAIN = textwrap.dedent(
    """
    import hashlib, os

    host = os.environ["SM_CURRENT_HOST"]
    train = os.environ["SM_CHANNEL_TRAIN"]
    names = sorted(os.listdir(train))
    total = 0
    for name in names:
        with open(os.path.join(train, name)) as handle:
            total += int(handle.read().split()[1])
    digests = []
    for epoch in range(2):  # Pipe mode: one FIFO per epoch, read to its end
        with open(f"/opt/ml/input/data/stream_{epoch}", "rb") as fifo:
            digests.append(hashlib.sha256(fifo.read()).hexdigest()[:16])
    print(f"RESULT {host} train={','.join(names)} sum={total} stream={'/'.join(digests)}", flush=True)
    """
)


def test_fastfile_and_pipe_channels_reach_each_host_pod(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(PARTS):
        s3.put_object(Bucket=S3_BUCKET, Key=f"train/part-{i}.txt", Body=f"value {10**i}\n".encode())
    streamed = b""
    for i in range(3):
        body = bytes([65 + i]) * (1000 * (i + 1))
        s3.put_object(Bucket=S3_BUCKET, Key=f"stream/s-{i}.bin", Body=body)
        streamed += body
    job = estimator(k8s_session(), tmp_path, TRAIN)
    try:
        job.fit(
            {
                "train": TrainingInput(
                    f"s3://{S3_BUCKET}/train/", distribution="ShardedByS3Key", input_mode="FastFile"
                ),
                "stream": TrainingInput(f"s3://{S3_BUCKET}/stream/", input_mode="Pipe"),
            }
        )
    finally:
        logs = capsys.readouterr().out
        print(logs)
    description = job.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed", (description.get("FailureReason"), logs[-4000:])
    digest = hashlib.sha256(streamed).hexdigest()[:16]
    # ShardedByS3Key: algo-1 the even parts, algo-2 the odd ones; every host the whole stream, twice.
    assert f"RESULT algo-1 train=part-0.txt,part-2.txt sum=101 stream={digest}/{digest}" in logs
    assert f"RESULT algo-2 train=part-1.txt,part-3.txt sum=1010 stream={digest}/{digest}" in logs
    # No fuse=True: FastFile with File semantics, and the job log says why, on each host.
    for host in ("algo-1", "algo-2"):
        said = [line for line in logs.splitlines() if line.startswith(f"[{host}]") and "FastFile" in line]
        assert any("KubernetesSession(fuse=True)" in line for line in said), logs[-4000:]
    assert job_objects(api, namespace) == []


FUSE_RESOURCE = "smlaunch.test/fuse"

READ_MOUNTED = textwrap.dedent(
    """
    import os

    train = os.environ["SM_CHANNEL_TRAIN"]
    with open("/proc/mounts") as mounts:
        kinds = [line.split()[2] for line in mounts if line.split()[1] == train]
    total = 0
    for name in sorted(os.listdir(train)):
        with open(os.path.join(train, name)) as handle:
            total += int(handle.read().split()[1])
    print(f"RESULT mounted={kinds} sum={total}", flush=True)
    """
)


@pytest.fixture(scope="module")
def fuse_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our image as root with this machine's ``fusermount3``, ``libfuse3`` and ``mfusepy`` (what
    ``fuse3`` and ``smlaunch[fastfile]`` install), for the FUSE mounts; removed afterwards."""
    library = ctypes.util.find_library("fuse3")
    fusermount = shutil.which("fusermount3")
    binding = importlib.util.find_spec("mfusepy")
    if library is None or fusermount is None or binding is None or binding.origin is None:
        pytest.skip("this machine has no fuse3 or mfusepy to put in the image")
    library_path = Path(f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}/{library}").resolve()
    site = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "python3", image, "-c", PURELIB],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    context = tmp_path_factory.mktemp("fuse-image")
    for source in (library_path, Path(fusermount), Path(binding.origin)):
        shutil.copy(source, context / source.name)
    (context / "Dockerfile").write_text(
        f"FROM {image}\nUSER root\nCOPY fusermount3 /usr/bin/fusermount3\n"
        f"COPY {library_path.name} {library_path.parent}/\nCOPY mfusepy.py {site}/mfusepy.py\n"
        "RUN ldconfig\n"
    )
    tag = f"{image}-fuse"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True, check=True)
    yield tag
    # The tests' pods are gone (their namespaces with them); the kubelet may not have removed their
    # ended containers yet, which would keep the image.
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"ancestor={tag}"], capture_output=True, text=True, check=False
    ).stdout.split()
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True, check=False)
    subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


@pytest.fixture
def fuse_devices(core: client.CoreV1Api) -> Iterator[str]:
    """:data:`FUSE_RESOURCE` offered by a device plugin, until the node says it has some."""
    if not KUBELET_SOCKET.exists():
        pytest.skip(f"no kubelet device plugin socket at {KUBELET_SOCKET}")
    plugin = FuseDevicePlugin(FUSE_RESOURCE)
    plugin.start()
    try:
        deadline = time.monotonic() + 60
        while (core.read_node("localhost").status.allocatable or {}).get(FUSE_RESOURCE, "0") == "0":
            assert time.monotonic() < deadline, "the node never offered the device plugin's resource"
            time.sleep(1)
        yield FUSE_RESOURCE
    finally:
        plugin.close()


def _fastfile_job(
    session: KubernetesSession, s3: Any, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    """A 1-host job reading a FastFile channel of 4 objects under ``prefix``, completed: its log."""
    for i in range(PARTS):
        s3.put_object(Bucket=S3_BUCKET, Key=f"{prefix}/part-{i}.txt", Body=f"value {10**i}\n".encode())
    job = estimator(session, tmp_path, READ_MOUNTED, instance_count=1)
    try:
        job.fit({"train": TrainingInput(f"s3://{S3_BUCKET}/{prefix}/", input_mode="FastFile")})
    finally:
        logs = capsys.readouterr().out
        print(logs)
    description = job.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed", (description.get("FailureReason"), logs[-4000:])
    assert "[algo-1] [smlaunch] Channel 'train': FastFile mounted on 1 host(s)" in logs, logs[-4000:]
    assert "RESULT mounted=['fuse.smlaunch'] sum=1111" in logs, logs[-4000:]
    return logs


def _may_lower_limits() -> bool:
    """Whether this machine has ``CAP_SYS_RESOURCE`` (bit 24 of ``CapEff``), which Docker must hand
    a privileged root container; sandboxes without it cannot start one."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def test_fastfile_is_a_fuse_mount_in_privileged_host_pods(
    fuse_image: str,
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fuse=True``: the host pod runs privileged, so it has ``/dev/fuse`` and may mount. Where
    Docker cannot start a privileged root container (no ``CAP_SYS_RESOURCE``: docs/kubernetes.md),
    the job fails at once and says so, naming the host."""
    session = k8s_session(image=fuse_image, fuse=True)
    if _may_lower_limits():
        _fastfile_job(session, s3, "privileged", tmp_path, capsys)
    else:
        with pytest.raises(JobFailedError, match="algo-1 could not start: ContainerCannotRun"):
            _fastfile_job(session, s3, "privileged", tmp_path, capsys)
    assert job_objects(api, namespace) == []


def test_fastfile_is_a_fuse_mount_where_a_device_plugin_gives_dev_fuse(
    fuse_image: str,
    fuse_devices: str,
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fuse="<resource>"``: not privileged, ``/dev/fuse`` from the device plugin, ``CAP_SYS_ADMIN``."""
    _fastfile_job(k8s_session(image=fuse_image, fuse=fuse_devices), s3, "plugin", tmp_path, capsys)
    assert job_objects(api, namespace) == []
