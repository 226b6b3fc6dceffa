"""A job's requirements environment: the second job's set-up against the first's, in one run.

    python benchmarks/requirements_env.py                   # 12 packages x 250 modules of 8 KiB
    python benchmarks/requirements_env.py --packages 4 --modules 50 --jobs

Each local process job runs in its own copy of the environment layered over the user's interpreter
(``smlaunch/runtime/requirements_cache.py``): the first job with a ``requirements.txt`` builds the
cached template with pip, then copies it; a later job with the same file only copies it. What is
measured (wall clock, median of ``--repeat`` runs, each on a fresh cache, in this one process and
machine):

- **set-up**: ``smlaunch.runtime.requirements.prepare()`` exactly as a host runtime calls it before its
  ranks start, for the first job (cold: pip installs the requirements into the template, then the
  copy) and the second (the copy), and the ratio second / first. Pip installs from local wheels
  (``--no-index --find-links``): a cold start from PyPI adds the downloads, so the ratio measured
  here is the least favourable one;
- **release**: removing the job's copy when its last host ends;
- with ``--jobs``: ``fit()`` to Completed of a one-host job that imports every package and runs one
  console script, first and second job on one ``LocalSession``.

The requirements are synthetic pure-Python wheels (``--packages`` of ``--modules`` modules of
``--module-kib`` KiB each, and one console script each), so the benchmark needs no network; the
default is about the size of a ``transformers``-sized dependency set that the user's interpreter
lacks. Target (issue 25): the second job's set-up well under the first's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SCRIPT = """import importlib, os, subprocess
for name in os.environ["BENCH_PACKAGES"].split(","):
    importlib.import_module(name)
subprocess.check_call([os.environ["BENCH_TOOL"]])
"""


def make_wheels(directory: Path, packages: int, modules: int, module_kib: int) -> list[str]:
    """Write the synthetic wheels; return their project names."""
    directory.mkdir(parents=True, exist_ok=True)
    line = "VALUE_{0} = {0!r}  # padding to a realistic module size\n"
    body = "".join(line.format(i) for i in range(module_kib * 1024 // len(line.format(0))))
    names = []
    for p in range(packages):
        name = f"smlaunch_bench_{p}"
        dist = f"{name}-1.0.dist-info"
        with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as whl:
            whl.writestr(f"{name}/__init__.py", "def main():\n    print('tool')\n")
            for m in range(modules):
                whl.writestr(f"{name}/module_{m}.py", body)
            whl.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
            whl.writestr(
                f"{dist}/WHEEL",
                "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            )
            whl.writestr(f"{dist}/entry_points.txt", f"[console_scripts]\n{name}-tool = {name}:main\n")
            whl.writestr(f"{dist}/RECORD", "")
        names.append(name)
    return names


def set_up_times(code: Path, cache: Path) -> tuple[float, float, float]:
    """Seconds of prepare() for a first and a second job on a fresh ``cache``, and of a release."""
    from smlaunch import contract
    from smlaunch.runtime.requirements import prepare

    environ = {**os.environ, contract.SMLAUNCH_REQUIREMENTS_CACHE: str(cache), "PIP_NO_INPUT": "1"}
    times = []
    for job in ("bench-first", "bench-second"):
        start = time.perf_counter()
        prepared = prepare(code, "train.py", {**environ, contract.TRAINING_JOB_NAME_ENV: job}, lambda _: None)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        prepared.release()
        released = time.perf_counter() - start
    return times[0], times[1], released


def job_times(code: Path, root: Path, names: list[str]) -> tuple[float, float]:
    """Seconds of fit() to Completed for a first and a second job with the same requirements."""
    from smlaunch import LocalSession, PyTorch

    session = LocalSession(root)
    times = []
    for job in ("bench-job-first", "bench-job-second"):
        estimator = PyTorch(
            entry_point="train.py",
            source_dir=str(code),
            role="arn:aws:iam::111122223333:role/bench",
            instance_type="ml.c5.xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            environment={"BENCH_PACKAGES": ",".join(names), "BENCH_TOOL": f"{names[0]}-tool"},
            sagemaker_session=session,
        )
        start = time.perf_counter()
        estimator.fit(logs=False, job_name=job)
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packages", type=int, default=12)
    parser.add_argument("--modules", type=int, default=250, help="modules per package")
    parser.add_argument("--module-kib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", action="store_true", help="also time two fit() calls end to end")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's runtime
    work = Path(tempfile.mkdtemp(prefix="smlaunch-reqenv-"))
    try:
        names = make_wheels(work / "wheels", args.packages, args.modules, args.module_kib)
        code = work / "src"
        code.mkdir()
        (code / "train.py").write_text(SCRIPT)
        lines = ["--no-index", f"--find-links {work / 'wheels'}", *names]
        (code / "requirements.txt").write_text("\n".join(lines) + "\n")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        size = args.packages * args.modules * args.module_kib / 1024
        print(
            f"requirements environment: {args.packages} packages, {args.packages * args.modules} modules, "
            f"{size:.0f} MiB of source (median of {args.repeat}; {os.cpu_count()} CPUs, load average {load})",
            flush=True,
        )
        runs = [set_up_times(code, work / f"cache-{i}") for i in range(args.repeat)]
        first, second, released = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{'set-up, first job (pip + copy)':>36} {first:8.2f} s", flush=True)
        print(f"{'set-up, second job (copy)':>36} {second:8.2f} s", flush=True)
        print(f"{'ratio second / first':>36} {second / first:8.3f}", flush=True)
        print(f"{'release of the copy':>36} {released:8.2f} s", flush=True)
        if args.jobs:
            cold, warm = job_times(code, work / "jobs", names)
            print(f"{'fit(), first job':>36} {cold:8.2f} s", flush=True)
            print(f"{'fit(), second job':>36} {warm:8.2f} s", flush=True)
            print(f"{'ratio second / first':>36} {warm / cold:8.3f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
