"""A hung distributed job: the stall watchdog dumps every rank's stack and ends the job saying
where each rank was; then a stop during a collective: SIGTERM reaches the ranks blocked in it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._dist_helpers import ROLE, run_job

# Rank 1 never reaches the all_reduce that rank 0 waits in: the classic lost-peer hang.
HANG = """
import os, time
import torch
import torch.distributed as dist

def wait_for_data():
    while True:
        time.sleep(0.1)

def sync_gradients(grad):
    dist.all_reduce(grad)

dist.init_process_group("gloo")
print("joined", dist.get_rank(), flush=True)
if dist.get_rank() == 1:
    wait_for_data()
else:
    sync_gradients(torch.ones(4))
"""


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(HANG.splitlines(), 1) if text in line)


@pytest.mark.slow
def test_hang_dumps_every_stack_and_names_where_each_rank_was(tmp_path: Path) -> None:
    run = run_job(
        tmp_path,
        HANG,
        base_name="hang",
        instance_count=1,
        processes_per_host=2,
        distribution={"torch_distributed": {"enabled": True}},
        environment={contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "6"},
        # A busy machine (another job beside this one) may take minutes to import torch in both ranks:
        # the stall clock only starts once both are under way, and nothing else here may run out.
        max_run=600,
        timeout=660,
    )
    assert run.status == contract.STATUS_FAILED
    reason = run.reason
    assert reason.startswith("AlgorithmError: Stalled: no process on host algo-1 wrote output for 6 s") or (
        reason.startswith("Stalled: no process on host algo-1")
    ), reason
    assert (
        "rank 0 (algo-1, pid" in reason
        and f"train.py:{line_of('dist.all_reduce')} in sync_gradients" in reason
    )
    assert (
        "rank 1 (algo-1, pid" in reason
        and f"train.py:{line_of('time.sleep(0.1)')} in wait_for_data" in reason
    )
    assert run.description.get("ExitCode", 124) == 124
    stacks = run.tar_members("output.tar.gz")["smlaunch-stacks-algo-1.txt"].decode()
    assert stacks.count("wait_for_data") >= 1 and stacks.count("sync_gradients") >= 1
    assert "[algo-1] stacks: " in run.log and "looks hung" in run.log


@pytest.mark.slow
@pytest.mark.timeout(600)  # generous: four ranks import torch slowly on a busy machine
def test_stop_during_a_collective_reaches_every_rank(tmp_path: Path) -> None:
    from smlaunch import LocalSession, PyTorch
    from tests.functional._local_helpers import (
        assert_no_job_processes,
        kill_leftover_jobs,
        wait_for_line,
        wait_terminal,
    )

    script = HANG.replace(
        'print("joined", dist.get_rank(), flush=True)',
        "import signal, sys\n"
        "def on_term(*_):\n"
        '    print("checkpoint on SIGTERM", dist.get_rank(), flush=True)\n'
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        'print("joined", dist.get_rank(), flush=True)',
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(script)
    session = LocalSession(tmp_path / "jobs", processes_per_host=2, stop_grace_seconds=5)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role=ROLE,
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        base_job_name="stop-collective",
        sagemaker_session=session,
    )
    try:
        estimator.fit(wait=False)
        job = estimator.latest_training_job
        assert job is not None
        for rank in range(4):
            wait_for_line(session.backend(), job.name, f"joined {rank}", timeout=420)
        time.sleep(0.5)  # rank 0 is now inside all_reduce
        job.stop()
        description = wait_terminal(session.backend(), job.name, 60)
        log = "\n".join(session.backend().log_lines(job.name))
        assert_no_job_processes(job.name, tmp_path / "jobs" / job.name)
    finally:
        kill_leftover_jobs(tmp_path / "jobs")
    assert description["TrainingJobStatus"] == contract.STATUS_STOPPED
    for rank in range(4):
        assert f"checkpoint on SIGTERM {rank}" in log, log[-3000:]
