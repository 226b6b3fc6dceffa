"""A real ``smlaunch serve`` process on 127.0.0.1 for the tests (and the benchmark): its store, its
key pair, an S3 API beside it (moto's server) and signed boto3 clients for it."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from smlaunch import contract
from smlaunch.contract.archive import create_tarball

ROOT = Path(__file__).resolve().parents[2]
KEY_ID = "AKSLTESTKEY"
SECRET = "serve-test-secret-not-for-logs"
REGION = "us-west-2"
BUCKET = "serve-bucket"
MOTO_KEYS = {"AWS_ACCESS_KEY_ID": "moto", "AWS_SECRET_ACCESS_KEY": "moto"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoS3:
    """moto's server on 127.0.0.1 (a thread of this process), with :data:`BUCKET` made."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.client = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="moto",
            aws_secret_access_key="moto",
        )
        try:
            self.client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            pass  # moto's state is the process's: an earlier server of this process made it

    def stop(self) -> None:
        self._server.stop()


@dataclass
class Server:
    """One ``smlaunch serve`` process; :meth:`start` (again, after :meth:`kill`) on the same store."""

    tmp: Path
    s3_url: str
    max_concurrent_jobs: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    store_dir: Path | None = None
    """Where the server keeps its jobs: ``tmp/store`` unless the platform decides (Slurm's)."""
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def store(self) -> Path:
        return self.store_dir or self.tmp / "store"

    @property
    def credentials(self) -> Path:
        return self.tmp / "credentials"

    @property
    def log(self) -> Path:
        return self.tmp / "server.log"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SMLAUNCH_"))}
        env.update(
            MOTO_KEYS, AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL_S3=self.s3_url, PYTHONPATH=str(ROOT)
        )
        env.update(AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
        env.update(self.extra_env)
        return env

    def start(self) -> str:
        if not self.credentials.exists():
            self.credentials.write_text(
                f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
            )
            self.credentials.chmod(0o600)
        command = [
            sys.executable,
            "-m",
            "smlaunch.sdk.cli.main",
            "serve",
            "--port",
            "0",
            *([] if self.store_dir else ["--store", str(self.store)]),
            "--credentials",
            str(self.credentials),
            "--max-concurrent-jobs",
            str(self.max_concurrent_jobs),
            *self.extra_args,
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=self.environment())
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        assert line.startswith("http://127.0.0.1:"), f"no endpoint from the server: {self.log.read_text()}"
        self.url = line
        return line

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing of the server's own shutdown runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self, service: str = "sagemaker", **kwargs: Any) -> Any:
        options: dict[str, Any] = {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}
        options.update(kwargs)
        return boto3.client(service, endpoint_url=self.url, region_name=REGION, **options)


def upload_code(s3: Any, tmp: Path, name: str, script: str) -> str:
    """``script`` as ``train.py`` in a ``sourcedir.tar.gz`` on S3; its URI."""
    source = tmp / f"src-{name}"
    source.mkdir(parents=True, exist_ok=True)
    (source / "train.py").write_text(script)
    tarball = tmp / f"code-{name}.tar.gz"
    create_tarball([(source / "train.py", "train.py")], tarball)
    key = f"code/{name}/sourcedir.tar.gz"
    s3.upload_file(str(tarball), BUCKET, key)
    return f"s3://{BUCKET}/{key}"


def create_request(name: str, code: str, instance_count: int = 1, **changes: Any) -> dict[str, Any]:
    """A CreateTrainingJob request as SDK v2 sends it for script mode."""
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "smlaunch-local", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/R",
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/out"},
        "ResourceConfig": {
            "InstanceType": "ml.c5.xlarge",
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 1,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "HyperParameters": {
            contract.HP_PROGRAM: json.dumps("train.py"),
            contract.HP_SUBMIT_DIRECTORY: json.dumps(code),
        },
    }
    request.update(changes)
    return request


def wait_status(client: Any, name: str, statuses: set[str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        described: dict[str, Any] = client.describe_training_job(TrainingJobName=name)
        if described["TrainingJobStatus"] in statuses or described.get("SecondaryStatus") in statuses:
            return described
        assert time.monotonic() < deadline, f"{name} never reached {statuses}: {described}"
        time.sleep(0.2)
