"""SageMaker's canonical smdistributed.dataparallel training script, on scikit-learn's digits.

This is the pattern of AWS's smddp PyTorch samples, kept as written for SageMaker: import the
library's ``distributed`` module and DDP wrapper, ``dist.init_process_group()`` with no arguments,
scale the batch size by the world size (``batch_size //= world_size // 8``, guarded so that a world
of fewer than 8 ranks keeps its batch size instead of dividing by zero), shard the data with a
``DistributedSampler(num_replicas=get_world_size(), rank=get_rank())``, wrap the model in DDP, and
save from rank 0 only. On SageMaker it runs on AWS's library; under smlaunch without it, on the
compat package (torch DDP, NCCL on GPU, gloo on CPU). The one concession to CPU machines: the
device is CUDA only when there is one.

The data is the 8x8 digits bundled with scikit-learn (1,797 images, no download).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import smdistributed.dataparallel.torch.distributed as dist
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group()


class Net(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "output"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.world_size = dist.get_world_size()
    args.rank = rank = dist.get_rank()
    args.local_rank = local_rank = dist.get_local_rank()
    args.batch_size //= max(args.world_size // 8, 1)  # the samples' scaling, safe below 8 ranks
    args.batch_size = max(args.batch_size, 1)
    torch.set_num_threads(1)  # emulated hosts share this machine's cores
    use_cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if rank == 0:
        print(
            f"world size {args.world_size}, {dist.get_local_size()} rank(s) per host, "
            f"batch size {args.batch_size} per rank",
            flush=True,
        )

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=args.seed, stratify=y
    )
    train_dataset = TensorDataset(x_train, y_train)
    train_sampler = DistributedSampler(train_dataset, num_replicas=args.world_size, rank=rank, seed=args.seed)
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)

    torch.manual_seed(args.seed)
    model = DDP(Net(args.hidden).to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for data, target in train_loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        if rank == 0 and epoch % 5 == 0:
            print(f"epoch {epoch}/{args.epochs} loss {total / len(train_loader):.4f}", flush=True)

    # Held-out accuracy: each rank scores a slice of the test set; the counts are summed.
    model.eval()
    with torch.no_grad():
        mine = slice(rank, None, args.world_size)
        correct = (model(x_test[mine].to(device)).argmax(dim=1) == y_test[mine].to(device)).sum()
        counts = torch.tensor([float(correct), float(len(y_test[mine]))], device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    accuracy = (counts[0] / counts[1]).item()

    # Every rank must hold the same weights after DDP training: compare a checksum across ranks.
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    checksums = [torch.zeros_like(checksum) for _ in range(args.world_size)]
    dist.all_gather(checksums, checksum)
    in_sync = all(torch.allclose(c, checksums[0]) for c in checksums)

    if rank == 0:
        print(f"test accuracy {accuracy:.4f}; weights identical on all ranks: {in_sync}", flush=True)
        os.makedirs(args.model_dir, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(args.model_dir, "model.pt"))
        os.makedirs(args.output_data_dir, exist_ok=True)
        with open(os.path.join(args.output_data_dir, "metrics.json"), "w") as handle:
            json.dump(
                {
                    "test_accuracy": accuracy,
                    "world_size": args.world_size,
                    "in_sync": in_sync,
                    "batch_size": args.batch_size,
                },
                handle,
            )
    # Every rank leaves together, then closes its process group explicitly: gloo can abort a rank
    # (SIGABRT, "terminate called without an active exception") when its group is torn down at
    # interpreter exit while peers are still closing their connections.
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        # Rank 0 hosts the rendezvous store (MASTER_ADDR:MASTER_PORT) that the other ranks'
        # groups hold until they are gone: leaving before them has now and then made a rank on
        # its host abort in its own teardown (SIGABRT, as above), in the Docker tests. Leave last.
        time.sleep(2)


if __name__ == "__main__":
    main()
