"""The README's quickstart, run exactly as a user runs it: 2 emulated hosts x 2 DDP ranks."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_trains_to_95_percent_and_prints_the_model_artifact(tmp_path: Path) -> None:
    env = dict(os.environ, SMLAUNCH_HOME=str(tmp_path))
    try:
        result = subprocess.run(
            [sys.executable, str(REPO / "examples" / "quickstart" / "run.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
        )
    finally:
        kill_leftover_jobs(tmp_path / "jobs")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = re.search(r"^Model artifact: (file://\S+/output/model\.tar\.gz)$", result.stdout, re.M)
    assert found, result.stdout[-2000:]
    model_tar = Path(found.group(1).removeprefix("file://"))
    job_name = model_tar.parent.parent.name
    with tarfile.open(model_tar) as tar:
        assert tar.getnames() == ["model.pt"]
        weights = tar.extractfile("model.pt").read()  # type: ignore[union-attr]
    import torch

    state = torch.load(io.BytesIO(weights), weights_only=True)
    assert state["0.weight"].shape == (128, 64)
    with tarfile.open(model_tar.with_name("output.tar.gz")) as tar:
        metrics = json.load(tar.extractfile("metrics.json"))  # type: ignore[arg-type]
    assert metrics["world_size"] == 4
    assert metrics["test_accuracy"] >= 0.95
    for prefix in ("[algo-1/rank 0]", "[algo-2] ", "[algo-1] "):
        assert prefix in result.stdout
    assert_no_job_processes(job_name, tmp_path / "jobs" / job_name)
