"""The smddp example (``examples/smddp``: SageMaker's smdistributed.dataparallel script on the
digits) on the dev cluster: 2 host pods x 2 ranks through ``KubernetesSession``, against the same
cell on the process executor. Same status, same artifact members, the same metrics and weights;
nothing of the Kubernetes job left but its record (the root ConfigMap)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from kubernetes import client

from smlaunch import KubernetesSession, LocalSession, PyTorch, contract
from tests.kubernetes.conftest import S3_BUCKET, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def smddp_cell(session: Any, **kwargs: Any) -> PyTorch:
    """``examples/smddp/run.py``'s estimator (5 epochs, as the Docker parity test runs it)."""
    return PyTorch(
        entry_point="train.py",
        source_dir=str(REPO / "examples" / "smddp"),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        hyperparameters={"epochs": 5, "batch-size": 64, "lr": 3e-3},
        base_job_name="smddp-digits",
        sagemaker_session=session,
        **kwargs,
    )


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_smddp_example_on_two_host_pods_matches_the_process_executor(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
) -> None:
    on_cluster = smddp_cell(k8s_session(processes_per_host=2), output_path=f"s3://{S3_BUCKET}/smddp")
    on_cluster.fit(wait=False)  # the process run goes meanwhile: the two share this machine's cores
    local = smddp_cell(LocalSession(root=tmp_path / "jobs", processes_per_host=2))
    local.fit(logs=False)
    described = on_cluster.latest_training_job.wait(logs=False)
    log = "\n".join(on_cluster.sagemaker_session.backend().log_lines(on_cluster.latest_training_job.name))
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == (
        contract.STATUS_COMPLETED,
        contract.SECONDARY_COMPLETED,
    ), (described.get("FailureReason"), log[-4000:])
    assert "[algo-1/rank 0] world size 4, 2 rank(s) per host" in log, log[-4000:]

    def s3_members(uri: str) -> dict[str, bytes]:
        key = uri.split(f"s3://{S3_BUCKET}/", 1)[1]
        return members(s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read())

    def file_members(uri: str) -> dict[str, bytes]:
        return members(Path(uri.removeprefix("file://")).read_bytes())

    models = {"kubernetes": s3_members(on_cluster.model_data), "process": file_members(local.model_data)}
    outputs = {
        "kubernetes": s3_members(on_cluster.model_data.replace("model.tar.gz", "output.tar.gz")),
        "process": file_members(local.model_data.replace("model.tar.gz", "output.tar.gz")),
    }
    assert sorted(models["kubernetes"]) == sorted(models["process"]) == ["model.pt"]
    assert sorted(outputs["kubernetes"]) == sorted(outputs["process"])
    metrics = {where: json.loads(files["metrics.json"]) for where, files in outputs.items()}
    assert metrics["kubernetes"] == metrics["process"], metrics
    assert metrics["kubernetes"]["world_size"] == 4 and metrics["kubernetes"]["in_sync"] is True

    weights = {
        where: torch.load(io.BytesIO(files["model.pt"]), weights_only=True) for where, files in models.items()
    }
    assert weights["kubernetes"].keys() == weights["process"].keys()
    for key, value in weights["kubernetes"].items():
        torch.testing.assert_close(value, weights["process"][key], atol=1e-5, rtol=1e-5)

    assert job_objects(api, namespace) == []
