"""Fault injection in local jobs (SMLAUNCH_FAULTS): each fault ends the job the way production
would, with the status, the reason and the process tree checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

from smlaunch import contract
from tests.functional._dist_helpers import run_job

# Two hosts, one process each (no distribution): each loops, printing, until something ends it.
TRAINING_LOOP = """
import os, time
def training_step(step):
    time.sleep(0.05)
print("started on", os.environ["SM_CURRENT_HOST"], flush=True)
for step in range(100000):
    training_step(step)
    if step % 20 == 0:
        print("step", step, flush=True)
"""


def faults(*items: dict[str, object]) -> dict[str, str]:
    return {contract.SMLAUNCH_FAULTS: json.dumps(list(items))}


def test_crash_on_the_master_fails_the_job_with_its_exit_code(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        TRAINING_LOOP,
        base_name="crash-master",
        environment=faults(
            {"kind": "crash", "host": "algo-1", "rank": 0, "after_seconds": 1, "exit_code": 7}
        ),
    )
    assert run.status == contract.STATUS_FAILED
    assert run.reason.startswith("AlgorithmError: rank 0 on host algo-1 exited with code 7"), run.reason
    assert "crashes now with exit code 7" in run.reason and "training_step" in run.reason
    assert run.description.get("ExitCode", 7) == 7
    assert "[algo-1] fault injection: crash of rank 0 on algo-1 with exit code 7" in run.log
    assert "[algo-2/rank 0] started on algo-2" in run.log  # the other host ran, and was ended


def test_kill_host_fails_the_job_and_leaves_nothing_behind(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        TRAINING_LOOP,
        base_name="kill-host",
        environment=faults({"kind": "kill_host", "host": "algo-2", "after_seconds": 1}),
    )
    assert run.status == contract.STATUS_FAILED
    # The killed host is the root cause; whether its runtime or its rank (dying with it through
    # PDEATHSIG) is reported first depends on which exit the agent sees first.
    root_cause = r"AlgorithmError: (algo-2 runtime|rank \d+ on host algo-2) exited with code 137"
    assert re.match(root_cause, run.reason), run.reason
    assert "[algo-2] fault injection: kill_host of host algo-2 after 1 s" in run.log


def test_kill_of_a_rank_is_reported_as_sigkill(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        TRAINING_LOOP,
        base_name="kill-rank",
        instance_count=1,
        environment=faults({"kind": "kill", "rank": 0, "after_seconds": 1}),
    )
    assert run.status == contract.STATUS_FAILED
    assert run.reason.startswith(
        "AlgorithmError: rank 0 on host algo-1 exited with code 137 (killed by SIGKILL)"
    )
