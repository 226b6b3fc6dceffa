"""PVC storage on the dev cluster: ``KubernetesSession(storage={"pvc": ...})`` with code, a
``file://`` channel and ``output_path`` under the claim's mount path, no S3 anywhere.

The claim is bound statically to a ``hostPath`` PersistentVolume whose directory is the mount path
itself, so the notebook (this process) and every pod see the same files at the same path, as a
shared file system mounted at the same place would give on a real cluster. Two host pods read the
channel from the claim; ``model.tar.gz`` lands on the claim with both hosts' files; nothing of the
job is left but its record, and the volume and claim are deleted at the end.
"""

from __future__ import annotations

import json
import os
import tarfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from smlaunch import KubernetesSession, PyTorch, contract
from tests.kubernetes.conftest import DevCluster, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

BOUND_SECONDS = 60

TRAIN = textwrap.dedent(
    """
    import json, os, sys
    channel = os.environ["SM_CHANNEL_TRAIN"]
    numbers = []
    for name in sorted(os.listdir(channel)):
        numbers += [float(x) for x in open(os.path.join(channel, name)).read().split()]
    host = os.environ["SM_CURRENT_HOST"]
    print(f"{host} read {len(numbers)} numbers from {channel}", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}.json"), "w") as handle:
        json.dump({"host": host, "sum": sum(numbers), "scale": float(os.environ["SM_HP_SCALE"])}, handle)
    os.makedirs(os.environ["SM_OUTPUT_DATA_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], f"{host}.txt"), "w") as handle:
        handle.write(f"{host} done\\n")
    """
)


@pytest.fixture
def claim(core: client.CoreV1Api, namespace: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A PersistentVolumeClaim in the test's namespace, bound to a hostPath PersistentVolume of
    its own (no provisioner: static binding) at a fresh directory, which is also where the pods
    mount it; the claim and the volume are deleted afterwards."""
    directory = tmp_path / "claim"
    directory.mkdir()
    volume = f"smlaunch-test-{uuid.uuid4().hex[:8]}"
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=volume),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=str(directory), type="Directory"),
            ),
        )
    )
    try:
        core.create_namespaced_persistent_volume_claim(
            namespace,
            client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name="training"),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    storage_class_name="",
                    volume_name=volume,
                    resources=client.V1ResourceRequirements(requests={"storage": "1Gi"}),
                ),
            ),
        )
        deadline = time.monotonic() + BOUND_SECONDS
        while core.read_namespaced_persistent_volume_claim("training", namespace).status.phase != "Bound":
            assert time.monotonic() < deadline, f"claim not bound to {volume} after {BOUND_SECONDS}s"
            time.sleep(0.5)
        yield "training", directory
        core.delete_namespaced_persistent_volume_claim("training", namespace)
        deadline = time.monotonic() + BOUND_SECONDS
        while _claim_exists(core, namespace):  # the protection finalizer waits for the pods
            assert time.monotonic() < deadline, "the claim was not deleted"
            time.sleep(0.5)
    finally:
        core.delete_persistent_volume(volume)
        deadline = time.monotonic() + BOUND_SECONDS
        while _exists(core.read_persistent_volume, volume):  # its protection finalizer, the claim's
            assert time.monotonic() < deadline, f"the volume {volume} was not deleted"
            time.sleep(0.5)


def _claim_exists(core: client.CoreV1Api, namespace: str) -> bool:
    return _exists(core.read_namespaced_persistent_volume_claim, "training", namespace)


def _exists(read: Callable[..., Any], *args: str) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_code_channel_and_model_on_a_persistent_volume_claim(
    k8s_cluster: DevCluster,
    api: client.ApiClient,
    namespace: str,
    image: str,
    claim: tuple[str, Path],
) -> None:
    claim_name, mount = claim
    code = mount / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    data = mount / "data" / "train"
    data.mkdir(parents=True)
    (data / "a.txt").write_text("1 2 3\n")
    (data / "b.txt").write_text("10 20\n")
    session = KubernetesSession(
        namespace=namespace,
        kubeconfig=str(k8s_cluster.kubeconfig),
        image=image,
        image_pull_policy="Never",
        resources="off",
        host_network=True,
        storage={"pvc": claim_name, "mount_path": str(mount)},
        stop_grace_seconds=5,
    )
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(code),
        role="arn:aws:iam::000000000000:role/test",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"scale": 0.5},
        output_path=(mount / "out").as_uri(),
        sagemaker_session=session,
    )
    estimator.fit({"train": (mount / "data" / "train").as_uri()}, logs=False)
    handle = estimator.latest_training_job
    description = handle.describe()
    log = "\n".join(session.backend().log_lines(handle.name))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, (
        description.get("FailureReason"),
        log[-4000:],
    )
    for host in ("algo-1", "algo-2"):
        assert f"[{host}/rank 0] {host} read 5 numbers from /opt/ml/input/data/train" in log, log[-4000:]

    model_uri = description["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_uri == (mount / "out" / handle.name / "output" / "model.tar.gz").as_uri()
    with tarfile.open(model_uri.removeprefix("file://")) as tar:
        files = {m.name: json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()}  # type: ignore[arg-type]
    assert files == {
        f"{host}.json": {"host": host, "sum": 36.0, "scale": 0.5} for host in ("algo-1", "algo-2")
    }
    with tarfile.open(model_uri.removeprefix("file://").replace("model.tar.gz", "output.tar.gz")) as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == ["algo-1.txt", "algo-2.txt"]
    staged = list(mount.rglob("sourcedir.tar.gz"))
    assert staged, sorted(str(p) for p in mount.rglob("*"))  # the code went through the claim too
    # The pods ran as this process's user: what they left on the claim is the notebook's own.
    assert Path(model_uri.removeprefix("file://")).stat().st_uid == os.getuid()
    assert job_objects(api, namespace) == []
