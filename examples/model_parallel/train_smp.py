"""A SageMaker model-parallel (smp v1) training script, in the canonical pattern of AWS's examples.

Unchanged from what runs on SageMaker with ``smdistributed.modelparallel``: ``smp.init()``,
``smp.DistributedModel``, ``smp.DistributedOptimizer``, ``@smp.step`` train and test steps with
``model.backward``, data sharded by ``smp.dp_rank()``, the full model saved from rank 0. Under
smlaunch the import resolves to its torch.distributed.pipelining engine when AWS's library is absent.
"""

from __future__ import annotations

import argparse
import os

import smdistributed.modelparallel.torch as smp
import torch
import torch.nn.functional as F
from model import build_model, digits
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@smp.step
def train_step(model, data, target):
    output = model(data)
    loss = F.cross_entropy(output, target)
    model.backward(loss)
    return output, loss


@smp.step
def test_step(model, data, target):
    output = model(data)
    loss = F.cross_entropy(output, target, reduction="sum")
    correct = (output.argmax(dim=1) == target).sum()
    return output, loss, correct


def evaluate(model, loader, device):
    model.eval()
    total_loss, correct, count, logits = 0.0, 0, 0, []
    with torch.no_grad():
        for data, target in loader:
            output, loss, right = test_step(model, data.to(device), target.to(device))
            total_loss += loss.reduce_sum().item()
            correct += int(right.reduce_sum().item())
            count += len(target)
            logits.append(output.concat().cpu())
    return total_loss / count, correct / count, torch.cat(logits)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args, _ = parser.parse_known_args()  # SageMaker also passes --mp_parameters

    smp.init()
    torch.manual_seed(args.seed)
    device = torch.device("cuda", smp.local_rank()) if torch.cuda.is_available() else torch.device("cpu")

    train_x, train_y = digits("train")
    test_x, test_y = digits("test")
    sampler = DistributedSampler(
        TensorDataset(train_x, train_y),
        num_replicas=smp.dp_size(),
        rank=smp.dp_rank(),
        shuffle=True,
        seed=args.seed,
        drop_last=True,
    )
    train_loader = DataLoader(
        TensorDataset(train_x, train_y), batch_size=args.batch_size, sampler=sampler, drop_last=True
    )
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=40)

    model = smp.DistributedModel(build_model())
    optimizer = smp.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr))
    if smp.rank() == 0:
        print(
            f"smp: world={smp.size()} pp={smp.pp_size()} dp={smp.dp_size()} "
            f"microbatches={smp.num_microbatches()}",
            flush=True,
        )

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        losses = []
        for data, target in train_loader:
            optimizer.zero_grad()
            _, loss_mb = train_step(model, data.to(device), target.to(device))
            losses.append(loss_mb.reduce_mean().item())
            optimizer.step()
        train_loss = sum(smp.allgather(sum(losses) / len(losses), smp.DP_GROUP)) / smp.dp_size()
        test_loss, accuracy, _ = evaluate(model, test_loader, device)
        if smp.rank() == 0:
            print(
                f"epoch={epoch} train_loss={train_loss:.4f} test_loss={test_loss:.4f} "
                f"test_accuracy={accuracy:.4f}",
                flush=True,
            )

    _, _, logits = evaluate(model, test_loader, device)
    if smp.dp_rank() == 0:
        state = model.state_dict()  # gathered over the pipeline
        smp.save(state, os.path.join(args.model_dir, "model.pt"), partial=False)
    if smp.rank() == 0:
        torch.save(logits, os.path.join(args.model_dir, "test_logits.pt"))
    smp.barrier()


if __name__ == "__main__":
    main()
