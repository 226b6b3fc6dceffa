"""Pipeline efficiency of the smp engine against theory, and its overhead against raw torch pipelining.

    python benchmarks/pipeline.py [--dim 512] [--batch 128] [--steps 5] [--stages 2 4] [--device cpu|cuda]

One run measures, with the same model (an ``nn.Sequential`` of 8 ``Linear+GELU`` blocks) and batch:

* ``T1``: the single-process training step (forward, backward, SGD step) of the whole model;
* for p = 2 and 4 stages (p ranks over gloo on CPU, NCCL on GPUs) and m = 1, 2, 4, 8, 16 microbatches:
  ``T_smp`` (an unchanged ``@smp.step`` train step through smlaunch's smp engine, ``pipeline:
  interleaved`` = 1F1B, GPipe when m < p) and ``T_raw`` (the same stages driven by
  ``torch.distributed.pipelining`` directly: ``PipelineStage`` + ``Schedule1F1B``/``ScheduleGPipe``);
  for m >= p also the interleaved schedule with v=2 virtual stages per rank (``SMP_TORCH_VIRTUAL_STAGES``).

Printed as ratios: efficiency = (T1 / p) / T (1.0 is a perfect p-way split), next to the theory
1 / (1 + bubble) with bubble = (p - 1) / m for GPipe and 1F1B and (p - 1) / (v m) interleaved; and
overhead = T_smp / T_raw - 1 (target <= 5%), in wall time and in CPU time summed over the ranks. On a
CPU machine with fewer cores than ranks the absolute efficiencies mean little (ranks share cores and
gloo waits), and wall-time ratios swing with the machine's load; the CPU-time ratio is the stable
measure of what the engine adds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
MICROBATCHES = (1, 2, 4, 8, 16)
BLOCKS = 8


def build(dim: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(BLOCKS):
        layers += [nn.Sequential(nn.Linear(dim, dim), nn.GELU())]
    layers.append(nn.Linear(dim, 10))
    return nn.Sequential(*layers)


def data(batch: int, dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(batch, dim, generator=g).to(device),
        torch.randint(0, 10, (batch,), generator=g).to(device),
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(run: Any, device: torch.device, barrier: Any = None) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one call."""
    if barrier:
        barrier()
    _sync(device)
    w0, c0 = time.perf_counter(), time.process_time()
    run()
    _sync(device)
    return time.perf_counter() - w0, time.process_time() - c0


def time_alternating(
    runs: dict[str, Any], steps: int, device: torch.device, barrier: Any = None
) -> dict[str, float]:
    """Median wall and CPU time per step of each variant (``name`` and ``name:cpu``), measured in
    alternating rounds so that load drift on a shared machine hits every variant alike."""
    for run in runs.values():
        for _ in range(2):
            run()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(steps):
        for name, run in runs.items():
            samples[name].append(_timed(run, device, barrier))
    out: dict[str, float] = {}
    for name, v in samples.items():
        out[name] = statistics.median(w for w, _ in v)
        out[f"{name}:cpu"] = statistics.median(c for _, c in v)
    return out


def single_process_step(dim: int, batch: int, device: torch.device) -> Any:
    model = build(dim).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = data(batch, dim, device)

    def run() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return run


def raw_step(
    p: int, rank: int, m: int, dim: int, device: torch.device, x: torch.Tensor, y: torch.Tensor
) -> Any:
    """The same stages driven by torch.distributed.pipelining directly (dynamic metadata, as documented)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from smlaunch.rank.smp.partition import auto_partition

    blocks = list(build(dim).named_children())
    ids = auto_partition(blocks, p)
    stage_mod = nn.Sequential(*[b for (_, b), i in zip(blocks, ids, strict=True) if i == rank]).to(device)
    stage = PipelineStage(stage_mod, rank, p, device)
    sched = (Schedule1F1B if m >= p else ScheduleGPipe)(stage, m, loss_fn=F.cross_entropy)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=1e-3)

    def run() -> None:
        opt.zero_grad()
        if rank == 0:
            sched.step(x)
        elif rank == p - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()

    return run


def smp_step(smp: Any, dim: int, x: torch.Tensor, y: torch.Tensor) -> Any:
    """An unchanged smp v1 training step through the engine."""
    dmodel = smp.DistributedModel(build(dim))
    dopt = smp.DistributedOptimizer(torch.optim.SGD(dmodel.parameters(), lr=1e-3))

    @smp.step
    def train_step(model: Any, xb: torch.Tensor, yb: torch.Tensor) -> Any:
        loss = F.cross_entropy(model(xb), yb)
        model.backward(loss)
        return loss

    def run() -> None:
        dopt.zero_grad()
        train_step(dmodel, x, y)
        dopt.step()

    return run


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from smlaunch.rank.smp import api as smp
    from smlaunch.rank.smp.state import shutdown

    torch.set_num_threads(1)
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, p = dist.get_rank(), dist.get_world_size()
    x, y = data(args.batch, args.dim, device)
    out: dict[str, float] = {}
    if rank == 0:  # the baseline, while the other ranks wait
        single = single_process_step(args.dim, args.batch, device)
        out["t1"] = time_alternating({"t1": single}, args.steps, device)["t1"]
    dist.barrier()
    for m in MICROBATCHES:
        for v in (1, 2):
            if v == 2 and (m < p or BLOCKS + 1 < 2 * p):
                continue
            os.environ["SMP_TORCH_VIRTUAL_STAGES"] = str(v)
            smp.init({"partitions": p, "microbatches": m, "pipeline": "interleaved"})
            runs = {f"smp_v{v}_m{m}": smp_step(smp, args.dim, x, y)}
            if v == 1:
                runs[f"raw_m{m}"] = raw_step(p, rank, m, args.dim, device, x, y)
            timed = time_alternating(runs, args.steps, device, dist.barrier)
            for name in list(timed):  # CPU time of the whole pipeline: summed over the ranks
                if name.endswith(":cpu"):
                    total = torch.tensor([timed[name]], dtype=torch.float64)
                    dist.all_reduce(total)
                    timed[name] = float(total)
            out.update(timed)
            shutdown()
    if rank == 0:
        Path(args.out).write_text(json.dumps(out))
    dist.destroy_process_group()


def launch(p: int, args: argparse.Namespace) -> dict[str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "out.json"
        procs = []
        for r in range(p):
            env = dict(
                os.environ,
                RANK=str(r),
                WORLD_SIZE=str(p),
                LOCAL_RANK=str(r),
                LOCAL_WORLD_SIZE=str(p),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            )
            argv = [
                sys.executable,
                __file__,
                "--worker",
                "--out",
                str(result),
                "--dim",
                str(args.dim),
                "--batch",
                str(args.batch),
                "--steps",
                str(args.steps),
                "--device",
                args.device,
            ]
            procs.append(subprocess.Popen(argv, env=env))
        try:
            for proc in procs:
                if proc.wait(timeout=args.timeout) != 0:
                    raise SystemExit(f"a rank of the p={p} run failed (exit {proc.returncode})")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(
        f"model: {BLOCKS} x Linear({args.dim},{args.dim})+GELU + head, batch {args.batch}, "
        f"device {args.device}, {os.cpu_count()} cores, {args.steps} timed steps per variant"
    )
    print(
        f"{'p':>2} {'m':>3} | {'eff smp':>8} {'eff raw':>8} {'theory':>7} | {'eff v=2':>8} {'theory':>7} | "
        f"{'overhead wall':>13} {'overhead cpu':>12}"
    )
    for p in args.stages:
        res = launch(p, args)
        t1 = res["t1"]
        print(f"p={p}: single-process step T1 = {t1 * 1e3:.1f} ms (measured on rank 0 of this launch)")
        for m in MICROBATCHES:
            t_smp, t_raw = res[f"smp_v1_m{m}"], res[f"raw_m{m}"]
            ideal = t1 / p
            theory = 1 / (1 + (p - 1) / m)
            v2 = res.get(f"smp_v2_m{m}")
            v2_theory = 1 / (1 + (p - 1) / (2 * m))
            v2_cols = f"{ideal / v2:8.2f} {v2_theory:7.2f}" if v2 else f"{'-':>8} {'-':>7}"
            cpu = res[f"smp_v1_m{m}:cpu"] / res[f"raw_m{m}:cpu"] - 1
            print(
                f"{p:>2} {m:>3} | {ideal / t_smp:8.2f} {ideal / t_raw:8.2f} {theory:7.2f} | {v2_cols} | "
                f"{t_smp / t_raw - 1:+13.1%} {cpu:+12.1%}"
            )


if __name__ == "__main__":
    main()
