"""Quickstart training script: a SageMaker-style PyTorch script, unchanged from what runs on SageMaker.

It reads its configuration the SageMaker way (hyperparameters as ``--key value`` arguments,
``SM_MODEL_DIR`` / ``SM_OUTPUT_DATA_DIR`` / ``SM_CURRENT_HOST`` from the environment, ranks from the
torch variables the launcher sets) and trains a small MLP on scikit-learn's bundled 8x8 digits
(1,797 images, no download) with DistributedDataParallel over gloo. Every rank trains on its
DistributedSampler shard; the held-out accuracy is summed across ranks; rank 0 saves the model.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "output"))
    return parser.parse_args()


def held_out_accuracy(
    model: nn.Module, x_test: torch.Tensor, y_test: torch.Tensor, rank: int, world: int, distributed: bool
) -> tuple[float, torch.Tensor]:
    """Each rank scores its slice of the test set; the counts are summed over the ranks."""
    model.eval()
    with torch.no_grad():
        mine = slice(rank, None, world)
        correct = (model(x_test[mine]).argmax(dim=1) == y_test[mine]).sum()
        counts = torch.tensor([float(correct), float(len(y_test[mine]))])
    if distributed:
        dist.all_reduce(counts)
    return (counts[0] / counts[1]).item(), counts


def main() -> None:
    started = time.time()
    args = parse_args()
    torch.set_num_threads(1)  # several ranks share this machine's cores
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(backend="gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    host = os.environ.get("SM_CURRENT_HOST", "localhost")
    if rank == 0:
        print(f"training on {world} rank(s); hosts {os.environ.get('SM_HOSTS', '[]')}", flush=True)

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=args.seed, stratify=y
    )
    train = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(args.seed)  # same initial weights on every rank
    model: nn.Module = nn.Sequential(
        nn.Linear(64, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    )
    if distributed:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for features, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(features), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
        accuracy, counts = held_out_accuracy(model, x_test, y_test, rank, world, distributed)
        # Each host's first rank reports its own shard's loss (the hosts' curves differ); rank 0 the
        # accuracy on the whole held-out set. metric_definitions in run.py turn these into metrics.
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {total / len(loader):.4f}", flush=True)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} val accuracy {accuracy:.4f}", flush=True)

    if rank == 0:
        print(f"test accuracy: {accuracy:.4f} on {int(counts[1])} held-out images", flush=True)
        os.makedirs(args.model_dir, exist_ok=True)
        plain = model.module if isinstance(model, DistributedDataParallel) else model
        torch.save(plain.state_dict(), os.path.join(args.model_dir, "model.pt"))
        os.makedirs(args.output_data_dir, exist_ok=True)
        with open(os.path.join(args.output_data_dir, "metrics.json"), "w") as handle:
            json.dump(
                {
                    "test_accuracy": accuracy,
                    "world_size": world,
                    "host": host,
                    "seconds": round(time.time() - started, 2),
                },
                handle,
            )
    if distributed:
        # Leave together: a rank that tears gloo down while rank 0 is still saving can abort
        # (SIGABRT, "terminate called without an active exception"), seen in the Docker tests.
        dist.barrier()
        dist.destroy_process_group()
        if rank == 0:
            # Rank 0 hosts the rendezvous store (MASTER_ADDR:MASTER_PORT) that the other ranks'
            # groups hold until they are gone: leaving before them has now and then made a rank on
            # its host abort in its own teardown (SIGABRT, as above), in the Docker tests. Leave last.
            time.sleep(2)


if __name__ == "__main__":
    main()
