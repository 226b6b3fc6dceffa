"""Local tuning jobs: the tuner's overhead per trial, and how busy it keeps the cores.

    python benchmarks/tuning.py                      # 6 trials of 1 s, then 3 x cores trials
    python benchmarks/tuning.py --trials 10 --work 2

What is measured (wall clock, in this one process and machine; each figure against a baseline
measured in the same run):

- **overhead per trial**: a trial script that keeps one core busy for ``--work`` seconds, then prints
  its objective. Baseline: the same script run as ``--trials`` plain local jobs one after the other
  (``fit(wait=False)``, then ``describe()`` polled every 20 ms until Completed, the next one
  started at once). Then a local tuning job of the same ``--trials`` trials, one at a time
  (``max_parallel_jobs=1``), from ``fit(wait=False)`` until ``describe()`` says Completed. The
  overhead per trial is (tuning job - baseline) / trials: what the tuner adds to each trial beyond
  the trial's own job (asking optuna, noticing the trial ended, reading its objective).
- **core usage**: a tuning job of ``--busy-trials`` trials (default 3 x the core count) with
  ``max_parallel_jobs`` = the core count. *Slots busy*: the trials' jobs' lifetimes (each trial's
  ``CreationTime`` to ``TrainingEndTime``) over cores x the tuning job's wall time, i.e. the
  fraction of the time the tuner had a trial job in every slot (*training*: the same from
  ``TrainingStartTime``, the part of it the trial's script ran); *CPU busy*: the machine's non-idle
  CPU time over the same span (``/proc/stat``; other work on the machine counts too).

Target (issue 30): the tuner keeps the cores busy with ``max_parallel_jobs`` = the core count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT = """import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--work", type=float, default=1.0)
parser.add_argument("--xv", type=float, default=0.0)
args, _ = parser.parse_known_args()
end = time.perf_counter() + args.work
spins = 0
while time.perf_counter() < end:  # one core busy, as a trial's training would keep it
    spins += 1
print(f"objective={-(args.xv - 3.0) ** 2}", flush=True)
"""
METRICS = [{"Name": "objective", "Regex": r"objective=([-0-9.e]+)"}]
TERMINAL = ("Completed", "Failed", "Stopped")


def _estimator(source: Path, root: Path, work: float, xv: float | None = None) -> Any:
    from smlaunch import LocalSession, PyTorch

    hyperparameters: dict[str, object] = {"work": work}
    if xv is not None:
        hyperparameters["xv"] = xv
    return PyTorch(
        entry_point="trial.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="local",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters=hyperparameters,
        base_job_name="bench-plain",
        sagemaker_session=LocalSession(root),
    )


def _poll(describe: Any, status_key: str, start: float, what: str) -> float:
    while (status := describe()[status_key]) not in TERMINAL:
        if time.perf_counter() - start > 1800:
            raise RuntimeError(f"{what} still {status} after 1800 s")
        time.sleep(0.02)
    if status != "Completed":
        raise RuntimeError(f"{what} ended {status}")
    return time.perf_counter() - start


def plain_jobs(source: Path, root: Path, trials: int, work: float) -> float:
    """Seconds for ``trials`` plain jobs of the trial script, one after the other."""
    start = time.perf_counter()
    for number in range(trials):
        estimator = _estimator(source, root, work, xv=float(number))
        estimator.fit(wait=False, logs=False)
        job = estimator.latest_training_job
        _poll(job.describe, "TrainingJobStatus", start, f"plain job {job.name}")
    return time.perf_counter() - start


def tuning_job(
    source: Path, root: Path, trials: int, parallel: int, work: float, name: str
) -> tuple[float, Any]:
    """Seconds from ``fit(wait=False)`` to Completed of a tuning job of ``trials`` trials,
    ``parallel`` at a time; and the tuner."""
    from smlaunch import ContinuousParameter, HyperparameterTuner

    tuner = HyperparameterTuner(
        _estimator(source, root, work),
        "objective",
        {"xv": ContinuousParameter(0.0, 10.0)},
        METRICS,
        strategy="Random",
        max_jobs=trials,
        max_parallel_jobs=parallel,
        random_seed=1,
    )
    start = time.perf_counter()
    tuner.fit(job_name=name, wait=False)
    seconds = _poll(tuner.describe, "HyperParameterTuningJobStatus", start, f"tuning job {name}")
    return seconds, tuner


def _cpu_busy() -> tuple[float, float]:
    """(non-idle, total) CPU seconds of the machine so far (``/proc/stat``)."""
    import psutil

    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    total = sum(times)
    return total - idle, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials of the overhead figure")
    parser.add_argument("--work", type=float, default=1.0, help="seconds each trial keeps a core busy")
    cores = os.cpu_count() or 1
    parser.add_argument("--busy-trials", type=int, default=3 * cores, help="trials of the core figure")
    parser.add_argument("--repeat", type=int, default=1, help="overhead figure: runs, the median kept")
    args = parser.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work_dir = Path(tempfile.mkdtemp(prefix="smlaunch-tuning-bench-"))
    source, root = work_dir / "src", work_dir / "jobs"
    source.mkdir()
    root.mkdir()
    (source / "trial.py").write_text(SCRIPT)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"tuning ({cores} CPUs, load average {load}; trials of {args.work:g} s of work)", flush=True)

    plain, tuned = [], []
    for run in range(args.repeat):
        plain.append(plain_jobs(source, root, args.trials, args.work))
        tuned.append(tuning_job(source, root, args.trials, 1, args.work, f"bench-seq-{run}")[0])
    baseline, seconds = statistics.median(plain), statistics.median(tuned)
    per_trial = (seconds - baseline) / args.trials
    print(
        f"{args.trials} trials one at a time: plain jobs {baseline:.2f} s ({baseline / args.trials:.2f} s "
        f"a job), tuning job {seconds:.2f} s = {seconds / baseline:.2f}x; "
        f"overhead {per_trial:+.3f} s a trial",
        flush=True,
    )

    busy_before = _cpu_busy()
    seconds, tuner = tuning_job(source, root, args.busy_trials, cores, args.work, "bench-cores")
    busy_after = _cpu_busy()
    summaries = tuner.analytics().training_job_summaries()
    occupied = sum((s["TrainingEndTime"] - s["CreationTime"]).total_seconds() for s in summaries)
    training = sum((s["TrainingEndTime"] - s["TrainingStartTime"]).total_seconds() for s in summaries)
    slots, trained = occupied / (cores * seconds), training / (cores * seconds)
    cpu = (busy_after[0] - busy_before[0]) / (busy_after[1] - busy_before[1])
    ideal = args.busy_trials * (baseline / args.trials) / cores
    print(
        f"{args.busy_trials} trials, {cores} at a time: {seconds:.2f} s (ideal from the baseline's job "
        f"time: {ideal:.2f} s = {seconds / ideal:.2f}x); slots busy {slots:.0%} (training {trained:.0%}); "
        f"CPU busy {cpu:.0%}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
