"""``smlaunch serve --platform slurm``: boto3's CreateTrainingJob runs on the real two-node test
cluster (``conftest.py``), 2 hosts on 2 nodes, to its model in an S3 API (moto's server), and its
hosts' logs read back through the server's CloudWatch Logs calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional._serve_helpers import MotoS3, Server, create_request, upload_code, wait_status
from tests.slurm._cluster import Cluster
from tests.slurm.conftest import squeue

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(600)]

HELLO = """
import os, socket
print("hello from", os.environ["SM_CURRENT_HOST"], flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "host.txt"), "w") as f:
    f.write(os.environ["SM_CURRENT_HOST"])
"""


@pytest.fixture
def slurm_server(slurm_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Server, MotoS3]]:
    s3 = MotoS3()
    shared = tmp_path / "shared"
    shared.mkdir()
    # Slurm's hosts never get the submitter's secret keys (the backend strips them): they read
    # a credentials file, as the nodes of a real cluster use their own
    node_credentials = tmp_path / "node-credentials"
    node_credentials.write_text("[default]\naws_access_key_id = moto\naws_secret_access_key = moto\n")
    server = Server(
        tmp_path,
        s3.url,
        max_concurrent_jobs=2,
        extra_env={
            "SLURM_CONF": str(slurm_cluster.conf),
            "AWS_SHARED_CREDENTIALS_FILE": str(node_credentials),
        },
        extra_args=["--platform", "slurm", "--slurm-shared-dir", str(shared)],
        store_dir=shared / "jobs",
    )
    try:
        server.start()
        yield server, s3
    finally:
        server.stop()
        for name in ("on-slurm",):
            if squeue(slurm_cluster, name):
                slurm_cluster.run("scancel", f"--name={name}")
        s3.stop()


def test_a_boto3_job_runs_on_the_slurm_cluster(slurm_server: tuple[Server, MotoS3]) -> None:
    server, s3 = slurm_server
    sm, logs = server.client(), server.client("logs")
    code = upload_code(s3.client, server.tmp, "hello", HELLO)
    sm.create_training_job(**create_request("on-slurm", code, 2))
    described = wait_status(sm, "on-slurm", {"Completed", "Failed", "Stopped"}, timeout=300)
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    assert (
        s3.client.head_object(Bucket="serve-bucket", Key="out/on-slurm/output/model.tar.gz")["ContentLength"]
        > 0
    )
    group = "/aws/sagemaker/TrainingJobs"
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="on-slurm/")["logStreams"]
    assert len(streams) == 2
    events = logs.get_log_events(
        logGroupName=group, logStreamName=streams[1]["logStreamName"], startFromHead=True
    )
    assert any("hello from algo-2" in e["message"] for e in events["events"])
