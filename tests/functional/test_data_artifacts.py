"""Artifacts extras of local runs: uncompressed model upload (disable_output_compression) and
intermediate output synced while the job runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from estimator.session import LocalSession
from estimator.spec import OutputDataConfig
from runtime import contract
from tests.functional._local_helpers import kill_leftover_jobs, make_spec, wait_terminal

SCRIPT = """
import argparse, os, pathlib, time
parser = argparse.ArgumentParser()
parser.add_argument("--synced-to")
args = parser.parse_args()
host = os.environ["SM_CURRENT_HOST"]
pathlib.Path(os.environ["SM_MODEL_DIR"], f"weights-{host}.bin").write_bytes(host.encode())
(pathlib.Path(os.environ["SM_MODEL_DIR"]) / "sub").mkdir()
pathlib.Path(os.environ["SM_MODEL_DIR"], "sub", "config.json").write_text("{}")
if host == "algo-1":
    pathlib.Path(os.environ["SM_OUTPUT_INTERMEDIATE_DIR"], "progress.txt").write_text("epoch 1")
    # The copy must reach the output path while this script still runs.
    target = pathlib.Path(args.synced_to) / "progress.txt"
    deadline = time.time() + 30
    while not target.exists():
        if time.time() > deadline:
            raise SystemExit("intermediate output was not synced while the job ran")
        time.sleep(0.05)
    print("intermediate output synced while running", flush=True)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.timeout(120)
def test_uncompressed_model_and_live_intermediate_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    intermediate = out / "raw-job" / "output" / "intermediate"
    spec = make_spec(tmp_path, "raw-job", SCRIPT, instance_count=2,
                     hyperparameters={"synced-to": str(intermediate)})
    spec = spec.model_copy(update={"OutputDataConfig": OutputDataConfig(S3OutputPath=out.as_uri(),
                                                                        CompressionType="NONE")})
    backend = LocalSession(tmp_path / "jobs", stop_grace_seconds=2).backend()
    backend.submit(spec)
    description = wait_terminal(backend, "raw-job")
    log = "\n".join(backend.log_lines("raw-job"))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    assert "intermediate output synced while running" in log
    model_uri = description["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_uri == (out / "raw-job" / "output").as_uri() + "/model/"
    model = out / "raw-job" / "output" / "model"
    files = {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert files == {"weights-algo-1.bin": b"algo-1", "weights-algo-2.bin": b"algo-2",
                     "sub/config.json": b"{}"}
    assert not any(p.is_symlink() for p in model.rglob("*")), "uploaded files must be real copies"
    assert not (out / "raw-job" / "output" / "model.tar.gz").exists()
    assert (intermediate / "progress.txt").read_text() == "epoch 1"
