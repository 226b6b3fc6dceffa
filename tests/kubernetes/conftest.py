"""The session-scoped single-node Kubernetes cluster every ``kubernetes`` test runs on, started and
stopped by ``tools/k8s_dev_cluster.sh``, and the per-test namespace that must leave nothing behind."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests._images import cpu_test_image
from tests.functional._local_helpers import moto_s3_server

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "k8s_dev_cluster.sh"
POD_LOGS = Path("/var/log/pods")  # the kubelet's fixed place for its pods' logs
START_TIMEOUT = 300
NAMESPACE_GONE_SECONDS = 90


@dataclass(frozen=True)
class DevCluster:
    """A running dev cluster: its admin kubeconfig and the API server on 127.0.0.1."""

    kubeconfig: Path
    server: str  # https://127.0.0.1:<port>

    @property
    def api_port(self) -> int:
        return int(self.server.rsplit(":", 1)[1])


def run_script(command: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """``tools/k8s_dev_cluster.sh <command>`` on the cluster whose run directory is ``run_dir``."""
    return subprocess.run(
        [str(SCRIPT), command],
        env={**os.environ, "SMLAUNCH_K8S_RUN": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def _component_processes(run_dir: Path) -> list[str]:
    """The processes whose command line names the run directory (every component's does)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(run_dir) in cmdline:
            found.append(f"{process.info['pid']}: {cmdline[:200]}")
    return found


def _pod_containers() -> list[str]:
    """The Docker containers a kubelet made (they carry the pod's labels)."""
    result = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=io.kubernetes.pod.uid"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def _pod_logs() -> set[str]:
    return {path.name for path in POD_LOGS.iterdir()} if POD_LOGS.is_dir() else set()


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[DevCluster]:
    """A running cluster (node ``localhost``); skips with the script's reason when it cannot start
    here (cache not built, no Docker engine, not root, or a component failing). Stopped at the end of
    the session, which must leave no component process, pod container or pod log behind."""
    logs_before = _pod_logs()
    with tempfile.TemporaryDirectory(prefix="smlaunch-k8s-") as tmp:
        run_dir = Path(tmp) / "run"
        started = run_script("start", run_dir)
        if started.returncode != 0:
            pytest.skip(f"no Kubernetes dev cluster: {started.stderr.strip()[-1500:]}")
        try:
            yield DevCluster(
                kubeconfig=Path(started.stdout.strip().splitlines()[-1]),
                server=(run_dir / "server").read_text().strip(),
            )
        finally:
            stopped = run_script("stop", run_dir)
            assert stopped.returncode == 0, stopped.stderr
            assert not _component_processes(run_dir), _component_processes(run_dir)
            assert not _pod_containers(), "the kubelet's containers outlived stop"
            assert _pod_logs() <= logs_before, sorted(_pod_logs() - logs_before)


@pytest.fixture(scope="session")
def api(k8s_cluster: DevCluster) -> client.ApiClient:
    """The official client, as the cluster's admin, through the kubeconfig (the server's CA verified)."""
    return config.new_client_from_config(config_file=str(k8s_cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def image() -> str:
    """Our CPU image, the one the Docker tests run (built or reused)."""
    return cpu_test_image()


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace for one test, ready for pods; deleted afterwards, and it must be gone (every
    pod and object in it with it) within a bound."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    _wait_for_token(core, name)
    yield name
    core.delete_namespace(name)
    deadline = time.monotonic() + NAMESPACE_GONE_SECONDS
    while _exists(core, name):
        left = [pod.metadata.name for pod in core.list_namespaced_pod(name).items]
        assert time.monotonic() < deadline, f"namespace {name} still exists; pods left: {left}"
        time.sleep(0.5)


def _exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _wait_for_token(core: client.CoreV1Api, namespace: str) -> None:
    """The controller manager gives a new namespace its ``default`` account and that account its token
    secret; a pod created before then is refused by the ServiceAccount admission."""
    deadline = time.monotonic() + 30
    while True:
        accounts = core.list_namespaced_service_account(namespace).items
        if any(account.metadata.name == "default" and account.secrets for account in accounts):
            return
        assert time.monotonic() < deadline, f"no token for {namespace}:default after 30s"
        time.sleep(0.5)


S3_BUCKET = "k8s-bucket"
LEFT_SECONDS = 60


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A moto S3 server on 127.0.0.1 with :data:`S3_BUCKET`; the pods reach it on the host network."""
    with moto_s3_server(monkeypatch, S3_BUCKET) as s3_client:
        yield s3_client


@pytest.fixture
def k8s_session(
    k8s_cluster: DevCluster, core: client.CoreV1Api, namespace: str, image: str, s3: Any
) -> Callable[..., Any]:
    """``KubernetesSession`` on the dev cluster, in the test's namespace, our image, S3 at the moto
    server (credentials from a Secret the pods reference), host network, no resource requests."""
    from smlaunch import KubernetesSession

    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="aws"),
            string_data={
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        ),
    )

    def make(**kwargs: Any) -> Any:
        arguments: dict[str, Any] = {
            "namespace": namespace,
            "kubeconfig": str(k8s_cluster.kubeconfig),
            "image": image,
            "image_pull_policy": "Never",
            "resources": "off",
            "host_network": True,
            "storage": {"s3": {"endpoint_url": s3.meta.endpoint_url, "credentials_secret": "aws"}},
            "stop_grace_seconds": 5,
            "s3_client": s3,
            **kwargs,
        }
        return KubernetesSession(**arguments)

    return make


def job_objects(api: client.ApiClient, namespace: str) -> list[str]:
    """The pods, Services, Secrets, ServiceAccounts, Roles and RoleBindings of smlaunch jobs left in
    ``namespace``, waiting up to :data:`LEFT_SECONDS` for the garbage collector."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    deadline = time.monotonic() + LEFT_SECONDS
    while True:
        found = []
        for kind, lister in (
            ("Pod", core.list_namespaced_pod),
            ("Service", core.list_namespaced_service),
            ("Secret", core.list_namespaced_secret),
            ("ServiceAccount", core.list_namespaced_service_account),
            ("Role", rbac.list_namespaced_role),
            ("RoleBinding", rbac.list_namespaced_role_binding),
        ):
            items = lister(namespace, label_selector="smlaunch.io/job").items
            found += [f"{kind}/{item.metadata.name}" for item in items]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(1)


def estimator(session: Any, source: Path, script: str, **kwargs: Any) -> Any:
    """A 2-host ``PyTorch`` estimator of ``session`` running ``script`` (written to
    ``source/train.py``), its model to :data:`S3_BUCKET` unless ``kwargs`` say otherwise."""
    from smlaunch import PyTorch

    (source / "train.py").write_text(script)
    arguments: dict[str, Any] = {
        "entry_point": "train.py",
        "source_dir": str(source),
        "role": "arn:aws:iam::000000000000:role/test",
        "instance_type": "ml.c5.xlarge",
        "instance_count": 2,
        "framework_version": "2.1.0",
        "py_version": "py310",
        "output_path": f"s3://{S3_BUCKET}/out",
        "sagemaker_session": session,
    }
    return PyTorch(**{**arguments, **kwargs})


def fit_to_completion(job: Any, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """``job.fit()``, its log printed whatever happens; the job's description (it must be
    Completed) and its log."""
    try:
        job.fit()
    finally:
        logs = capsys.readouterr().out
        print(logs)
    description = job.latest_training_job.describe()
    assert description["TrainingJobStatus"] == "Completed", (description.get("FailureReason"), logs[-4000:])
    return description, logs


def model_members(s3_client: Any, description: dict[str, Any]) -> dict[str, bytes]:
    """The files of a job's ``model.tar.gz`` in :data:`S3_BUCKET`, by name."""
    key = description["ModelArtifacts"]["S3ModelArtifacts"].split(f"s3://{S3_BUCKET}/", 1)[1]
    archive = s3_client.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
