"""smdistributed.dataparallel scripts run unchanged on emulated hosts: the example (the canonical
SageMaker smddp pattern) on 2 hosts x 2 ranks, and a torch script with ``backend="smddp"``."""

from __future__ import annotations

import io
import json
import os
import runpy
import tarfile
from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._dist_helpers import read_tar_json, run_job
from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs

REPO = Path(__file__).resolve().parents[2]

TORCH_BACKEND_SMDDP = """
import json, os
import torch
import torch.distributed as dist
import smdistributed.dataparallel.torch.torch_smddp  # registers the "smddp" backend

dist.init_process_group(backend="smddp")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
torch.manual_seed(rank)  # different data per rank; DDP averages the gradients
model(torch.randn(4, 3)).sum().backward()
grad = model.module.weight.grad.clone()
grads = [torch.zeros_like(grad) for _ in range(world)]
dist.all_gather(grads, grad)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as handle:
        json.dump({"backend": dist.get_backend(), "sum": t.item(), "world": world,
                   "grads_equal": all(torch.allclose(g, grads[0]) for g in grads)}, handle)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torch_distributed_with_backend_smddp(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        TORCH_BACKEND_SMDDP,
        base_name="backend-smddp",
        instance_count=2,
        instance_type="ml.p3.16xlarge",
        processes_per_host=1,
        distribution={"torch_distributed": {"enabled": True}},
    )
    assert run.status == contract.STATUS_COMPLETED, run.reason + run.log[-3000:]
    result = read_tar_json(run.tar_members(), "result.json")
    assert result == {"backend": "smddp", "sum": 3.0, "world": 2, "grads_equal": True}


@pytest.mark.slow
def test_smddp_example_trains_on_two_hosts_of_two_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path))
    run_py = runpy.run_path(str(REPO / "examples" / "smddp" / "run.py"))
    try:
        model_data = run_py["main"](epochs=8)
    finally:
        kill_leftover_jobs(tmp_path / "jobs")
    model_tar = Path(model_data.removeprefix("file://"))
    job_name = model_tar.parent.parent.name
    assert_no_job_processes(job_name, tmp_path / "jobs" / job_name)
    with tarfile.open(model_tar) as tar:
        assert tar.getnames() == ["model.pt"]
        weights = tar.extractfile("model.pt").read()  # type: ignore[union-attr]
    import torch

    state = torch.load(io.BytesIO(weights), weights_only=True)
    assert state["layers.0.weight"].shape == (128, 64)
    with tarfile.open(model_tar.with_name("output.tar.gz")) as tar:
        metrics = json.load(tar.extractfile("metrics.json"))  # type: ignore[arg-type]
    assert metrics["world_size"] == 4 and metrics["in_sync"] is True
    assert metrics["batch_size"] == 64  # batch_size //= world_size // 8, guarded below 8 ranks
    assert metrics["test_accuracy"] >= 0.9
    log = (tmp_path / "jobs" / job_name / "logs" / "job.log").read_text()
    assert (
        "[algo-2] launcher: smddp, ranks 2-3 of 4 on host 2 of 2, gloo" in log
        and "[algo-1/rank 0] world size 4" in log
    )
    assert os.environ.get("SMLAUNCH_HOME") == str(tmp_path)
