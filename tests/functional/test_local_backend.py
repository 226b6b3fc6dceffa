"""The local backend end to end: real agent, real ``python -m smlaunch.runtime`` per host, real gloo
rendezvous."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from smlaunch import PyTorch, contract
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    moto_s3_server,
    wait_for_line,
    wait_terminal,
)

DDP_SCRIPT = """
import argparse, json, os, pathlib
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
host = os.environ["SM_CURRENT_HOST"]
print(f"sum={total.item()} world={dist.get_world_size()} epochs={args.epochs}", flush=True)
train = pathlib.Path(os.environ["SM_CHANNEL_TRAIN"])
data = (train / "data.csv").read_text()
dist.barrier()
if os.environ["LOCAL_RANK"] == "0":
    pathlib.Path(os.environ["SM_MODEL_DIR"], f"model-{host}.txt").write_text(f"{host} {total.item()} {data}")
    pathlib.Path(os.environ["SM_OUTPUT_DATA_DIR"], f"metrics-{host}.json").write_text(
        json.dumps({"sum": total.item()}))
    # The job may reshape its own view of a channel; the user's directory must not change.
    (train / "data.csv").unlink()
    (train / "sub" / "more.csv").rename(train / "moved.csv")
    (train / "created.txt").write_text("x")
dist.barrier()
dist.destroy_process_group()
"""

STOPPABLE_SCRIPT = """
import os, pathlib, signal, sys, time

def on_term(signum, frame):
    host = os.environ["SM_CURRENT_HOST"]
    pathlib.Path(os.environ["SM_MODEL_DIR"], f"checkpoint-{host}.txt").write_text("saved on SIGTERM")
    print("got SIGTERM, checkpoint saved", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _user_data(tmp_path: Path) -> Path:
    data = tmp_path / "user-data"
    (data / "sub").mkdir(parents=True)
    (data / "data.csv").write_text("1,2,3\n")
    (data / "sub" / "more.csv").write_text("4,5,6\n")
    return data


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _members(uri: str) -> dict[str, bytes]:
    path = Path(uri.removeprefix("file://"))
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.slow
def test_two_hosts_two_ranks_end_to_end(tmp_path: Path) -> None:
    data = _user_data(tmp_path)
    before = _snapshot(data)
    session = LocalSession(tmp_path / "jobs", processes_per_host=2)
    backend = session.backend()
    assert isinstance(backend, LocalBackend)
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(DDP_SCRIPT)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"epochs": 2},
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )
    estimator.fit({"train": data.as_uri()}, logs=False, job_name="e2e-ddp")
    job = estimator.latest_training_job
    assert job is not None
    spec = estimator.plan({"train": data.as_uri()}, job_name="e2e-ddp")
    description = job.describe()

    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED
    assert description["SecondaryStatus"] == contract.SECONDARY_COMPLETED
    statuses = [t["Status"] for t in description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert all(
        isinstance(t["StartTime"], datetime) and isinstance(t["EndTime"], datetime)
        for t in description["SecondaryStatusTransitions"]
    )
    assert isinstance(description["TrainingStartTime"], datetime)
    assert description["TrainingEndTime"] >= description["TrainingStartTime"]
    assert description["BillableTimeInSeconds"] == description["TrainingTimeInSeconds"] >= 0
    assert description["HyperParameters"] == spec.HyperParameters
    assert description["ResourceConfig"]["InstanceCount"] == 2
    model_uri = description["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_uri == f"{(tmp_path / 'out').as_uri()}/e2e-ddp/output/model.tar.gz"
    assert job.model_data == model_uri

    # One model.tar.gz merged from both hosts; every rank saw the 4-rank all_reduce (0+1+2+3).
    model = _members(model_uri)
    assert model == {"model-algo-1.txt": b"algo-1 6.0 1,2,3\n", "model-algo-2.txt": b"algo-2 6.0 1,2,3\n"}
    output = _members(model_uri.replace("model.tar.gz", "output.tar.gz"))
    assert sorted(output) == ["metrics-algo-1.json", "metrics-algo-2.json"]

    lines = list(backend.log_lines(spec.TrainingJobName))
    for host, rank in (("algo-1", 0), ("algo-1", 1), ("algo-2", 2), ("algo-2", 3)):
        assert f"[{host}/rank {rank}] sum=6.0 world=4 epochs=2" in lines
    job_dir = backend.job_dir(spec.TrainingJobName)
    for host in ("algo-1", "algo-2"):
        host_lines = job_dir.host_log(host).read_text().splitlines()
        assert host_lines and all(line.startswith(f"[{host}") for line in host_lines)
        config = json.loads(contract.Paths(job_dir.host_base(host)).resource_config_file.read_text())
        assert config["current_host"] == host
        assert config["hosts"] == ["algo-1", "algo-2"]
        assert config["instance_groups"] == [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "ml.c5.xlarge",
                "hosts": ["algo-1", "algo-2"],
            }
        ]

    # The user's channel directory is byte-for-byte and entry-for-entry unchanged.
    assert _snapshot(data) == before
    assert not any("WARNING" in line for line in lines)
    assert_no_job_processes(spec.TrainingJobName, job_dir.path)


def test_wait_false_then_describe_stream_and_stop_from_a_second_handle(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    submitter = LocalSession(root, stop_grace_seconds=10).backend()
    spec = make_spec(tmp_path, "detached", STOPPABLE_SCRIPT)
    submitter.submit(job_request(spec))  # returns at once: the agent runs the job
    name = spec.TrainingJobName
    assert submitter.describe(name)["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS

    other = LocalSession(root).backend()  # as if from another notebook
    wait_for_line(other, name, "[algo-1/rank 0] ready")
    wait_for_line(other, name, "[algo-2/rank 0] ready")
    handle = TrainingJob(other, name)
    assert handle.status == contract.STATUS_IN_PROGRESS
    handle.stop()
    # As the SDK: a Stopped job ends wait() with a warning, not an exception.
    assert handle.wait(logs=False)["TrainingJobStatus"] == contract.STATUS_STOPPED

    description = other.describe(name)
    assert description["SecondaryStatus"] == contract.SECONDARY_STOPPED
    assert "Stopping" in [t["Status"] for t in description["SecondaryStatusTransitions"]]
    # SIGTERM reached user code on both hosts, which checkpointed into the model directory.
    assert sorted(_members(description["ModelArtifacts"]["S3ModelArtifacts"])) == [
        "checkpoint-algo-1.txt",
        "checkpoint-algo-2.txt",
    ]
    streamed = list(other.log_lines(name, follow=True))  # ends: the job is terminal
    assert "[algo-2/rank 0] got SIGTERM, checkpoint saved" in streamed
    assert_no_job_processes(name, other.job_dir(name).path)


def test_unwritable_output_path_fails_before_anything_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    backend = LocalSession(tmp_path / "jobs").backend()
    spec = make_spec(tmp_path, "no-output", "print('never runs')", output_path=(blocker / "models").as_uri())
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigurationError) as error:
        backend.submit(job_request(spec))
    assert error.value.field == "output_path"
    assert str(blocker / "models") in str(error.value) and "Fix:" in str(error.value)
    assert not backend.job_dir("no-output").path.exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before


def test_missing_file_channel_and_duplicate_job_name_are_refused(tmp_path: Path) -> None:
    backend = LocalSession(tmp_path / "jobs").backend()
    spec = make_spec(tmp_path, "bad-input", "print(1)", inputs={"train": (tmp_path / "nope").as_uri()})
    with pytest.raises(ConfigurationError, match=r"inputs\['train'\]"):
        backend.check(job_request(spec))
    # A directory alone is a name being claimed by another submitter (or an interrupted submit).
    backend.job_dir("taken").path.mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="in progress, or one was interrupted"):
        backend.check(job_request(make_spec(tmp_path, "taken", "print(1)")))
    backend.job_dir("taken").spec_file.write_text("{}")
    with pytest.raises(ConfigurationError, match="job_name"):
        backend.check(job_request(make_spec(tmp_path, "taken", "print(1)")))


def test_in_place_write_through_a_channel_view_is_reported(tmp_path: Path) -> None:
    data = _user_data(tmp_path)
    script = """
    import os, pathlib
    with open(pathlib.Path(os.environ["SM_CHANNEL_TRAIN"]) / "data.csv", "a") as handle:
        handle.write("written by the job\\n")
    """
    backend = LocalSession(tmp_path / "jobs").backend()
    spec = make_spec(tmp_path, "in-place", script, instance_count=1, inputs={"train": data.as_uri()})
    backend.submit(job_request(spec))
    assert wait_terminal(backend, "in-place")["TrainingJobStatus"] == contract.STATUS_COMPLETED
    warnings = [line for line in backend.log_lines("in-place") if "WARNING" in line]
    assert len(warnings) == 1 and str(data / "data.csv") in warnings[0]


CTRL_C_NOTEBOOK = """
import sys
from smlaunch import LocalSession, PyTorch

root, source_dir = sys.argv[1], sys.argv[2]
est = PyTorch(entry_point="train.py", source_dir=source_dir, role="arn:aws:iam::111122223333:role/r",
              instance_type="ml.c5.xlarge", instance_count=2, framework_version="2.1.0", py_version="py310",
              base_job_name="ctrl-c", sagemaker_session=LocalSession(root, stop_grace_seconds=10))
est.fit(wait=False)
print("JOB", est.latest_training_job.name, flush=True)
est.latest_training_job.wait(logs=True)
"""


def test_fit_wait_false_returns_at_once_and_ctrl_c_in_wait_stops_the_job(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(STOPPABLE_SCRIPT)
    notebook = tmp_path / "notebook.py"
    notebook.write_text(CTRL_C_NOTEBOOK)
    root = tmp_path / "jobs"
    proc = subprocess.Popen(
        [sys.executable, str(notebook), str(root), str(source)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        # A notebook answers Ctrl-C even when this suite runs as a background job (whose children
        # inherit SIGINT ignored, so Python would install no KeyboardInterrupt handler).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        created = proc.stdout.readline()  # fit() says the job's name as it creates it
        assert created.startswith("Creating training-job with name: "), created + proc.stderr.read()  # type: ignore[union-attr]
        first = proc.stdout.readline()
        assert first.startswith("JOB "), first + proc.stderr.read()  # type: ignore[union-attr]
        name = first.split()[1]
        backend = LocalSession(root).backend()
        assert backend.describe(name)["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS
        wait_for_line(backend, name, "[algo-1/rank 0] ready")
        wait_for_line(backend, name, "[algo-2/rank 0] ready")
        proc.send_signal(signal.SIGINT)  # Ctrl-C in the notebook while wait() streams the logs
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert f"Interrupted: stopping job {name}" in out
    description = wait_terminal(backend, name)
    assert description["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert sorted(_members(description["ModelArtifacts"]["S3ModelArtifacts"])) == [
        "checkpoint-algo-1.txt",
        "checkpoint-algo-2.txt",
    ]
    assert_no_job_processes(name, backend.job_dir(name).path)


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real S3 API on 127.0.0.1 (moto server), reachable from the job's own processes."""
    with moto_s3_server(monkeypatch, "models") as client:
        yield client


def test_s3_code_and_output_path(tmp_path: Path, moto_s3: Any) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import os, pathlib\n"
        "host = os.environ['SM_CURRENT_HOST']\n"
        "pathlib.Path(os.environ['SM_MODEL_DIR'], f'{host}.txt').write_text(host)\n"
    )
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        output_path="s3://models/out",
        sagemaker_session=LocalSession(tmp_path / "jobs", s3_client=moto_s3),
    )
    estimator.fit(logs=False, job_name="s3-job")
    assert estimator.model_data == "s3://models/out/s3-job/output/model.tar.gz"
    keys = {o["Key"] for o in moto_s3.list_objects_v2(Bucket="models")["Contents"]}
    # As SDK v2 lays it out: code under the output bucket's root, artifacts under output_path.
    assert {
        "s3-job/source/sourcedir.tar.gz",
        "out/s3-job/output/model.tar.gz",
        "out/s3-job/output/output.tar.gz",
    } <= keys
    code_uri = json.loads(
        estimator.latest_training_job.describe()["HyperParameters"]["sagemaker_submit_directory"]
    )
    assert code_uri == "s3://models/s3-job/source/sourcedir.tar.gz"  # each host fetched it from S3
    body = moto_s3.get_object(Bucket="models", Key="out/s3-job/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert sorted(tar.getnames()) == ["algo-1.txt", "algo-2.txt"]
