"""Model directories a training script leaves in an odd state still deliver the model.

Real local jobs (process hosts) whose script saves its model as SageMaker scripts do
(``torch.save`` to ``$SM_MODEL_DIR``, and to the literal ``/opt/ml/model`` where the host's mount
namespace provides it) and then leaves beside it: a link loop (``a -> .``, ``b -> .`` and a
``latest`` link to the directory itself), a dangling link, a link to ``/etc``, a unix socket, and,
on both hosts of a two-host job, a FIFO of the same name; every job also leaves a loop in
``$SM_OUTPUT_DATA_DIR``. Each job must end on its own (the pytest timeout only guards the hangs
these cases used to cause), ``Completed``, with the regular files in ``model.tar.gz`` and
``output.tar.gz`` and every skipped entry named in the job log. The jobs run side by side to keep
the suite fast.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import PyTorch, contract
from smlaunch.contract.transfer.uris import local_path
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import kill_leftover_jobs

SCRIPT = """
import argparse, os, socket
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--case")
case = parser.parse_args().case
model_dir = os.environ["SM_MODEL_DIR"]
torch.save({"w": torch.ones(2)}, os.path.join(model_dir, "model.pt"))
os.makedirs(os.path.join(model_dir, "checkpoint-3"))
torch.save({"step": 3}, os.path.join(model_dir, "checkpoint-3", "state.pt"))
if os.path.isdir("/opt/ml/model"):  # the host's tree, seen where SageMaker puts it
    torch.save({"w": torch.zeros(1)}, "/opt/ml/model/literal.pt")
    os.symlink("/opt/ml/model/checkpoint-3", os.path.join(model_dir, "best"))
if case == "loop":
    os.symlink(".", os.path.join(model_dir, "a"))
    os.symlink(".", os.path.join(model_dir, "b"))
    os.symlink(model_dir, os.path.join(model_dir, "latest"))
elif case == "dangling":
    os.symlink("checkpoint-9", os.path.join(model_dir, "checkpoint-latest"))
elif case == "etc":
    os.symlink("/etc", os.path.join(model_dir, "etc"))
elif case == "socket":
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(model_dir, "ipc.sock"))  # left behind, as a crashed server leaves it
elif case == "fifo":
    os.mkfifo(os.path.join(model_dir, "progress.pipe"))  # the same name on every host
output_data = os.environ["SM_OUTPUT_DATA_DIR"]  # output.tar.gz follows the same rule
with open(os.path.join(output_data, "metrics.json"), "w") as metrics:
    metrics.write("{}")
os.symlink(".", os.path.join(output_data, "again"))
print("saved", flush=True)
"""

CASES = {
    # case: (instance count, the skipped entries and the words naming why)
    "loop": (1, {"a": "loop", "b": "loop", "latest": "loop"}),
    "dangling": (1, {"checkpoint-latest": "dangling"}),
    "etc": (1, {"etc": "outside the directory"}),
    "socket": (1, {"ipc.sock": "a socket"}),
    "fifo": (2, {"progress.pipe": "FIFO"}),
}


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_odd_entries_are_skipped_and_named_and_the_model_is_delivered(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    estimators = {}
    for case, (count, _) in CASES.items():
        estimators[case] = PyTorch(
            entry_point="train.py",
            source_dir=str(tmp_path / "code"),
            role="arn:aws:iam::111122223333:role/r",
            instance_type="ml.c5.xlarge",
            instance_count=count,
            framework_version="2.1.0",
            py_version="py310",
            hyperparameters={"case": case},
            output_path=(tmp_path / "out").as_uri(),
            sagemaker_session=session,
        )
        estimators[case].fit(job_name=f"odd-{case}", wait=False)
    for case, (count, skipped) in CASES.items():
        job = estimators[case].latest_training_job
        assert job is not None
        description = job.wait(logs=False)  # ends on its own; the timeout above only guards a hang
        log = (tmp_path / "jobs" / f"odd-{case}" / "logs" / "job.log").read_text()
        assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, (case, log)
        with tarfile.open(local_path(description["ModelArtifacts"]["S3ModelArtifacts"])) as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert all(m.isfile() for m in members.values()), (case, members)  # no link, no FIFO
        literal = {"literal.pt", "best/state.pt"} if "literal.pt" in members else set()
        assert set(members) == {"model.pt", "checkpoint-3/state.pt", *literal}, case
        output = description["OutputArtifacts"]["S3OutputArtifacts"]
        with tarfile.open(local_path(output)) as tar:
            assert [(m.name, m.isfile()) for m in tar.getmembers()] == [("metrics.json", True)], case
        assert "output/data directory of algo-1: skipped 'again': a link to its own" in log, case
        for name, why in skipped.items():
            for host in (contract.host_name(i) for i in range(count)):
                lines = [
                    line
                    for line in log.splitlines()
                    if f"model directory of {host}: skipped {name!r}" in line
                ]
                assert len(lines) == 1 and why in lines[0], (case, host, name, log)
