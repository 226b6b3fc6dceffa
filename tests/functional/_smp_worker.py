"""One rank of the smp engine scenarios, compared against a single-process reference.

Run as ``python -m tests.functional._smp_worker <scenarios.json> <out_dir>`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (tests/functional/test_smp_engine.py starts the ranks). The world
process group is started once; every scenario then runs ``smp.init`` with its own configuration on top
of it (``shutdown`` keeps a process group it did not create), so one launch covers many scenarios.

Each rank recomputes the single-process reference itself (same seed, same data, microbatch gradient
accumulation exactly as smp defines it) and writes, per scenario, the largest differences it saw:
losses on every rank, its local parameters and buffers after every step, eval outputs.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from smlaunch.rank.smp import api as smp
from smlaunch.rank.smp.state import shutdown


class TokenEmbedding(nn.Module):
    def __init__(self, vocab: int, dim: int, length: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(length, dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tok(x) + self.pos


class MeanPoolHead(nn.Module):
    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x).mean(dim=1))


class Grouped(nn.Module):
    """smp's example pattern: a custom module whose forward chains its children."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Sequential(nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 12))
        self.net2 = nn.Sequential(nn.Tanh(), nn.Linear(12, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.net1(x)
        x = self.net2(x)
        return x


def build_model(kind: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if kind == "grouped":
        return Grouped()
    if kind == "mlp":
        layers: list[nn.Module] = []
        for _ in range(4):
            layers += [nn.Linear(12, 12), nn.Tanh()]
        layers.append(nn.Linear(12, 3))
        return nn.Sequential(*layers)
    if kind == "bn":
        return nn.Sequential(
            nn.Linear(12, 16),
            nn.BatchNorm1d(16),
            nn.ReLU(),
            nn.Linear(16, 16),
            nn.BatchNorm1d(16),
            nn.ReLU(),
            nn.Linear(16, 3),
        )
    if kind == "transformer":
        return nn.Sequential(
            TokenEmbedding(11, 16, 6),
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            MeanPoolHead(16, 3),
        )
    raise ValueError(kind)


def batch(kind: str, step: int, replica: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + replica)
    if kind == "transformer":
        x = torch.randint(0, 11, (size, 6), generator=g)
    else:
        x = torch.randn(size, 12, generator=g)
    y = torch.randint(0, 3, (size,), generator=g)
    return x, y


def reference(sc: dict[str, Any], dp: int) -> dict[str, Any]:
    """Single process: per step, every replica's microbatches accumulate loss/(m*dp) gradients."""
    model = build_model(sc["model"], seed=sc["seed"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    m = sc["microbatches"]
    losses, states = [], []
    for step, size in enumerate(sc["batches"]):
        opt.zero_grad()
        replica_losses = []
        for r in range(dp):
            x, y = batch(sc["model"], step, r, size)
            mb_losses = []
            for xm, ym in zip(x.chunk(m), y.chunk(m), strict=True):
                loss = F.cross_entropy(model(xm), ym)
                (loss / (m * dp)).backward()
                mb_losses.append(loss.item())
            replica_losses.append(sum(mb_losses) / m)
        losses.append(replica_losses)
        opt.step()
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    model.eval()
    with torch.no_grad():
        x, _ = batch(sc["model"], 99, 0, sc["batches"][0])
        eval_out = model(x)
    return {"losses": losses, "states": states, "eval": eval_out, "model": model}


def run_scenario(sc: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    os.environ.pop("SMP_TORCH_VIRTUAL_STAGES", None)
    if sc.get("virtual_stages"):
        os.environ["SMP_TORCH_VIRTUAL_STAGES"] = str(sc["virtual_stages"])
    smp.init(sc["config"])
    try:
        dp = smp.dp_size()
        ref = reference(sc, dp)
        # a different seed on other replicas proves the parameter broadcast from dp rank 0
        net = build_model(sc["model"], seed=sc["seed"] + smp.dp_rank() * 7)
        for (_, block), pid in zip(net.named_children(), sc.get("manual", []), strict=False):
            smp.set_partition(block, pid)
        model = smp.DistributedModel(net)
        opt = smp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

        @smp.step
        def train_step(model: Any, x: torch.Tensor, y: torch.Tensor) -> Any:
            out = model(x)
            loss = F.cross_entropy(out, y)
            model.backward(loss)
            return loss, out

        @smp.step
        def eval_step(model: Any, x: torch.Tensor) -> Any:
            return model(x)

        res: dict[str, Any] = {"loss_err": 0.0, "param_err": 0.0, "buffer_err": 0.0, "checked": 0}
        resume = sc.get("resume")
        if resume:
            smp.resume_from_checkpoint(str(out_dir / "ckpt"), tag=resume["tag"], partial=True)
        for step, size in enumerate(sc["batches"]):
            if resume and step < resume["from_step"]:
                continue
            x, y = batch(sc["model"], step, smp.dp_rank(), size)
            model.train()
            opt.zero_grad()
            loss, out = train_step(model, x, y)
            opt.step()
            got = loss.reduce_mean().item()
            res["loss_err"] = max(res["loss_err"], abs(got - ref["losses"][step][smp.dp_rank()]))
            if out.concat().shape[0] != size:
                raise AssertionError(f"concat gives {tuple(out.concat().shape)} rows, batch has {size}")
            local = dict(model.local_state_dict())
            local.pop("_smp_is_partial")
            for k, v in local.items():
                want = ref["states"][step][k]
                if v.is_floating_point():
                    err = (v.detach().cpu() - want).abs().max().item()
                    if math.isnan(err):
                        err = float("inf")
                    key = "buffer_err" if k in dict(model.module.named_buffers()) else "param_err"
                    res[key] = max(res[key], err)
                elif not torch.equal(v.cpu(), want):
                    raise AssertionError(f"{k}: {v} != {want} (step {step})")
                res["checked"] += 1
            save = sc.get("save")
            if save and step == save["at_step"]:
                smp.save_checkpoint(
                    str(out_dir / "ckpt"),
                    tag=save["tag"],
                    partial=True,
                    model=model,
                    optimizer=opt,
                    user_content={"step": step},
                )
                smp.save_checkpoint(
                    str(out_dir / "ckpt"),
                    tag=save["tag"] + "_full",
                    partial=False,
                    model=model,
                    user_content={"step": step},
                )
        model.eval()
        with torch.no_grad():
            x, _ = batch(sc["model"], 99, 0, sc["batches"][0])
            ev = eval_step(model, x).concat()
        res["eval_err"] = (ev.cpu() - ref["eval"]).abs().max().item()
        full = model.state_dict()
        res["full_keys_ok"] = list(full) == list(ref["model"].state_dict())
        res["rank"] = smp.rank()
        res["pp_rank"] = smp.pp_rank()
        res["dp_rank"] = smp.dp_rank()
        res["local_params"] = sorted(n for n, _ in model.local_named_parameters())
        return res
    finally:
        shutdown()


def run_comm(sc: dict[str, Any]) -> dict[str, Any]:
    """The communication API on the mesh groups: allgather, one-sided broadcast, send/recv, barriers."""
    smp.init(sc["config"])
    try:
        me = smp.rank()
        assert smp.allgather(me) == list(range(smp.size()))
        assert smp.allgather(me, smp.PP_GROUP) == smp.get_pp_group()
        assert smp.allgather(me, smp.DP_GROUP) == smp.get_dp_group()
        assert smp.allgather(smp.pp_rank(), smp.MP_GROUP) == list(range(smp.mp_size()))
        if smp.pp_rank() == 0:
            smp.broadcast({"from": me}, smp.PP_GROUP)
        else:
            got = smp.recv_from(0, smp.RankType.PP_RANK)
            assert got == {"from": smp.get_pp_group()[0]}, got
        if smp.pp_rank() == 0:
            smp.send(("hello", me), 1, smp.RankType.PP_RANK)
        elif smp.pp_rank() == 1:
            assert smp.recv_from(0, smp.RankType.PP_RANK) == ("hello", smp.get_pp_group()[0])
        from smlaunch.rank.smp.state import STATE
        from smlaunch.rank.smp.step import _broadcast_object

        src = smp.get_pp_group()[0]
        for size in (10, 40_000):  # inline (one collective) and spilled (> 64 KiB) payloads
            payload = {"x": torch.arange(size)} if me == src else None
            got = _broadcast_object(payload, src, STATE.process_group("P"))
            assert torch.equal(got["x"], torch.arange(size))
        gathered = smp.gather(me, smp.DP_GROUP, rank=0)
        assert gathered == (smp.get_dp_group() if smp.dp_rank() == 0 else None)
        for barrier in (smp.barrier, smp.pp_barrier, smp.dp_barrier, smp.mp_barrier, smp.rdp_barrier):
            barrier()
        return {"comm_ok": True, "rank": me}
    finally:
        shutdown()


def main() -> None:
    scenarios = json.loads(Path(sys.argv[1]).read_text())
    out_dir = Path(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results: dict[str, Any] = {}
    for sc in scenarios:
        try:
            run = run_comm if sc.get("kind") == "comm" else run_scenario
            results[sc["name"]] = run(sc, out_dir) if run is run_scenario else run(sc)
        except Exception as exc:  # reported per scenario; the test prints the traceback
            results[sc["name"]] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
            raise
        dist.barrier()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
