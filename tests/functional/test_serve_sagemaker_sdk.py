"""The real SageMaker Python SDK v2 against ``smlaunch serve``: ``PyTorch(...).fit()`` with 2 hosts
x 2 ranks, its code and model in an S3 API (moto's server), its logs streamed from the server's
CloudWatch Logs calls, ending with ``model_data`` set, exactly as against SageMaker. Nothing of the
SDK is patched: its clients are pointed at the endpoints (``sagemaker_client=``, botocore's
``AWS_ENDPOINT_URL_<SERVICE>`` variables)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.functional._local_helpers import kill_leftover_jobs
from tests.functional._serve_helpers import BUCKET, KEY_ID, REGION, SECRET, MotoS3, Server

pytestmark = pytest.mark.slow

SCRIPT = """
import os
rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
print(f"rank {rank} of {world} on {os.environ['SM_CURRENT_HOST']}", flush=True)
if rank == "0":
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"), "w") as f:
        f.write("weights")
"""


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, MotoS3]]:
    s3 = MotoS3()
    server = Server(
        tmp_path_factory.mktemp("serve"),
        s3.url,
        max_concurrent_jobs=2,
        extra_args=["--processes-per-host", "2"],
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _serving(server, s3, monkeypatch)


def _serving(server: Server, s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, MotoS3]]:
    try:
        server.start()
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", server.url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH", server.url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", s3.url)
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield server, s3
    finally:
        server.stop()
        kill_leftover_jobs(server.store)
        s3.stop()


def test_pytorch_fit_two_hosts_two_ranks_to_model_data(
    endpoints: tuple[Server, MotoS3], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sagemaker
    from sagemaker.pytorch import PyTorch

    server, s3 = endpoints
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    boto_session = boto3.Session(aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name=REGION)
    session = sagemaker.Session(
        boto_session=boto_session,
        sagemaker_client=boto_session.client("sagemaker", endpoint_url=server.url),
        default_bucket=BUCKET,
        sagemaker_config={
            "SchemaVersion": "1.0",
            "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
        },
    )
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::123456789012:role/SageMakerRole",
        instance_type="ml.g5.xlarge",  # the SDK runs torch_distributed on GPUs only: emulated here
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        metric_definitions=[{"Name": "world", "Regex": "rank 0 of ([0-9]+)"}],
        disable_profiler=True,
        debugger_hook_config=False,
        sagemaker_session=session,
    )
    estimator.fit(job_name="sdk-fit", logs="All")

    printed = capsys.readouterr().out
    for rank in range(4):
        assert printed.count(f"rank {rank} of 4 on algo-{rank // 2 + 1}") == 1, printed  # streamed once
    assert estimator.model_data == f"s3://{BUCKET}/sdk-fit/output/model.tar.gz"
    assert s3.client.head_object(Bucket=BUCKET, Key="sdk-fit/output/model.tar.gz")["ContentLength"] > 0
    frame = estimator.training_job_analytics.dataframe()  # CloudWatch's GetMetricStatistics, in CBOR
    assert frame["metric_name"].tolist() == ["world"] and frame["value"].tolist() == [4.0]


def test_smlaunch_session_with_endpoint_url(endpoints: tuple[Server, MotoS3], tmp_path: Path) -> None:
    """smlaunch's own ``Session(endpoint_url=...)``: its SageMaker backend, unchanged, against the server."""
    from smlaunch import PyTorch, Session

    server, s3 = endpoints
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    boto_session = boto3.Session(aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name=REGION)
    session = Session(
        boto_session=boto_session, endpoint_url=server.url, default_bucket=BUCKET, sagemaker_config={}
    )
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::123456789012:role/SageMakerRole",
        instance_type="ml.g5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        sagemaker_session=session,
    )
    estimator.fit(job_name="smlaunch-session", logs=True)
    assert estimator.model_data == f"s3://{BUCKET}/smlaunch-session/output/model.tar.gz"
    assert (
        s3.client.head_object(Bucket=BUCKET, Key="smlaunch-session/output/model.tar.gz")["ContentLength"] > 0
    )
