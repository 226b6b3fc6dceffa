"""The ``sm_drivers`` channel smlaunch sends to SageMaker with a ModelTrainer job, run as SageMaker
runs it (``bash sm_train.sh``) on a host tree: the bash script and ``sm_driver.py`` (standard library
only) render v3's variables, start in the code channel, and run the entry script, the command or
``torchrun``; a failure ends the script with the job's exit code and ``output/failure``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smlaunch.sdk.train.drivers import driver_files, write_drivers
from smlaunch.train.configs import SourceCode
from smlaunch.train.distributed import Torchrun
from tests.functional._runtime_tree import write_host_tree

SCRIPT = """
import json, os, sys
rank = os.environ.get("RANK", "0")
seen = {"argv": sys.argv[1:], "cwd": os.getcwd(), "hp": os.environ.get("SM_HP_BATCH_SIZE"),
        "hosts": os.environ["SM_HOSTS"], "world": os.environ.get("WORLD_SIZE"),
        "channel": os.environ["SM_CHANNEL_TRAIN"]}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"seen{rank}.json"), "w") as handle:
    json.dump(seen, handle)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def run_drivers(tmp_path: Path, source_code: SourceCode, distributed: Any = None, **env: str) -> Any:
    base = tmp_path / "opt-ml"
    write_host_tree(
        base, "algo-1", ["algo-1"], {"batch-size": "8", "name": "a b"}, channels={"train": {}, "code": {}}
    )
    (base / "input/data/code/train.py").write_text(SCRIPT)
    drivers = base / "input/data/sm_drivers"
    write_drivers(drivers, driver_files(source_code, distributed))
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["/bin/bash", "-c", f"chmod +x {drivers}/sm_train.sh && {drivers}/sm_train.sh"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_"))},
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SAGEMAKER_BASE_DIR": str(base),
            "TRAINING_JOB_NAME": "job-1",
            **env,
        },
    )
    return base, done


def test_entry_script_runs_with_v3s_variables_and_arguments(tmp_path: Path) -> None:
    base, done = run_drivers(tmp_path, SourceCode(source_dir="src", entry_script="train.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((base / "model/seen0.json").read_text())
    assert seen["argv"] == ["--batch-size", "8", "--name", "a b"]
    assert seen["cwd"] == str(base / "input/data/code") and seen["hp"] == "8"
    assert seen["hosts"] == '["algo-1"]' and seen["channel"] == str(base / "input/data/train")
    assert "Training Container Execution Completed" in done.stdout


def test_command_runs_through_bash_with_its_quoted_args(tmp_path: Path) -> None:
    code = SourceCode(source_dir="src", command="python3 train.py --x", args=["a b", 3])
    base, done = run_drivers(tmp_path, code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((base / "model/seen0.json").read_text())["argv"] == ["--x", "a b", "3"]


def test_a_failing_script_fails_the_job_with_its_exit_code(tmp_path: Path) -> None:
    base, done = run_drivers(tmp_path, SourceCode(source_dir="src", entry_script="train.py"), EXIT_WITH="3")
    assert done.returncode == 3
    assert "exited with code 3" in (base / "output/failure").read_text()


@pytest.mark.slow
def test_torchrun_starts_process_count_per_node_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no torchrun beside this interpreter")
    code = SourceCode(source_dir="src", entry_script="train.py")
    base, done = run_drivers(tmp_path, code, Torchrun(process_count_per_node=2))
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        seen = json.loads((base / f"model/seen{rank}.json").read_text())
        assert seen["world"] == "2" and seen["argv"] == ["--batch-size", "8", "--name", "a b"]
