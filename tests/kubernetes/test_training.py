"""The estimator on the dev cluster: a 2-host x 2-rank torch_distributed job through
KubernetesSession, from fit() to model.tar.gz in S3 (a moto server on 127.0.0.1), and nothing of
the job left afterwards but its record (the root ConfigMap). See docs/kubernetes.md."""

from __future__ import annotations

import io
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from kubernetes import client

from smlaunch import KubernetesSession, PyTorch
from tests.kubernetes.conftest import S3_BUCKET, fit_to_completion, job_objects, model_members

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

STEPS, LR = 5, 0.1

TRAIN = textwrap.dedent(
    """
    import os, torch, torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    x = torch.arange(24, dtype=torch.float32).reshape(8, 3) / 10
    y = x.sum(dim=1, keepdim=True)
    shard = slice(rank * 8 // world, (rank + 1) * 8 // world)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=float(os.environ["SM_HP_LR"]))
    for step in range(int(os.environ["SM_HP_STEPS"])):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[shard]), y[shard]).backward()
        optimizer.step()
    print(f"rank {rank} of {world} on {os.environ['SM_CURRENT_HOST']}: done", flush=True)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
    dist.destroy_process_group()
    """
)


def expected_weights() -> dict[str, torch.Tensor]:
    """Full-batch gradient descent: what averaging four equal shards' gradients computes."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.arange(24, dtype=torch.float32).reshape(8, 3) / 10
    y = x.sum(dim=1, keepdim=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        losses = [torch.nn.functional.mse_loss(model(x[i : i + 2]), y[i : i + 2]) for i in range(0, 8, 2)]
        (sum(losses) / 4).backward()
        optimizer.step()
    return model.state_dict()


def test_two_hosts_two_ranks_torch_distributed_to_model_tar_gz(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s3_client = s3
    (tmp_path / "train.py").write_text(TRAIN)
    session = k8s_session(processes_per_host=2)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path),
        role="arn:aws:iam::000000000000:role/test",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"steps": STEPS, "lr": LR},
        distribution={"torch_distributed": {"enabled": True}},
        output_path=f"s3://{S3_BUCKET}/out",
        sagemaker_session=session,
    )
    started = time.monotonic()
    description, logs = fit_to_completion(estimator, capsys)
    for host, rank in (("algo-1", 0), ("algo-1", 1), ("algo-2", 2), ("algo-2", 3)):
        assert f"[{host}/rank {rank}] rank {rank} of 4 on {host}: done" in logs, logs[-4000:]
    print(f"fit() to Completed in {time.monotonic() - started:.0f} s")

    weights = torch.load(io.BytesIO(model_members(s3_client, description)["model.pt"]))
    for name, value in expected_weights().items():
        torch.testing.assert_close(weights[name], value)

    assert job_objects(api, namespace) == []
