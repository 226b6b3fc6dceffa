"""``smlaunch`` on SageMaker jobs, through subprocesses talking to a moto server (``AWS_ENDPOINT_URL``):
run --sagemaker, list --sagemaker, describe / logs / metrics / stop of a name found on SageMaker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.functional._sagemaker_moto import (
    LOG_GROUP,
    REGION,
    ROLE_NAME,
    TRUST_POLICY,
    aws_test_env,
    install_moto_fidelity,
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A moto server with the fidelity patches and a role; yields the environment of a CLI process."""
    from moto.server import ThreadedMotoServer

    aws_test_env(monkeypatch)
    install_moto_fidelity(monkeypatch)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("iam", endpoint_url=endpoint).create_role(
            RoleName=ROLE_NAME, AssumeRolePolicyDocument=TRUST_POLICY
        )
        checkout = str(Path(__file__).resolve().parents[2])  # this checkout, whatever is installed
        yield dict(
            os.environ, AWS_ENDPOINT_URL=endpoint, SMLAUNCH_HOME=str(tmp_path / "home"), PYTHONPATH=checkout
        )
    finally:
        moto.stop()


def smlaunch(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.sdk.cli.main", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_every_command_on_a_sagemaker_job(server: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('loss=0.5')\n")
    started = smlaunch(
        server,
        "run",
        "train.py",
        "--source-dir",
        "src",
        "--sagemaker",
        "--instance-type",
        "ml.m5.xlarge",
        "--instance-count",
        "2",
        "--hp",
        "epochs=3",
        "--metric",
        "train:loss=loss=([0-9.]+)",
        "--job-name",
        "cli-sm",
        "--no-wait",
        cwd=tmp_path,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout == "cli-sm\n"
    assert "Creating training-job with name: cli-sm" in started.stderr

    endpoint = server["AWS_ENDPOINT_URL"]
    logs = boto3.client("logs", endpoint_url=endpoint, region_name=REGION)
    logs.create_log_group(logGroupName=LOG_GROUP)
    now_ms = int(time.time()) * 1000  # CloudWatch drops events older than 14 days
    for host, lines in {
        "algo-1": ["epoch 1 loss=0.9", "epoch 2 loss=0.4"],
        "algo-2": ["epoch 1 loss=0.8"],
    }.items():
        stream = f"cli-sm/{host}-1700000000"
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=[
                {"timestamp": now_ms + i * 1000 + (host == "algo-2") * 500, "message": line}
                for i, line in enumerate(lines)
            ],
        )

    listed = smlaunch(server, "list", "--sagemaker", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:5] == ["cli-sm", "InProgress", "ml.m5.xlarge", "x", "2"]
    as_json = smlaunch(server, "list", "--sagemaker", "--output", "json", cwd=tmp_path)
    (summary,) = json.loads(as_json.stdout)["TrainingJobSummaries"]  # the service's, as it sent it
    assert (summary["TrainingJobName"], summary["TrainingJobStatus"]) == ("cli-sm", "InProgress")
    last = smlaunch(server, "describe", "--last", "--sagemaker", "--query", "TrainingJobName", cwd=tmp_path)
    assert json.loads(last.stdout) == "cli-sm"

    described = smlaunch(server, "describe", "cli-sm", cwd=tmp_path)  # not local: found on SageMaker
    assert described.returncode == 0, described.stderr
    request = json.loads(described.stdout)
    assert request["HyperParameters"]["epochs"] == "3"
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == [
        {"Name": "train:loss", "Regex": "loss=([0-9.]+)"}
    ]

    host2 = smlaunch(server, "logs", "cli-sm", "--host", "algo-2", cwd=tmp_path)
    assert host2.stdout.splitlines() == ["[algo-2] epoch 1 loss=0.8"]

    metrics = smlaunch(server, "metrics", "sagemaker:cli-sm", "--output", "json", cwd=tmp_path)
    assert metrics.returncode == 0, metrics.stderr
    assert json.loads(metrics.stdout) == [  # no CloudWatch datapoints yet: read from the logs
        {"timestamp": 0.0, "metric_name": "train:loss", "value": 0.9, "host": "algo-1"},
        {"timestamp": 0.5, "metric_name": "train:loss", "value": 0.8, "host": "algo-2"},
        {"timestamp": 1.0, "metric_name": "train:loss", "value": 0.4, "host": "algo-1"},
    ]

    stopped = smlaunch(server, "stop", "cli-sm", "--sagemaker", cwd=tmp_path)
    assert stopped.returncode == 0 and "Stopping cli-sm" in stopped.stderr
    assert (
        json.loads(smlaunch(server, "describe", "cli-sm", cwd=tmp_path).stdout)["TrainingJobStatus"]
        == "Stopping"
    )
    refused = smlaunch(server, "rm", "cli-sm", cwd=tmp_path)
    assert refused.returncode == 2 and "SageMaker keeps its jobs' records" in refused.stderr
    unknown = smlaunch(server, "describe", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "no local job of that name" in unknown.stderr
