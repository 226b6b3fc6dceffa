"""GPU training scripts run unchanged on emulated ``ml.p3.16xlarge`` hosts of a CPU-only machine.

Each script is written as for a real GPU job (the patterns of the public SageMaker and PyTorch
examples: ``torch.cuda.set_device(local_rank)``, ``.cuda()``, ``.to("cuda")``, NCCL, CUDA autocast
and ``GradScaler``, ``pin_memory``, a "CUDA required" check). Each runs on 2 emulated hosts with
the CUDA emulation (``smlaunch/rank/cuda_emulation.py``, on by default here) and again with
``LocalSession(emulate_cuda=False)``, where it takes its CPU branch: the trained weights must be
bit-for-bit equal, since the emulation never changes what a CPU computes.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated.executors.process.executor import PrivateOptMl
from tests.functional._dist_helpers import JobRun, read_tar_json, run_job

if sys.platform != "linux":
    pytest.skip("the local backend's functional tests need Linux", allow_module_level=True)

GPU_TYPE = "ml.p3.16xlarge"

SMDDP_MNIST = '''
"""MNIST with smdistributed.dataparallel, as AWS's example writes it."""
import argparse
import json
import os

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers the "smddp" backend
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group(backend="smddp")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-gpus", type=int, default=int(os.environ["SM_NUM_GPUS"]))
    parser.add_argument("--data-dir", default=os.environ["SM_CHANNEL_TRAINING"])
    parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
    args = parser.parse_args()

    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.num_gpus > 0 and not torch.cuda.is_available():
        raise ValueError(f"CUDA required: SM_NUM_GPUS={args.num_gpus} but torch.cuda.is_available() is False")
    use_cuda = args.num_gpus > 0
    device = torch.device("cuda" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    torch.manual_seed(args.seed)

    images, labels = torch.load(os.path.join(args.data_dir, "mnist.pt"))
    images = images.float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, pin_memory=use_cuda)

    model = DDP(Net().to(device), device_ids=[local_rank] if use_cuda else None)
    if use_cuda:
        model.cuda(local_rank)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        for data, target in loader:
            data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"Train Epoch: {epoch} loss={loss.item():.6f}")
        scheduler.step()
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.model_dir, "model.pt"))
        with open(os.path.join(args.model_dir, "facts.json"), "w") as handle:
            json.dump({"cuda": torch.cuda.is_available(), "device_count": torch.cuda.device_count(),
                       "sm_num_gpus": os.environ["SM_NUM_GPUS"], "backend": dist.get_backend()}, handle)


if __name__ == "__main__":
    main()
'''

TORCHRUN_DDP = '''
"""DDP under torchrun, written for GPUs with the PyTorch examples' CPU fallback."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
args = parser.parse_args()

local_rank, rank = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"])
use_cuda = torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl" if use_cuda else "gloo")
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
if use_cuda:
    model = model.cuda()
ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
scaler = torch.cuda.amp.GradScaler(enabled=use_cuda)
torch.manual_seed(100 + rank)
for epoch in range(args.epochs):
    for _ in range(6):
        x = torch.randn(args.batch_size, 20, device=device)
        y = x.sum(dim=1, keepdim=True).to("cuda" if use_cuda else "cpu")
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_cuda):
            loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    scheduler.step()
    if use_cuda:
        torch.cuda.synchronize()
    print(f"epoch={epoch} loss={loss.item():.6f} lr={scheduler.get_last_lr()[0]:.5f}")

facts = {"rank": rank, "local_rank": local_rank, "cuda": torch.cuda.is_available(),
         "device_count": torch.cuda.device_count(), "backend": dist.get_backend()}
if use_cuda:
    facts.update(current_device=torch.cuda.current_device(), name=torch.cuda.get_device_name(),
                 allocated=torch.cuda.max_memory_allocated())
with open(os.path.join(args.model_dir, f"facts-{rank}.json"), "w") as handle:
    json.dump(facts, handle)
if rank == 0:
    torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pt"))
dist.barrier()
dist.destroy_process_group()
'''

SMP_STEPLR = '''
"""smp v1 training in the pattern of AWS's model-parallel MNIST example: smp.amp, an LR scheduler."""
import argparse
import os

import smdistributed.modelparallel.torch as smp
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda.amp import autocast
from torch.optim.lr_scheduler import StepLR


@smp.step
def train_step(model, scaler, data, target):
    with autocast(True):
        output = model(data)
    loss = F.nll_loss(output, target, reduction="mean")
    model.backward(scaler.scale(loss) if scaler else loss)
    return output, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--amp", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args, _ = parser.parse_known_args()

    smp.init()
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(smp.local_rank())
    device = torch.device("cuda", smp.local_rank()) if use_cuda else torch.device("cpu")
    torch.manual_seed(args.seed)

    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), smp.nn.DistributedLinear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4), nn.LogSoftmax(dim=1))
    model = smp.DistributedModel(model)
    model.to(device)
    scaler = smp.amp.GradScaler() if args.amp else None
    optimizer = smp.DistributedOptimizer(torch.optim.Adadelta(model.parameters(), lr=args.lr))
    assert isinstance(optimizer, torch.optim.Optimizer)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    generator = torch.Generator().manual_seed(1000 + smp.dp_rank())
    data = torch.randn(4 * args.batch_size, 20, generator=generator)
    target = torch.randint(0, 4, (4 * args.batch_size,), generator=generator)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for i in range(0, len(data), args.batch_size):
            x, y = data[i:i + args.batch_size].to(device), target[i:i + args.batch_size].to(device)
            optimizer.zero_grad()
            _, loss_mb = train_step(model, scaler, x, y)
            loss = loss_mb.reduce_mean()
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
        scheduler.step()
        if smp.rank() == 0:
            print(f"Train Epoch: {epoch} loss={loss.item():.6f} lr={scheduler.get_last_lr()[0]:.4f}")

    os.makedirs("/opt/ml/checkpoints", exist_ok=True)
    if smp.dp_rank() == 0:
        smp.save(model.local_state_dict(), "/opt/ml/checkpoints/model", partial=True)
    smp.barrier()
    reloaded = smp.load("/opt/ml/checkpoints/model", partial=True)
    local = {k: v for k, v in model.local_state_dict().items() if torch.is_tensor(v)}
    assert local and all(torch.equal(reloaded[k], v) for k, v in local.items())
    state = model.state_dict()  # gathered over the pipeline: a collective
    if smp.rank() == 0:
        torch.save(state, "/opt/ml/model/model.pt")
        print(f"device_count={torch.cuda.device_count()} cuda={use_cuda} scale={scaler.get_scale()}")


if __name__ == "__main__":
    main()
'''

CUDA_EXTENSION = """
import torch
from torch.utils.cpp_extension import load

if not torch.cuda.is_available():
    raise SystemExit("This script requires a GPU")
fused_adam = load(name="fused_adam", sources=["fused_adam.cpp", "fused_adam_kernel.cu"], verbose=True)
"""


def _weights(run: JobRun) -> dict[str, object]:
    import torch

    return torch.load(io.BytesIO(run.tar_members()["model.pt"]), weights_only=True)


def _assert_same_weights(emulated: JobRun, cpu: JobRun) -> None:
    import torch

    a, b = _weights(emulated), _weights(cpu)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key  # type: ignore[arg-type]


def _completed(run: JobRun) -> None:
    assert run.status == contract.STATUS_COMPLETED, run.reason + run.log[-3000:]


@pytest.mark.slow
def test_smddp_mnist_script_runs_on_emulated_gpus_with_cpu_numbers(tmp_path: Path) -> None:
    import torch

    data = tmp_path / "mnist"
    data.mkdir()
    generator = torch.Generator().manual_seed(7)
    images = torch.randint(0, 256, (192, 28, 28), dtype=torch.uint8, generator=generator)
    torch.save((images, torch.randint(0, 10, (192,), generator=generator)), data / "mnist.pt")
    common = dict(
        instance_count=2,
        instance_type=GPU_TYPE,
        processes_per_host=1,
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        inputs={"training": data.as_uri()},
    )
    emulated = run_job(tmp_path, SMDDP_MNIST, base_name="smddp-emulated", **common)  # type: ignore[arg-type]
    _completed(emulated)
    assert "CUDA emulated on CPU: 8 V100 GPU(s) per host" in emulated.log
    facts = read_tar_json(emulated.tar_members(), "facts.json")
    assert facts == {"cuda": True, "device_count": 8, "sm_num_gpus": "8", "backend": "smddp"}

    cpu = run_job(tmp_path, SMDDP_MNIST, base_name="smddp-cpu", emulate_cuda=False, **common)  # type: ignore[arg-type]
    _completed(cpu)
    assert read_tar_json(cpu.tar_members(), "facts.json")["cuda"] is False
    assert "CUDA emulated" not in cpu.log
    _assert_same_weights(emulated, cpu)


@pytest.mark.slow
def test_torchrun_ddp_script_sets_devices_and_matches_a_cpu_run(tmp_path: Path) -> None:
    common = dict(
        instance_count=2,
        instance_type=GPU_TYPE,
        processes_per_host=2,
        distribution={"torch_distributed": {"enabled": True}},
    )
    emulated = run_job(tmp_path, TORCHRUN_DDP, base_name="ddp-emulated", **common)  # type: ignore[arg-type]
    _completed(emulated)
    members = emulated.tar_members()
    for rank in range(4):
        facts = json.loads(members[f"facts-{rank}.json"])
        assert facts["cuda"] is True and facts["device_count"] == 8 and facts["backend"] == "gloo"
        assert facts["current_device"] == facts["local_rank"] == rank % 2
        assert facts["name"] == "NVIDIA V100 (emulated on CPU by smlaunch)" and facts["allocated"] == 0
    plans = emulated.description["HostTopology"]  # each host's resolved launch plan
    assert sorted(plans) == ["algo-1", "algo-2"]
    for plan in plans.values():
        assert plan["topology"]["backend"] == "gloo (CUDA emulated on CPU: NCCL requests use gloo)"

    cpu = run_job(tmp_path, TORCHRUN_DDP, base_name="ddp-cpu", emulate_cuda=False, **common)  # type: ignore[arg-type]
    _completed(cpu)
    assert json.loads(cpu.tar_members()["facts-0.json"])["cuda"] is False
    _assert_same_weights(emulated, cpu)


@pytest.mark.slow
def test_smp_script_with_amp_and_a_scheduler_matches_a_cpu_run(tmp_path: Path) -> None:
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"the script writes /opt/ml literally and mount namespaces are unavailable: {why}")
    parameters = {"partitions": 2, "microbatches": 2}
    common = dict(
        instance_count=2,
        instance_type=GPU_TYPE,
        distribution={
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
            "mpi": {"enabled": True, "processes_per_host": 1},
        },
    )
    emulated = run_job(tmp_path, SMP_STEPLR, base_name="smp-emulated", **common)  # type: ignore[arg-type]
    _completed(emulated)
    assert "device_count=8 cuda=True scale=1.0" in emulated.log
    assert "Train Epoch: 3" in emulated.log and "lr=0.3430" in emulated.log

    cpu = run_job(tmp_path, SMP_STEPLR, base_name="smp-cpu", emulate_cuda=False, **common)  # type: ignore[arg-type]
    _completed(cpu)
    assert "device_count=0 cuda=False scale=1.0" in cpu.log
    _assert_same_weights(emulated, cpu)


def test_cuda_extension_fails_naming_the_call(tmp_path: Path) -> None:
    run = run_job(tmp_path, CUDA_EXTENSION, base_name="cuda-ext", instance_count=1, instance_type=GPU_TYPE)
    assert run.status == contract.STATUS_FAILED
    assert "torch.utils.cpp_extension.load(name='fused_adam') needs a real CUDA GPU" in run.reason
    assert "LocalSession(emulate_cuda=False)" in run.reason
