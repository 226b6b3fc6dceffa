"""Training throughput of one DDP script under smlaunch's local backend and under plain ``torchrun``.

    python benchmarks/ddp_overhead.py                  # 2 ranks, 3 alternating rounds
    python benchmarks/ddp_overhead.py --quick          # 1 round of 50 steps

The same script (written to a temporary directory by this benchmark) trains an MLP on synthetic
tensors with ``DistributedDataParallel`` over gloo on CPU. It measures samples/s *inside its own
training loop*: after ``--warmup`` steps it crosses a barrier, times ``--steps`` steps on rank 0
(DDP's gradient all-reduce keeps the ranks in lockstep) and prints one parseable line::

    DDP_THROUGHPUT samples_per_s=1234.5 world=2 steps=200 batch=64 samples_per_cpu_s=678.9 loss=2.3

Each rank also prints ``DDP_RANK_ENV rank=R omp=<OMP_NUM_THREADS> threads=<torch.get_num_threads()>``,
and the benchmark refuses to compare runs whose ranks did not get the same thread settings: the
launcher must not change what the training loop runs with (torchrun sets ``OMP_NUM_THREADS=1``
when several ranks share a host; so does smlaunch's torchrun launcher). ``OMP_NUM_THREADS`` is
removed from this process's environment first, so each launcher applies its own default.

Runs, in alternating rounds so that load drift on a shared machine hits both sides alike:

- ``torchrun``: ``python -m torch.distributed.run --standalone --nproc-per-node N script.py ...``;
- ``smlaunch``: ``PyTorch(...).fit()`` with ``LocalSession(processes_per_host=N)``, one
  ``ml.c5.xlarge`` host, ``distribution={"torch_distributed": {"enabled": True}}``; the same
  arguments as hyperparameters.

Printed: the median samples/s of each side and ratio = smlaunch / torchrun (target >= 0.98: the
launcher adds nothing to the training loop), and the ratio of each side's best run. Start-up time
is deliberately not part of this figure (``benchmarks/launch_overhead.py`` measures it).
Wall-clock rates swing with other load on a shared machine, so the script also sums every rank's
CPU seconds over the timed loop and the benchmark prints the ratio of samples per CPU second, the
steadier measure of what the training loop costs under each launcher.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """\
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--width", type=int, default=512)
args, _ = parser.parse_known_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"DDP_RANK_ENV rank={rank} omp={os.environ.get('OMP_NUM_THREADS', 'unset')} "
      f"threads={torch.get_num_threads()}", flush=True)

torch.manual_seed(0)
width = args.width
model = DDP(nn.Sequential(
    nn.Linear(256, width), nn.ReLU(),
    nn.Linear(width, width), nn.ReLU(),
    nn.Linear(width, width), nn.ReLU(),
    nn.Linear(width, 10),
))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(rank)
inputs = torch.randn(16, args.batch_size, 256, generator=g)
labels = torch.randint(0, 10, (16, args.batch_size), generator=g)


def step(i):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs[i % 16]), labels[i % 16])
    loss.backward()
    optimizer.step()
    return loss


for i in range(args.warmup):
    step(i)
dist.barrier()
start, cpu_start = time.perf_counter(), time.process_time()
for i in range(args.steps):
    loss = step(i)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
cpu_total = torch.tensor([cpu], dtype=torch.float64)
dist.all_reduce(cpu_total)  # after the timed loop: CPU seconds of every rank
if rank == 0:
    samples = args.steps * args.batch_size * world
    print(f"DDP_THROUGHPUT samples_per_s={samples / elapsed:.1f} world={world} steps={args.steps} "
          f"batch={args.batch_size} samples_per_cpu_s={samples / cpu_total.item():.1f} "
          f"loss={loss.item():.4f}", flush=True)
dist.barrier()  # no rank tears gloo down while a peer is still printing (gloo may abort it)
dist.destroy_process_group()
"""

THROUGHPUT = re.compile(
    r"DDP_THROUGHPUT samples_per_s=(\d+(?:\.\d+)?) world=(\d+) .*samples_per_cpu_s=(\d+(?:\.\d+)?)"
)
RANK_ENV = re.compile(r"DDP_RANK_ENV rank=(\d+) omp=(\S+) threads=(\d+)")


def parse(text: str, ranks: int, label: str) -> tuple[float, float, dict[int, tuple[str, int]]]:
    """(samples/s, samples per CPU second, {rank: (OMP_NUM_THREADS, torch threads)}) of one run."""
    found = THROUGHPUT.search(text)
    if found is None:
        raise RuntimeError(f"{label}: no DDP_THROUGHPUT line in the output:\n{text[-3000:]}")
    if int(found.group(2)) != ranks:
        raise RuntimeError(f"{label}: world size {found.group(2)}, expected {ranks}")
    settings = {int(m.group(1)): (m.group(2), int(m.group(3))) for m in RANK_ENV.finditer(text)}
    if sorted(settings) != list(range(ranks)):
        raise RuntimeError(
            f"{label}: DDP_RANK_ENV lines for ranks {sorted(settings)}, expected 0..{ranks - 1}"
        )
    return float(found.group(1)), float(found.group(3)), settings


def run_torchrun(script_dir: Path, ranks: int, script_args: list[str], env: dict[str, str]) -> str:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        "script.py",
        *script_args,
    ]
    result = subprocess.run(argv, cwd=script_dir, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(
            f"torchrun failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return result.stdout + result.stderr


def run_smlaunch(script_dir: Path, ranks: int, hyperparameters: dict[str, object], root: Path) -> str:
    from smlaunch import LocalSession, PyTorch

    estimator = PyTorch(
        entry_point="script.py",
        source_dir=str(script_dir),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters=hyperparameters,
        base_job_name="ddp-bench",
        sagemaker_session=LocalSession(root, processes_per_host=ranks),
    )
    logs = io.StringIO()
    with contextlib.redirect_stdout(logs):
        estimator.fit(wait=True, logs=True)
    return logs.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2, help="ranks on the one host (both sides)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each side once per round")
    parser.add_argument("--steps", type=int, default=200, help="timed training steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed ones")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--width", type=int, default=512, help="hidden width of the MLP")
    parser.add_argument("--quick", action="store_true", help="1 round of 50 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 1, 50

    os.environ.pop("OMP_NUM_THREADS", None)  # each launcher applies its own default
    work = Path(tempfile.mkdtemp(prefix="smlaunch-ddp-bench-"))
    script_dir = work / "code"
    script_dir.mkdir()
    (script_dir / "script.py").write_text(SCRIPT)
    hps: dict[str, object] = {
        "steps": args.steps,
        "warmup": args.warmup,
        "batch-size": args.batch_size,
        "width": args.width,
    }
    script_args = [x for key, value in hps.items() for x in (f"--{key}", str(value))]
    env = dict(os.environ)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"DDP throughput: {args.ranks} ranks (gloo, CPU), MLP width {args.width}, "
        f"batch {args.batch_size}/rank, "
        f"{args.steps} timed steps after {args.warmup} warm-up; {args.rounds} alternating rounds; "
        f"{os.cpu_count()} CPUs, load average {load}",
        flush=True,
    )
    rates: dict[str, list[float]] = {"torchrun": [], "smlaunch": []}
    cpu_rates: dict[str, list[float]] = {"torchrun": [], "smlaunch": []}
    seen: dict[str, dict[int, tuple[str, int]]] = {}
    for round_index in range(args.rounds):
        order = ["torchrun", "smlaunch"] if round_index % 2 == 0 else ["smlaunch", "torchrun"]
        for side in order:
            if side == "torchrun":
                text = run_torchrun(script_dir, args.ranks, script_args, env)
            else:
                text = run_smlaunch(script_dir, args.ranks, hps, work / "jobs")
            rate, cpu_rate, settings = parse(text, args.ranks, side)
            rates[side].append(rate)
            cpu_rates[side].append(cpu_rate)
            seen[side] = settings
            print(
                f"  round {round_index + 1} {side:<9} {rate:10.1f} samples/s  {cpu_rate:10.1f} samples/CPU-s",
                flush=True,
            )

    for side, settings in seen.items():
        described = ", ".join(
            f"rank {r}: OMP_NUM_THREADS={o} threads={t}" for r, (o, t) in sorted(settings.items())
        )
        print(f"  {side:<9} {described}")
    if seen["torchrun"] != seen["smlaunch"]:
        print("thread settings differ between the launchers: not like for like", file=sys.stderr)
        return 1
    torchrun_rate = statistics.median(rates["torchrun"])
    ours_rate = statistics.median(rates["smlaunch"])
    ratio = ours_rate / torchrun_rate
    cpu_ratio = statistics.median(cpu_rates["smlaunch"]) / statistics.median(cpu_rates["torchrun"])
    verdict = "meets" if ratio >= 0.98 else "MISSES"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nmedian samples/s: torchrun {torchrun_rate:.1f}, smlaunch {ours_rate:.1f} (load now {load})")
    print(f"ratio smlaunch/torchrun {ratio:.3f} ({verdict} the >= 0.98 target)")
    best_ratio = max(rates["smlaunch"]) / max(rates["torchrun"])
    print(
        f"best run of each side: torchrun {max(rates['torchrun']):.1f}, "
        f"smlaunch {max(rates['smlaunch']):.1f}, ratio {best_ratio:.3f} (the least disturbed run of each)"
    )
    print(
        f"samples per CPU second (all ranks), ratio smlaunch/torchrun {cpu_ratio:.3f} "
        "(less sensitive to other load on the machine)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
