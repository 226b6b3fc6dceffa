"""Launch overhead of smlaunch's local backend against plain ``python`` and ``torchrun``, in one run.

    python benchmarks/launch_overhead.py            # trivial script and quickstart
    python benchmarks/launch_overhead.py --quick    # trivial script only

What is measured (wall clock, median of ``--repeat`` runs, all in this one process and machine):

- **end to end**: from the call that starts the work until it has returned. For smlaunch that is
  ``PyTorch(...).fit()`` with logs streamed (into a buffer): validation, code packaging, the agent,
  one ``python -m smlaunch.runtime`` per host, the ranks, artifact packaging, and the terminal state.
  Baselines: ``python script.py`` (1 rank) and ``torchrun --standalone --nproc-per-node 4 script.py``
  (4 ranks); smlaunch runs the same script as 1 host x 1 rank and as 1 host x 4 ranks
  (``torch_distributed``), so each pair does the same work. Ratio = smlaunch / baseline.
- **overhead before the user's first line**: the trivial script prints ``time.time()`` as its first
  statement; overhead = that timestamp minus the moment ``fit()`` was called (for 4 ranks, the
  earliest rank). Plain python's own start-up, measured the same way, is printed for reference.

Targets (issue 2): end to end within 1.3x of torchrun; under 1 s of overhead before the first line.
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
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
TRIVIAL = 'import time\nprint(f"FIRST_LINE {time.time():.6f}", flush=True)\n'
FIRST_LINE = re.compile(r"FIRST_LINE (\d+\.\d+)")


def _first_line_times(text: str) -> list[float]:
    return [float(m.group(1)) for m in FIRST_LINE.finditer(text)]


def run_subprocess(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float | None]:
    """(seconds end to end, seconds until the earliest first line) of one command."""
    start = time.time()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.time() - start
    if result.returncode != 0:
        raise RuntimeError(
            f"{argv} failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    firsts = _first_line_times(result.stdout)
    return elapsed, (min(firsts) - start) if firsts else None


def run_smlaunch(
    source_dir: Path, entry_point: str, ranks: int, root: Path, hyperparameters: dict[str, object]
) -> tuple[float, float | None]:
    """(seconds end to end, seconds until the earliest first line) of one ``fit()``."""
    from smlaunch import LocalSession, PyTorch

    estimator = PyTorch(
        entry_point=entry_point,
        source_dir=str(source_dir),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}} if ranks > 1 else None,
        hyperparameters=hyperparameters,
        base_job_name="bench",
        sagemaker_session=LocalSession(root, processes_per_host=ranks),
    )
    logs = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(logs):
        estimator.fit(wait=True, logs=True)
    elapsed = time.time() - start
    firsts = _first_line_times(logs.getvalue())
    return elapsed, (min(firsts) - start) if firsts else None


def median_of(repeat: int, measure: Callable[[], tuple[float, float | None]]) -> tuple[float, float | None]:
    runs = [measure() for _ in range(repeat)]
    firsts = [f for _, f in runs if f is not None]
    return statistics.median(r for r, _ in runs), (statistics.median(firsts) if firsts else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per trivial-script measurement")
    parser.add_argument("--quickstart-repeat", type=int, default=1, help="runs per quickstart measurement")
    parser.add_argument("--quick", action="store_true", help="skip the quickstart measurements")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="smlaunch-bench-"))
    trivial_dir = work / "trivial"
    trivial_dir.mkdir()
    (trivial_dir / "trivial.py").write_text(TRIVIAL)
    env = dict(
        os.environ,
        SM_MODEL_DIR=str(work / "model"),
        SM_OUTPUT_DATA_DIR=str(work / "output"),
        OMP_NUM_THREADS="1",
    )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    rows: list[tuple[str, str, float, float, float | None]] = []

    def pair(
        label: str, baseline: str, base: tuple[float, float | None], ours: tuple[float, float | None]
    ) -> None:
        rows.append((label, baseline, base[0], ours[0], ours[1]))
        print(
            f"  {label:<28} {baseline:<9} {base[0]:7.2f} s   smlaunch {ours[0]:7.2f} s   "
            f"ratio {ours[0] / base[0]:5.2f}x",
            flush=True,
        )

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    cpus = os.cpu_count()
    print(f"launch overhead (median of {args.repeat}; {cpus} CPUs, load average {load})", flush=True)
    python_trivial = median_of(
        args.repeat, lambda: run_subprocess([sys.executable, "trivial.py"], trivial_dir, env)
    )
    pair(
        "trivial script, 1 rank",
        "python",
        python_trivial,
        median_of(args.repeat, lambda: run_smlaunch(trivial_dir, "trivial.py", 1, work / "jobs", {})),
    )
    ours_4 = median_of(args.repeat, lambda: run_smlaunch(trivial_dir, "trivial.py", 4, work / "jobs", {}))
    pair(
        "trivial script, 4 ranks",
        "torchrun",
        median_of(args.repeat, lambda: run_subprocess([*torchrun, "trivial.py"], trivial_dir, env)),
        ours_4,
    )
    if not args.quick:
        hps = {"epochs": 30}
        qs_args = ["train.py", "--epochs", "30"]
        pair(
            "quickstart, 1 rank",
            "python",
            median_of(
                args.quickstart_repeat, lambda: run_subprocess([sys.executable, *qs_args], QUICKSTART, env)
            ),
            median_of(
                args.quickstart_repeat, lambda: run_smlaunch(QUICKSTART, "train.py", 1, work / "jobs", hps)
            ),
        )
        pair(
            "quickstart, 4 ranks",
            "torchrun",
            median_of(args.quickstart_repeat, lambda: run_subprocess([*torchrun, *qs_args], QUICKSTART, env)),
            median_of(
                args.quickstart_repeat, lambda: run_smlaunch(QUICKSTART, "train.py", 4, work / "jobs", hps)
            ),
        )

    print("\noverhead before the user's first line (fit() called -> script's first statement):")
    first_1 = rows[0][4]
    print(f"  smlaunch, 1 rank:  {first_1:.3f} s   (target < 1 s)" if first_1 is not None else "  n/a")
    if ours_4[1] is not None:
        print(f"  smlaunch, 4 ranks: {ours_4[1]:.3f} s   (earliest rank)")
    if python_trivial[1] is not None:
        print(f"  plain python start-up for reference: {python_trivial[1]:.3f} s")
    print("\nratios vs torchrun (target <= 1.3x):")
    for label, baseline, base, ours, _ in rows:
        if baseline == "torchrun":
            verdict = "meets" if ours / base <= 1.3 else "MISSES"
            print(f"  {label:<28} {ours / base:5.2f}x  {verdict} the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
