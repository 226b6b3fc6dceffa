"""Scale of the local backend: time to Completed for a trivial job as the emulated hosts grow.

    python benchmarks/scale.py                  # 1, 4, 16, 32 hosts x 1 rank; 1 host x 32 ranks
    python benchmarks/scale.py --hosts 1 4      # a subset

What is measured (wall clock, median of ``--repeat`` runs, in this one process and machine):

- **time to Completed**: ``PyTorch(...).fit(wait=False)`` of a script that only prints a line,
  from the call until ``describe()`` (polled every 20 ms) says Completed, for N emulated hosts of 1 rank each
  (no ``distribution``: SageMaker runs the script once per host) and for 1 host x 32 ranks
  (``torch_distributed``). Time per host = (T(N) - T(1)) / (N - 1): what each host adds.
- **agent CPU while the ranks run**: the same jobs with a script that sleeps ``--sleep`` seconds;
  once every rank has started and the agent says Training (a job that stages nothing starts its
  hosts before the agent loads itself: that loading is start-up, not supervision), the agent
  process's own CPU time (user + system, children excluded) over the next ``--sleep - 1`` seconds,
  as a percentage of one core.

Targets (issue 17): linear, no more than 0.15 s added per host; the agent below 5 % of one core
while the ranks run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT = """import argparse, os, pathlib, time
parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--markers", type=str, default="")
args, _ = parser.parse_known_args()
rank = os.environ.get("RANK", "0")
print(f"hello from {os.environ.get('SM_CURRENT_HOST')} rank {rank}", flush=True)
if args.markers:
    pathlib.Path(args.markers, f"{os.environ.get('SM_CURRENT_HOST')}-{rank}").touch()
time.sleep(args.sleep)
"""


def _estimator(source: Path, root: Path, hosts: int, ranks: int, hyperparameters: dict[str, object]) -> Any:
    from smlaunch import LocalSession, PyTorch

    return PyTorch(
        entry_point="trivial.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=hosts,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}} if ranks > 1 else None,
        hyperparameters=hyperparameters,
        base_job_name="scale",
        sagemaker_session=LocalSession(root, processes_per_host=ranks, instance_count_quota=64),
    )


def time_to_completed(source: Path, root: Path, hosts: int, ranks: int) -> float:
    """Seconds from ``fit()`` to its return with the job Completed."""
    estimator = _estimator(source, root, hosts, ranks, {})
    start = time.perf_counter()
    estimator.fit(wait=False, logs=False)
    job = estimator.latest_training_job
    # Poll every 20 ms: ``wait()`` backs off (0.5 s, x1.5 each poll), which would measure its own
    # schedule rather than the job.
    while (status := job.describe()["TrainingJobStatus"]) not in ("Completed", "Failed", "Stopped"):
        if time.perf_counter() - start > 600:
            raise RuntimeError(f"{hosts} host(s) x {ranks} rank(s) still {status} after 600 s")
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if status != "Completed":
        raise RuntimeError(f"{hosts} host(s) x {ranks} rank(s) ended {status}")
    return elapsed


def agent_cpu_percent(source: Path, root: Path, hosts: int, ranks: int, sleep: float) -> float:
    """The agent's CPU use, in % of one core, while every rank sleeps."""
    import psutil

    markers = Path(tempfile.mkdtemp(dir=root, prefix="markers-"))
    estimator = _estimator(source, root, hosts, ranks, {"sleep": sleep, "markers": str(markers)})
    estimator.fit(wait=False, logs=False)
    job = estimator.latest_training_job
    deadline = time.monotonic() + 300
    while len(list(markers.iterdir())) < hosts * ranks or job.describe()["SecondaryStatus"] != "Training":
        if time.monotonic() > deadline:
            raise RuntimeError("the ranks did not all start within 300 s")
        time.sleep(0.05)
    agent = psutil.Process(int(json.loads((root / job.name / "agent.json").read_text())["pid"]))
    before, t0 = agent.cpu_times(), time.perf_counter()
    time.sleep(max(0.5, sleep - 1))
    after, t1 = agent.cpu_times(), time.perf_counter()
    job.wait(logs=False)
    used = (after.user - before.user) + (after.system - before.system)
    return 100 * used / (t1 - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--ranks", type=int, default=32, help="ranks of the 1-host job (0: skip it)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=4.0, help="rank sleep for the agent CPU figure")
    args = parser.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = Path(tempfile.mkdtemp(prefix="smlaunch-scale-"))
    (work / "src").mkdir()
    (work / "jobs").mkdir()
    (work / "src" / "trivial.py").write_text(SCRIPT)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"scale (median of {args.repeat}; {os.cpu_count()} CPUs, load average {load})", flush=True)
    shapes = [(n, 1) for n in args.hosts] + ([(1, args.ranks)] if args.ranks > 1 else [])
    print(f"{'shape':>16} {'to Completed s':>15} {'per host s':>11} {'agent CPU %':>12}", flush=True)
    single: float | None = None
    for hosts, ranks in shapes:
        seconds = statistics.median(
            time_to_completed(work / "src", work / "jobs", hosts, ranks) for _ in range(args.repeat)
        )
        cpu = agent_cpu_percent(work / "src", work / "jobs", hosts, ranks, args.sleep)
        if hosts == 1 and ranks == 1:
            single = seconds
        per_host = (
            f"{(seconds - single) / (hosts - 1):11.3f}" if single is not None and hosts > 1 else f"{'-':>11}"
        )
        print(f"{f'{hosts} x {ranks}':>16} {seconds:15.2f} {per_host} {cpu:12.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
