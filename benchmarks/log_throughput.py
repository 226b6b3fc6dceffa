"""Log pipeline throughput: a chatty script under ``fit()`` against the same script into a pipe.

    python benchmarks/log_throughput.py                # 1 rank x 300,000 lines, 4 ranks x 100,000
    python benchmarks/log_throughput.py --repeat 5

What is measured (wall clock, median of ``--repeat`` runs, all in this one process and machine):

- **baseline**: ``python flood.py`` with its stdout into a pipe that this process drains (1 rank),
  and 4 such processes at once, each pipe drained by its own thread (4 ranks). The script runs
  with ``PYTHONUNBUFFERED=1``, as every rank does under smlaunch (``host_environment`` in
  ``smlaunch/sdk/backends/emulated/layout.py``, as SageMaker's framework containers set it): one write
  per line in both cases, whatever the caller's environment says.
- **smlaunch**: ``PyTorch(...).fit(logs=True)`` of the same script on one local host (1 rank, and
  4 ranks with ``torch_distributed``), logs streamed into a buffer: every line goes rank -> host
  runtime (prefix ``[algo-1/rank R] ``) -> agent (``logs/algo-1.log``, ``logs/job.log``) -> the
  notebook. The run checks that every line arrived.

Each line is ~60 bytes. Ratio = smlaunch / baseline. Target (issue 17): <= 1.3x for both.
For reference, the same ``fit()`` of a script printing nothing is timed too: that part is the job's
start-up and end (agent, host runtime, packaging; issue 17 item 2), not the log pipeline, so
"pipeline alone" is ``(flood - quiet) / python``: the log pipeline's share, start-up left out.
"end of job" is from the time the rank's last line was written (the script prints it) to
``fit()`` returning: the rank's exit, the host runtime's, the agent's packaging and state, and the
notebook noticing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FLOOD = """\
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=300000)
args, _ = parser.parse_known_args()
rank = int(os.environ.get("RANK", "0"))
out = sys.stdout
for i in range(args.lines):
    out.write(f"rank {rank} step {i:07d} loss=0.123456 lr=0.000100 throughput=1234.5\\n")
out.write(f"rank {rank} done at {time.time():.6f}\\n")
out.flush()
"""


def run_plain(script: Path, lines: int, processes: int) -> float:
    """Seconds for ``processes`` copies of the script writing into pipes this process drains."""
    start = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), "--lines", str(lines)],
            env=dict(os.environ, RANK=str(rank), PYTHONUNBUFFERED="1"),
            stdout=subprocess.PIPE,
        )
        for rank in range(processes)
    ]
    drains = [threading.Thread(target=proc.stdout.read) for proc in procs]  # type: ignore[union-attr]
    for drain in drains:  # every pipe drained at once, as the host runtime reads its ranks
        drain.start()
    for drain, proc in zip(drains, procs, strict=True):
        drain.join()
        proc.wait()
    return time.time() - start


def run_smlaunch(source_dir: Path, lines: int, ranks: int, root: Path) -> tuple[float, float]:
    """Seconds of one ``fit()`` of the script, and from its last line to ``fit()`` returning;
    raises when a line went missing."""
    from smlaunch import LocalSession, PyTorch

    estimator = PyTorch(
        entry_point="flood.py",
        source_dir=str(source_dir),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}} if ranks > 1 else None,
        hyperparameters={"lines": lines},
        base_job_name="bench-logs",
        sagemaker_session=LocalSession(root, processes_per_host=ranks),
    )
    logs = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(logs):
        estimator.fit(wait=True, logs=True)
    returned = time.time()
    text = logs.getvalue()
    got = sum(1 for line in text.splitlines() if "] rank " in line and " step " in line)
    if got != lines * ranks:
        raise RuntimeError(f"{got} of {lines * ranks} lines reached the notebook")
    last = max(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if " done at " in line)
    return returned - start, returned - last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    parser.add_argument("--lines", type=int, default=300000, help="lines of the 1-rank case")
    parser.add_argument("--lines-per-rank", type=int, default=100000, help="lines per rank, 4 ranks")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="smlaunch-bench-logs-"))
    source = work / "code"
    source.mkdir()
    script = source / "flood.py"
    script.write_text(FLOOD)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"log throughput (median of {args.repeat}; {os.cpu_count()} CPUs, load average {load})", flush=True)
    verdicts = []
    for label, lines, ranks in (
        (f"1 rank x {args.lines:,} lines", args.lines, 1),
        (f"4 ranks x {args.lines_per_rank:,} lines", args.lines_per_rank, 4),
    ):
        plain, ours, quiet, ends = [], [], [], []
        for _ in range(args.repeat):  # alternate, so that load changes hit both alike
            plain.append(run_plain(script, lines, ranks))
            elapsed, end = run_smlaunch(source, lines, ranks, work / "jobs")
            ours.append(elapsed)
            ends.append(end)
            quiet.append(run_smlaunch(source, 0, ranks, work / "jobs")[0])
        base, mine, still = statistics.median(plain), statistics.median(ours), statistics.median(quiet)
        ratio = mine / base
        verdicts.append((label, ratio))
        print(
            f"  {label:<26} python {base:6.2f} s   smlaunch {mine:6.2f} s   ratio {ratio:5.2f}x   "
            f"(printing nothing: {still:5.2f} s; pipeline alone {(mine - still) / base:5.2f}x; "
            f"end of job {statistics.median(ends):5.3f} s)",
            flush=True,
        )
    print("\nratios vs the plain script (target <= 1.3x):")
    for label, ratio in verdicts:
        print(f"  {label:<26} {ratio:5.2f}x  {'meets' if ratio <= 1.3 else 'MISSES'} the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
