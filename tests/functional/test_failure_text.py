"""A failing rank's whole traceback, longer than SageMaker's 1,024-character FailureReason, is kept
in a local describe() and in the exception; only the failure file (the wire form) is cut."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import job_request, kill_leftover_jobs, make_spec

# A SageMaker-style script whose traceback runs through 61 frames (several thousand characters;
# two alternating functions, so Python does not fold the frames into "Previous line repeated").
DEEP_FAILURE = """
import argparse, os

def encoder_block(depth, batch):
    if depth == 30:
        raise RuntimeError(f"CUDA out of memory on {os.environ['SM_CURRENT_HOST']}: tried to allocate "
                           f"{batch * 512} MiB while training the transformer block stack")
    return attention(depth, batch)

def attention(depth, batch):
    return encoder_block(depth + 1, batch)

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64)
args, _ = parser.parse_known_args()
print("training", flush=True)
encoder_block(0, args.batch_size)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def test_a_traceback_longer_than_1024_characters_is_kept_whole(tmp_path: Path) -> None:
    backend = LocalSession(tmp_path / "jobs").backend()
    spec = make_spec(tmp_path, "deep-failure", DEEP_FAILURE, instance_count=1)
    backend.submit(job_request(spec))
    with pytest.raises(JobFailedError) as failed:
        TrainingJob(backend, "deep-failure").wait(logs=False)
    reason = backend.describe("deep-failure")["FailureReason"]
    assert len(reason) > contract.FAILURE_REASON_MAX_CHARS
    assert reason.count("in encoder_block") == 31 and reason.count("in attention") == 30  # every frame
    assert "Traceback (most recent call last):" in reason
    assert reason.rstrip().endswith("while training the transformer block stack")
    assert reason in str(failed.value)
    wire = (backend.job_dir("deep-failure").path / "hosts" / "algo-1" / "output" / "failure").read_text()
    assert len(wire) <= contract.FAILURE_REASON_MAX_CHARS
    assert set(wire.splitlines()) - set(reason.splitlines()) == {
        next(line for line in wire.splitlines() if line.startswith("... ("))
    }
