"""Time to the user's first line: from the ``fit()`` call to the script's first statement, in one run.

    python benchmarks/first_line.py                 # median of 5
    python benchmarks/first_line.py --repeat 9

What is measured (wall clock, all in this one process and machine, rounds alternated so that a
change in the machine's load hits every case alike):

- **smlaunch**: ``PyTorch(...).fit(wait=True, logs=True)`` (logs into a buffer) of a script that
  does not import torch and prints ``time.time()`` as its first statement; time to first line = that
  timestamp minus the moment ``fit()`` was called (with several ranks, the earliest rank). Two
  shapes: 1 host x 1 rank, and 2 hosts x 2 ranks (``torch_distributed``,
  ``LocalSession(root, processes_per_host=2)``, ``instance_count=2``).
- **baseline**: the same script as ``python script.py``, started with ``subprocess`` from this
  process; time to first line measured the same way (the interpreter's own start-up).

Bytecode: smlaunch's own packages are byte-compiled first (``compileall``, as ``pip install``
does), because where ``PYTHONDONTWRITEBYTECODE`` is set and the source tree has no up-to-date
``__pycache__``, every process of every job (agent, host runtimes, ranks) compiles the modules it
imports from source again (~60 ms per host runtime on a 2-core machine). ``--no-compile`` measures
the tree as it is; the header says which.

Each case prints its median, every run, the ratio to the baseline and the target. Targets (issue
17, item 2): at most 0.25 s for 1 x 1 and 0.35 s for 2 x 2 on a 2-core machine.
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
from pathlib import Path

SCRIPT = 'import time\nprint(f"FIRST_LINE {time.time():.6f}", flush=True)\n'
FIRST_LINE = re.compile(r"FIRST_LINE (\d+\.\d+)")
TARGETS = {(1, 1): 0.25, (2, 2): 0.35}
"""(hosts, ranks per host) -> the most seconds to the first line (median)."""


def _earliest(text: str, start: float) -> float:
    times = [float(m.group(1)) for m in FIRST_LINE.finditer(text)]
    if not times:
        raise RuntimeError(f"no first line in the output:\n{text[-2000:]}")
    return min(times) - start


def baseline(source_dir: Path) -> float:
    """Seconds from ``subprocess.run([python, script])`` to the script's first line."""
    start = time.time()
    result = subprocess.run(
        [sys.executable, "first_line.py"], cwd=source_dir, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise RuntimeError(f"python first_line.py failed ({result.returncode}): {result.stderr[-2000:]}")
    return _earliest(result.stdout, start)


def smlaunch(source_dir: Path, root: Path, hosts: int, ranks: int) -> float:
    """Seconds from the ``fit()`` call to the earliest rank's first line."""
    from smlaunch import LocalSession, PyTorch

    estimator = PyTorch(
        entry_point="first_line.py",
        source_dir=str(source_dir),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=hosts,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}} if ranks > 1 else None,
        base_job_name="first-line",
        sagemaker_session=LocalSession(root, processes_per_host=ranks),
    )
    logs = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(logs):
        estimator.fit(wait=True, logs=True)
    return _earliest(logs.getvalue(), start)


def compile_bytecode() -> list[Path]:
    """Byte-compile the ``estimator`` and ``runtime`` packages this process imports; their folders."""
    import compileall

    import smlaunch

    folders = [Path(smlaunch.__file__).parent]
    for folder in folders:
        compileall.compile_dir(folder, quiet=1)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (the median is reported)")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile smlaunch first")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="smlaunch-first-line-"))
    source_dir = work / "source"
    source_dir.mkdir()
    (source_dir / "first_line.py").write_text(SCRIPT)
    cases = [(1, 1), (2, 2)]
    before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"time to the first line (median of {args.repeat}; {os.cpu_count()} CPUs)", flush=True)
    if args.no_compile:
        print(f"  bytecode: as found (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')})")
    else:
        print(f"  bytecode: compiled first: {', '.join(str(f) for f in compile_bytecode())}")
    print(f"  load average before: {before}", flush=True)
    runs: dict[str, list[float]] = {"python": [], **{f"{h}x{r}": [] for h, r in cases}}
    for _ in range(args.repeat):
        runs["python"].append(baseline(source_dir))
        for hosts, ranks in cases:
            runs[f"{hosts}x{ranks}"].append(smlaunch(source_dir, work / "jobs", hosts, ranks))
    base = statistics.median(runs["python"])
    print(f"  {'python script.py':<26} {base:6.3f} s   runs {[round(x, 3) for x in runs['python']]}")
    met = True
    for hosts, ranks in cases:
        values = runs[f"{hosts}x{ranks}"]
        median = statistics.median(values)
        target = TARGETS[(hosts, ranks)]
        met = met and median <= target
        verdict = "meets" if median <= target else "MISSES"
        print(
            f"  {f'smlaunch {hosts} host x {ranks} rank':<26} {median:6.3f} s   "
            f"ratio {median / base:5.1f}x python   target <= {target:.2f} s: {verdict}   "
            f"runs {[round(x, 3) for x in values]}",
            flush=True,
        )
    after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"  load average after: {after}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
