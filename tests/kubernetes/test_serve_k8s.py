"""``smlaunch serve --platform kubernetes``: boto3's CreateTrainingJob runs on the dev cluster, 2 host
pods, to its model in an S3 API (a moto server the pods reach on the host network), described to
Completed through the server, each host's log read back through its CloudWatch Logs calls;
``--instance-type-platform TYPE=kubernetes`` beside the local default. The job's record is its root
ConfigMap; nothing else of it is left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.functional._serve_helpers import BUCKET, MotoS3, Server, create_request, upload_code, wait_status
from tests.kubernetes.conftest import DevCluster, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(600)]

HELLO = """
import os
print("hello from", os.environ["SM_CURRENT_HOST"], flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], os.environ["SM_CURRENT_HOST"] + ".txt"), "w") as f:
    f.write(os.environ["SM_CURRENT_HOST"])
"""


@pytest.fixture
def k8s_server(
    k8s_cluster: DevCluster, core: client.CoreV1Api, namespace: str, image: str, tmp_path: Path
) -> Iterator[tuple[Server, MotoS3]]:
    s3 = MotoS3()
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="aws"),
            string_data={
                "AWS_ACCESS_KEY_ID": "moto",
                "AWS_SECRET_ACCESS_KEY": "moto",
                "AWS_DEFAULT_REGION": "us-west-2",
            },
        ),
    )
    server = Server(
        tmp_path,
        s3.url,
        max_concurrent_jobs=2,
        extra_args=[
            "--platform",
            "local",
            "--instance-type-platform",
            "ml.c5.xlarge=kubernetes",
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            "--kubernetes-namespace",
            namespace,
            "--kubernetes-image",
            image,
            "--kubernetes-image-pull-policy",
            "Never",
            "--kubernetes-resources",
            "off",
            "--kubernetes-s3-endpoint",
            s3.url,
            "--kubernetes-credentials-secret",
            "aws",
            "--kubernetes-host-network",
        ],
    )
    try:
        server.start()
        yield server, s3
    finally:
        server.stop()
        s3.stop()


def test_a_boto3_job_runs_on_the_cluster(
    api: client.ApiClient, namespace: str, k8s_server: tuple[Server, MotoS3]
) -> None:
    server, s3 = k8s_server
    sm = server.client()
    code = upload_code(s3.client, server.tmp, "hello", HELLO)
    sm.create_training_job(**create_request("on-k8s", code, 2))
    described = wait_status(sm, "on-k8s", {"Completed", "Failed", "Stopped"}, timeout=240)
    assert described["TrainingJobStatus"] == "Completed", (
        described.get("FailureReason"),
        server.log.read_text()[-3000:],
    )
    assert described["TrainingJobArn"].endswith(":training-job/on-k8s")
    model = described["ModelArtifacts"]["S3ModelArtifacts"]
    assert model == f"s3://{BUCKET}/out/on-k8s/output/model.tar.gz", model
    assert s3.client.head_object(Bucket=BUCKET, Key="out/on-k8s/output/model.tar.gz")["ContentLength"] > 0
    # the cluster has the job's record, the store has nothing of it
    assert client.CoreV1Api(api).read_namespaced_config_map("on-k8s", namespace).data
    assert not (server.store / "on-k8s").exists()
    listed = sm.list_training_jobs()["TrainingJobSummaries"]
    assert [(j["TrainingJobName"], j["TrainingJobStatus"]) for j in listed] == [("on-k8s", "Completed")]
    group = "/aws/sagemaker/TrainingJobs"  # each host's lines of the job log, as a stream
    logs = server.client("logs")
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="on-k8s/")["logStreams"]
    assert [s["logStreamName"].rsplit("-", 1)[0] for s in streams] == ["on-k8s/algo-1", "on-k8s/algo-2"]
    events = logs.get_log_events(
        logGroupName=group, logStreamName=streams[1]["logStreamName"], startFromHead=True
    )
    messages = [e["message"] for e in events["events"]]
    assert "[algo-2/rank 0] hello from algo-2" in messages, messages
    assert all(m.startswith("[algo-2") for m in messages), messages
    assert job_objects(api, namespace) == []
