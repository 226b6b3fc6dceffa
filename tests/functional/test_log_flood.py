"""The log pipeline under a flood: rank -> host runtime (prefix) -> agent (logs) -> the notebook.

Every line a rank prints arrives exactly once, whole, in order, with its prefix, in
``logs/<host>.log`` and through ``log_lines``, however the reads in 64 KiB chunks cut the stream:
lines of every length, multi-byte characters, lines longer than a chunk, and a last line without
its newline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    wait_terminal,
)

LINES = 50_000
LONG_EVERY = 10_000
LONG_CHARS = 150_000

FLOOD_SCRIPT = f"""
import os
import sys

rank = int(os.environ["RANK"])
for i in range({LINES}):
    if i % {LONG_EVERY} == 7:
        print(f"rank {{rank}} long {{i}} " + "é" * {LONG_CHARS})
    else:
        print(f"rank {{rank}} line {{i:06d}} loss=0.{{i % 997:03d}} é€ " + "x" * (i % 53))
    if i % 5000 == 0:
        print(f"rank {{rank}} stderr {{i}}", file=sys.stderr)
sys.stdout.write(f"rank {{rank}} partial last line")
sys.stdout.flush()
"""


def _expected(rank: int) -> list[str]:
    lines = []
    for i in range(LINES):
        if i % LONG_EVERY == 7:
            lines.append(f"rank {rank} long {i} " + "é" * LONG_CHARS)
        else:
            lines.append(f"rank {rank} line {i:06d} loss=0.{i % 997:03d} é€ " + "x" * (i % 53))
    lines.append(f"rank {rank} partial last line")
    return lines


def _of_rank(lines: list[str], rank: int) -> list[str]:
    prefix = f"[algo-1/rank {rank}] "
    return [line[len(prefix) :] for line in lines if line.startswith(prefix) and " stderr " not in line]


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.slow
def test_flood_of_two_ranks_arrives_whole_in_order_exactly_once(tmp_path: Path) -> None:
    backend = LocalSession(tmp_path / "jobs", processes_per_host=2).backend()
    spec = make_spec(tmp_path, "flood", FLOOD_SCRIPT, instance_count=1, ddp=True)
    backend.submit(job_request(spec))
    streamed = list(backend.log_lines(spec.TrainingJobName, follow=True))
    assert wait_terminal(backend, spec.TrainingJobName)["TrainingJobStatus"] == contract.STATUS_COMPLETED

    host_log = backend.job_dir(spec.TrainingJobName).host_log("algo-1").read_text(encoding="utf-8")
    host_lines = host_log.splitlines()
    assert host_log.endswith("\n")  # the partial last line was completed, never glued to another
    for rank in (0, 1):
        expected = _expected(rank)
        assert _of_rank(host_lines, rank) == expected
        assert _of_rank(streamed, rank) == expected
        stderr = [line for line in host_lines if line.startswith(f"[algo-1/rank {rank}] rank {rank} stderr ")]
        assert len(stderr) == LINES // 5000
    # No line was cut or merged: every line of the host's log is one printed line with its prefix.
    assert all(
        line.startswith(("[algo-1/rank 0] rank 0 ", "[algo-1/rank 1] rank 1 ", "[algo-1]"))
        for line in host_lines
    )
    assert_no_job_processes(spec.TrainingJobName, backend.job_dir(spec.TrainingJobName).path)


CHATTY_SCRIPT = """
import sys

for i in range(200000):
    sys.stdout.write(f"step {i:06d} loss=0.123456 lr=0.000100\\n")
sys.stdout.write("no newline at exit")
"""


def test_a_notebook_that_stops_reading_never_holds_the_job_back(tmp_path: Path) -> None:
    # The follower takes one block and then reads nothing until the job has ended: the rank, the
    # host runtime and the agent never wait for it (the job completes meanwhile), the host log has
    # every line, and the follower then catches up with every line, the partial last one included.
    backend = LocalSession(tmp_path / "jobs").backend()
    spec = make_spec(tmp_path, "chatty", CHATTY_SCRIPT, instance_count=1)
    backend.submit(job_request(spec))
    follower = backend.log_blocks(spec.TrainingJobName, follow=True)
    streamed = list(next(follower))
    assert wait_terminal(backend, spec.TrainingJobName)["TrainingJobStatus"] == contract.STATUS_COMPLETED
    for block in follower:
        streamed.extend(block)

    expected = [f"[algo-1/rank 0] step {i:06d} loss=0.123456 lr=0.000100" for i in range(200000)]
    expected.append("[algo-1/rank 0] no newline at exit")
    host_lines = backend.job_dir(spec.TrainingJobName).host_log("algo-1").read_text(encoding="utf-8")
    assert [line for line in host_lines.splitlines() if line.startswith("[algo-1/rank 0] ")] == expected
    assert [line for line in streamed if line.startswith("[algo-1/rank 0] ")] == expected
    assert re.fullmatch(r"\[smlaunch\] Completed in \d+ s; model: file://\S+/model\.tar\.gz", streamed[-1])
