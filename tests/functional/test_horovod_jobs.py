"""A Horovod PyTorch script written as SageMaker's documentation shows, run unchanged under
``distribution={"mpi": ...}`` on 2 emulated GPU hosts x 2 ranks (OpenMPI, the ``horovod.torch`` shim
on torch.distributed, CUDA emulated on the CPU), trains to the same weights as the same training
under DDP on CPU hosts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._dist_helpers import read_tar_json, run_job

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun"),
]

COMMON = """
import argparse, json, os, socket
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
args = parser.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 1)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 10, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin())


def save(model):
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    with open(os.path.join(args.model_dir, "weights.json"), "w") as f:
        json.dump(weights, f)
    torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pth"))


def train_epoch(model, train_loader, optimizer):
    model.train()
    for data, target in train_loader:
        if torch.cuda.is_available():
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        loss = F.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
    return loss
"""

HOROVOD = (
    COMMON
    + """
import horovod.torch as hvd

hvd.init()
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
torch.manual_seed(args.seed)
print(f"hvd rank {hvd.rank()}/{hvd.size()} local {hvd.local_rank()}/{hvd.local_size()} "
      f"cross {hvd.cross_rank()}/{hvd.cross_size()} host {os.environ['SM_CURRENT_HOST']}", flush=True)

train_dataset = dataset()
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)

model = Net()
if torch.cuda.is_available():
    model.cuda()
    print(f"rank {hvd.rank()} on cuda:{torch.cuda.current_device()}", flush=True)
lr_scaler = hvd.size()
optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.none, op=hvd.Average)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


for epoch in range(1, args.epochs + 1):
    train_sampler.set_epoch(epoch)
    loss = train_epoch(model, train_loader, optimizer)
    scheduler.step()
    avg = metric_average(loss.item(), "avg_loss")
    if hvd.rank() == 0:
        print(f"epoch {epoch} avg_loss {avg:.6f} lr {scheduler.get_last_lr()[0]:.6f}", flush=True)

if hvd.rank() == 0:
    save(model)
"""
)

DDP = (
    COMMON
    + """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(args.seed)
train_dataset = dataset()
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank())
train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
model = DDP(Net())
optimizer = optim.SGD(model.parameters(), lr=args.lr * dist.get_world_size(), momentum=args.momentum)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, args.epochs + 1):
    train_sampler.set_epoch(epoch)
    train_epoch(model, train_loader, optimizer)
    scheduler.step()
if dist.get_rank() == 0:
    save(model.module)
dist.destroy_process_group()
"""
)

HPS = {"epochs": 2, "batch-size": 8, "lr": 0.01}


def test_horovod_script_on_two_hosts_matches_ddp(tmp_path: Path) -> None:
    # A GPU type this machine lacks: CUDA is emulated on the CPU, so the script's CUDA calls
    # (set_device(hvd.local_rank()), .cuda()) run unchanged.
    hvd = run_job(
        tmp_path,
        HOROVOD,
        base_name="horovod",
        instance_type="ml.g4dn.12xlarge",
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
        hyperparameters=HPS,
    )
    assert hvd.status == contract.STATUS_COMPLETED, hvd.reason + hvd.log[-3000:]
    for rank in range(4):
        host = f"algo-{rank // 2 + 1}"
        line = f"[{host}/rank {rank}] hvd rank {rank}/4 local {rank % 2}/2 cross {rank // 2}/2 host {host}"
        assert line in hvd.log
        assert f"[{host}/rank {rank}] rank {rank} on cuda:{rank % 2}" in hvd.log
    # lr 0.01 x 4 ranks, x 0.7 per epoch: the scheduler drove the wrapped optimizer
    assert "[algo-1/rank 0] epoch 2 avg_loss" in hvd.log and "lr 0.019600" in hvd.log, hvd.log[-3000:]

    ddp = run_job(
        tmp_path,
        DDP,
        base_name="ddp",
        distribution={"torch_distributed": {"enabled": True}},
        processes_per_host=2,
        hyperparameters=HPS,
    )
    assert ddp.status == contract.STATUS_COMPLETED, ddp.reason + ddp.log[-3000:]

    hvd_weights = read_tar_json(hvd.tar_members(), "weights.json")
    ddp_weights = read_tar_json(ddp.tar_members(), "weights.json")
    assert len(hvd_weights) == len(ddp_weights) == 10 * 32 + 32 + 32 + 1
    assert max(abs(a - b) for a, b in zip(hvd_weights, ddp_weights, strict=True)) < 1e-6
    assert "model.pth" in hvd.tar_members()
