"""A real PyTorch Lightning script, unedited, across 2 emulated hosts x 2 ranks:
``Trainer(strategy="ddp", num_nodes=2, devices=2, accelerator="cpu")`` finds its rank, node and world
from the variables the launcher sets, and every one of the 4 ranks trains its shard."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._dist_helpers import read_tar_json, run_job

pytest.importorskip("pytorch_lightning")

LIGHTNING = """
import json, os
import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen = 0

    def training_step(self, batch, _):
        x, y = batch
        self.seen += len(x)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


g = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=g)
y = x.sum(1, keepdim=True)
trainer = pl.Trainer(strategy="ddp", num_nodes=2, devices=2, accelerator="cpu", max_epochs=1,
                     enable_progress_bar=False, enable_model_summary=False, logger=False,
                     enable_checkpointing=False)
model = Model()
trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
weight_sum = model.layer.weight.detach().sum().item()
info = {"global_rank": trainer.global_rank, "world_size": trainer.world_size, "node_rank": trainer.node_rank,
        "local_rank": trainer.local_rank, "host": os.environ["SM_CURRENT_HOST"], "seen": model.seen,
        "weight_sum": weight_sum}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{trainer.global_rank}.json"), "w") as handle:
    json.dump(info, handle)
"""


@pytest.mark.slow
def test_lightning_ddp_across_two_hosts_of_two_ranks(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        LIGHTNING,
        base_name="lightning",
        instance_count=2,
        processes_per_host=2,
        distribution={"torch_distributed": {"enabled": True}},
        timeout=150,
    )
    assert run.status == contract.STATUS_COMPLETED, run.reason + run.log[-3000:]
    members = run.tar_members()
    assert sorted(members) == ["rank0.json", "rank1.json", "rank2.json", "rank3.json"]
    infos = [read_tar_json(members, f"rank{rank}.json") for rank in range(4)]
    for rank, info in enumerate(infos):
        assert info["global_rank"] == rank and info["world_size"] == 4
        assert info["node_rank"] == rank // 2 and info["local_rank"] == rank % 2
        assert info["host"] == f"algo-{rank // 2 + 1}"
        assert info["seen"] == 16  # its DistributedSampler shard: 64 samples / 4 ranks
    assert len({round(i["weight_sum"], 6) for i in infos}) == 1  # DDP kept every replica identical
    assert "All distributed processes registered. Starting with 4 processes" in run.log
