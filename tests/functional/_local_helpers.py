"""Helpers for the local backend's functional tests: real job specs, real tarballs, process checks.

``make_spec`` builds a CreateTrainingJob request the way SDK v2 encodes it (JSON-text hyperparameter
values, script-mode keys, ``sagemaker_torch_distributed_enabled`` for DDP) around a real
``sourcedir.tar.gz``, and ``job_request`` hands it over with its strategy, so the backend is
exercised on exactly what the estimator would submit.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from smlaunch import contract
from smlaunch.contract.archive import create_tarball
from smlaunch.sdk.backends.base import Backend
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.distribution import Distribution
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

WAIT_SECONDS = 90


def make_spec(
    tmp_path: Path,
    job_name: str,
    script: str,
    *,
    instance_count: int = 2,
    instance_type: str = "ml.c5.xlarge",
    ddp: bool = False,
    hyperparameters: dict[str, Any] | None = None,
    inputs: dict[str, str] | None = None,
    max_run: int = 600,
    output_path: str | None = None,
) -> TrainingJobSpec:
    source = tmp_path / f"src-{job_name}"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(textwrap.dedent(script))
    tarball = tmp_path / "code" / job_name / "source" / contract.SOURCEDIR_TARBALL
    create_tarball([(source / "train.py", "train.py")], tarball)
    hps: dict[str, str] = {key: json.dumps(value) for key, value in (hyperparameters or {}).items()}
    hps.update(
        {
            contract.HP_PROGRAM: json.dumps("train.py"),
            contract.HP_SUBMIT_DIRECTORY: json.dumps(tarball.as_uri()),
            contract.HP_LOG_LEVEL: "20",
            contract.HP_JOB_NAME: json.dumps(job_name),
            contract.HP_REGION: json.dumps("local"),
        }
    )
    if ddp:
        hps[contract.HP_TORCH_DISTRIBUTED_ENABLED] = "true"
        hps[contract.HP_INSTANCE_TYPE] = json.dumps(instance_type)
    channels = [
        {"ChannelName": name, "DataSource": {"S3DataSource": {"S3Uri": uri}}}
        for name, uri in (inputs or {}).items()
    ]
    return TrainingJobSpec(
        TrainingJobName=job_name,
        AlgorithmSpecification={"TrainingImage": "smlaunch-local", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": output_path or (tmp_path / "out").as_uri()},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": instance_count},
        StoppingCondition={"MaxRuntimeInSeconds": max_run},
        HyperParameters=hps,
        InputDataConfig=channels or None,
    )


def job_request(spec: TrainingJobSpec) -> JobRequest:
    """``spec`` as the estimator hands it to a backend: beside the strategy of the distribution its
    hyperparameters encode (these tests write the wire keys themselves, the estimator knows it)."""
    return JobRequest(spec, Distribution.from_hyperparameters(hp.decode(spec.HyperParameters)).strategy)


def job_processes(job_name: str, job_dir: Path | None = None) -> list[psutil.Process]:
    """Every live process that belongs to the job: by TRAINING_JOB_NAME in its environment, or by
    the job directory on its command line (the agent)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if job_dir is not None and str(job_dir) in cmdline:
                found.append(proc)
                continue
            if proc.environ().get(contract.TRAINING_JOB_NAME_ENV) == job_name:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_no_job_processes(job_name: str, job_dir: Path | None = None, settle: float = 5.0) -> None:
    """No process of the job remains (allowing ``settle`` seconds for exits already under way)."""
    deadline = time.monotonic() + settle
    while True:
        left = job_processes(job_name, job_dir)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes left behind: {describe_processes(left)}"


def describe_processes(procs: list[psutil.Process]) -> str:
    """What a process left behind is doing, for the failure message: its command line, state and
    signal masks, and for each thread its name, state, the kernel function it sleeps in and the
    system call it is blocked in (``/proc``; what can be read)."""
    lines = []
    for proc in procs:
        root = Path(f"/proc/{proc.pid}")
        try:
            status = dict(
                line.split(":\t", 1) for line in (root / "status").read_text().splitlines() if ":\t" in line
            )
            lines.append(
                f"{proc.pid} {proc.cmdline()} state={status.get('State')} ppid={status.get('PPid')} "
                f"SigPnd={status.get('SigPnd')} ShdPnd={status.get('ShdPnd')} SigBlk={status.get('SigBlk')} "
                f"SigCgt={status.get('SigCgt')}"
            )
            for task in sorted((root / "task").iterdir()):
                fields = {}
                for name in ("comm", "wchan", "syscall"):
                    with contextlib.suppress(OSError):
                        fields[name] = (task / name).read_text().strip()
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                lines.append(f"  thread {task.name} {fields} state={state}")
        except (OSError, psutil.Error) as error:
            lines.append(f"{proc.pid}: {error}")
    return "\n".join(lines)


def wait_terminal(backend: Backend, job_name: str, timeout: float = WAIT_SECONDS) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        description = backend.describe(job_name)
        if description["TrainingJobStatus"] in contract.TERMINAL_STATUSES:
            return description
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_name} not terminal after {timeout} s: {description}")
        time.sleep(0.1)


def wait_for_line(backend: Backend, job_name: str, needle: str, timeout: float = WAIT_SECONDS) -> None:
    """Block until a line containing ``needle`` is in the job log (e.g. the script reached a point)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in line for line in backend.log_lines(job_name)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared in the log of {job_name}")


def local_pytorch(src: Path, root: Path, **kwargs: Any) -> Any:
    """A one-host local ``PyTorch`` estimator running ``src/train.py`` with its jobs under ``root``."""
    from smlaunch import LocalSession, PyTorch

    return PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local",
        instance_count=1,
        hyperparameters={"epochs": 1},
        sagemaker_session=LocalSession(root=root),
        **kwargs,
    )


def kill_leftover_jobs(root: Path) -> None:
    """Test teardown: SIGKILL the agent of every job under ``root`` that is still running (its hosts
    die with it), so a failing test never leaves processes behind for the next one."""
    for agent_file in root.glob("*/agent.json"):
        job_dir = agent_file.parent
        try:
            agent = json.loads(agent_file.read_text())
            proc = psutil.Process(int(agent["pid"]))
            if abs(proc.create_time() - float(agent["create_time"])) < 1.0:
                proc.kill()
        except (psutil.Error, OSError, ValueError, KeyError):
            pass
        for proc in job_processes(job_dir.name, job_dir):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def host_trees(tmp_path: Path, n: int) -> list[tuple[int, contract.Paths]]:
    """``n`` emulated hosts' ``/opt/ml`` trees under ``tmp_path``, as the channel stagers take them."""
    hosts = []
    for i in range(n):
        paths = contract.Paths(tmp_path / contract.host_name(i))
        for directory in paths.directories():
            directory.mkdir(parents=True, exist_ok=True)
        hosts.append((i, paths))
    return hosts


def _dummy_credentials(monkeypatch: Any) -> None:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)


@contextlib.contextmanager
def moto_s3_in_process(monkeypatch: Any, bucket: str) -> Iterator[Any]:
    """An S3 API mocked inside this process only (moto), with dummy credentials in the environment
    and ``bucket`` created; for checks that never leave the test process."""
    import boto3
    from moto import mock_aws

    _dummy_credentials(monkeypatch)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        yield client


@contextlib.contextmanager
def moto_s3_server(monkeypatch: Any, bucket: str) -> Iterator[Any]:
    """A real S3 API on 127.0.0.1 (moto server), reachable from a job's own processes.

    Sets dummy credentials and a region in the environment (through ``monkeypatch``) and yields a
    boto3 client for the server with ``bucket`` created; the server stops on exit.
    """
    import boto3
    from moto.server import ThreadedMotoServer

    _dummy_credentials(monkeypatch)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        yield client
    finally:
        server.stop()
