"""A host runtime forked from the early-start agent
(``smlaunch/sdk/backends/emulated/executors/process/forked.py``).

Each test runs a small driver in a new interpreter (single-threaded, as ``early_start`` is when it
forks; never a fork of pytest), which forks one host runtime over a real ``/opt/ml`` tree
(``_runtime_tree.write_host_tree``) and reports what it saw as JSON. The user's script checks what a
rank sees of its host: the host's own environment, a parent shown as ``python -m smlaunch.runtime``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._runtime_tree import write_host_tree
from tests.functional.test_runtime_host import assert_no_process_left, script_hps, write_code

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork_host is Linux only")

DRIVER = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
from smlaunch.sdk.backends.emulated.executors.process.forked import can_fork, fork_host
from smlaunch.sdk.backends.emulated.executors.process.spawn import PrivateOptMl

base, mode = Path(sys.argv[1]), sys.argv[2]
env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_", "SAGEMAKER_"))}
env.update({"SAGEMAKER_BASE_DIR": str(base), "PYTHONUNBUFFERED": "1", "FROM_THE_HOST": "yes",
            "TRAINING_JOB_NAME": "forked-job"})
report = {"can_fork": can_fork(sys.executable), "can_fork_other": can_fork("/usr/bin/python3-other")}

if mode == "set-up fails":
    # /opt/ml's parent must exist for the private mount: this one does not
    unmountable = PrivateOptMl(str(base / "missing" / "opt" / "ml"))
    try:
        fork_host(base, env, unmountable)
    except OSError as error:
        report["error"] = str(error)
    try:
        report["children"] = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        report["children"] = None
else:
    host = fork_host(base, env, None)
    if mode == "stop":
        while not (base / "model" / "started").exists():
            assert host.poll() is None
            time.sleep(0.02)
        try:
            host.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            report["timed_out"] = True
        host.send_signal(signal.SIGTERM)
    report["code"] = host.wait()
    report["poll"] = host.poll()
    report["output"] = host.stdout.read().decode()
    host.send_signal(signal.SIGTERM)  # ended and reaped: a no-op
print(json.dumps(report))
"""

RANK = r"""
import json, os, pathlib, sys, time
import psutil
parent = psutil.Process(os.getppid())
seen = {"host_variable": os.environ.get("FROM_THE_HOST"), "parent_cmdline": parent.cmdline(),
        "parent_cwd": parent.cwd(),
        "stdin": os.readlink("/proc/self/fd/0"), "current_host": os.environ["SM_CURRENT_HOST"]}
pathlib.Path(os.environ["SM_MODEL_DIR"], "seen.json").write_text(json.dumps(seen))
if os.environ.get("SM_HP_SLEEP"):
    pathlib.Path(os.environ["SM_MODEL_DIR"], "started").touch()
    time.sleep(60)
print("rank done")
"""


def drive(base: Path, mode: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(base), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_forked_host_runs_the_job_as_a_new_interpreter_would(tmp_path: Path) -> None:
    src = write_code(tmp_path, RANK)
    paths = write_host_tree(tmp_path / "algo-1", "algo-1", ["algo-1"], script_hps(src))
    report = drive(tmp_path / "algo-1", "run")
    assert report["can_fork"] is True and report["can_fork_other"] is False
    assert report["code"] == 0 and report["poll"] == 0, report["output"]
    assert "[algo-1/rank 0] rank done" in report["output"]
    assert "[algo-1] training succeeded" in report["output"]
    assert paths.success_file.exists()
    seen = json.loads((paths.model_dir / "seen.json").read_text())
    assert seen["host_variable"] == "yes" and seen["current_host"] == "algo-1"
    assert seen["parent_cmdline"] == [sys.executable, "-m", "smlaunch.runtime"]
    assert seen["parent_cwd"] == str(tmp_path / "algo-1")
    assert seen["stdin"] == "/dev/null"
    assert_no_process_left(tmp_path)


def test_a_stopped_forked_host_stops_its_rank_and_reports_the_signal(tmp_path: Path) -> None:
    src = write_code(tmp_path, RANK)
    paths = write_host_tree(tmp_path / "algo-1", "algo-1", ["algo-1"], script_hps(src, {"sleep": "1"}))
    report = drive(tmp_path / "algo-1", "stop")
    assert report["timed_out"] is True
    assert report["code"] == 128 + 15 and report["poll"] == 128 + 15, report["output"]
    assert not paths.success_file.exists()
    assert_no_process_left(tmp_path)


def test_a_host_that_cannot_be_set_up_raises_and_leaves_no_child(tmp_path: Path) -> None:
    write_host_tree(tmp_path / "algo-1", "algo-1", ["algo-1"], {contract.HP_PROGRAM: '"train.py"'})
    report = drive(tmp_path / "algo-1", "set-up fails")
    assert "could not start: " in report["error"], report["error"]
    assert "missing/opt does not exist" in report["error"] or "unshare" in report["error"], report["error"]
    assert report["children"] is None
