"""MPI jobs on emulated hosts: one mpirun on the master serves every host (mpi4py and torch scripts),
ranks see their own host's environment, and a failing rank is the job's root cause."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from smlaunch import contract
from tests.functional._dist_helpers import read_tar_json, run_job

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun")
needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py")

MPI4PY = """
import json, os, sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
total = comm.allreduce(rank + 1)
seen = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "SM_CURRENT_HOST",
                                   "SM_MODEL_DIR", "FOO")}
seen.update(rank=rank, size=comm.Get_size(), total=total, argv=sys.argv[1:], cwd=os.getcwd())
print("rank", rank, "on", seen["SM_CURRENT_HOST"], "total", total, flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{rank}.json"), "w") as handle:
    json.dump(seen, handle)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    raise ValueError(f"boom from rank {rank}")
comm.Barrier()
"""

TORCH = """
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env:// from the variables smlaunch.runtime.launchers.mpi.rank set
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
if dist.get_rank() == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "sum.json"), "w") as handle:
        json.dump({"sum": t.item(), "world": dist.get_world_size()}, handle)
print("rank", dist.get_rank(), "local", os.environ["LOCAL_RANK"], "sum", t.item(), flush=True)
dist.destroy_process_group()
"""

MPI = {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": '-x FOO="a b"'}}


@needs_mpi4py
def test_mpi4py_on_two_hosts_sees_each_host_and_the_torch_variables(tmp_path: Path) -> None:
    run = run_job(tmp_path, MPI4PY, base_name="mpi4py", distribution=MPI, hyperparameters={"epochs": 2})
    assert run.status == contract.STATUS_COMPLETED, run.reason + run.log[-3000:]
    members = run.tar_members()
    assert sorted(members) == ["rank0.json", "rank1.json", "rank2.json", "rank3.json"]
    for rank in range(4):
        seen = read_tar_json(members, f"rank{rank}.json")
        host = f"algo-{rank // 2 + 1}"
        assert (seen["rank"], seen["size"], seen["total"]) == (rank, 4, 10)
        assert seen["RANK"] == str(rank) and seen["LOCAL_RANK"] == str(rank % 2) and seen["WORLD_SIZE"] == "4"
        assert seen["NODE_RANK"] == str(rank // 2) and seen["SM_CURRENT_HOST"] == host
        assert seen["SM_MODEL_DIR"].endswith(f"/hosts/{host}/model") and seen["cwd"].endswith(
            f"/hosts/{host}/code"
        )
        assert seen["FOO"] == "a b" and seen["argv"] == ["--epochs", "2"]
        assert f"[{host}/rank {rank}] rank {rank} on {host} total 10" in run.log
    assert "[algo-2] MPI: the master (algo-1) runs this host's ranks" in run.log
    assert [line for line in run.log.splitlines() if line.startswith("[algo-2] ")][-1] == (
        "[algo-2] training succeeded"  # one closing line, not the master's exit code first
    )


@needs_mpi4py
def test_failing_rank_under_mpi_is_the_root_cause(tmp_path: Path) -> None:
    run = run_job(tmp_path, MPI4PY, base_name="mpi-fail", distribution=MPI, environment={"FAIL_RANK": "3"})
    assert run.status == contract.STATUS_FAILED
    reason = run.reason
    assert reason.startswith("AlgorithmError: rank 3 on host algo-2 exited with code 1"), reason
    assert "ValueError: boom from rank 3" in reason and "Traceback (most recent call last):" in reason
    # The worker waited for the master's mpirun: it never says "training succeeded" of a failed job.
    worker = [line for line in run.log.splitlines() if line.startswith("[algo-2] ")]
    assert worker[-1] == "[algo-2] training failed on the master (algo-1): exit code 1", worker
    assert "[algo-2] training succeeded" not in worker


@pytest.mark.slow
def test_torch_script_under_mpi(tmp_path: Path) -> None:
    run = run_job(tmp_path, TORCH, base_name="mpi-torch", distribution=MPI)
    assert run.status == contract.STATUS_COMPLETED, run.reason + run.log[-3000:]
    assert read_tar_json(run.tar_members(), "sum.json") == {"sum": 10.0, "world": 4}
    assert "[algo-2/rank 3] rank 3 local 1 sum 10.0" in run.log


MPI4PY_LOOP = """
import time
from mpi4py import MPI

comm = MPI.COMM_WORLD
def train_step(step):
    comm.allreduce(step)
    time.sleep(0.02)
print("rank", comm.Get_rank(), "ready", flush=True)
for step in range(100000):
    train_step(step)
"""


@needs_mpi4py
def test_fault_injected_into_a_rank_of_another_emulated_host(tmp_path: Path) -> None:
    faults = [{"kind": "crash", "host": "algo-2", "rank": 3, "after_seconds": 2, "exit_code": 9}]
    run = run_job(
        tmp_path,
        MPI4PY_LOOP,
        base_name="mpi-fault",
        distribution=MPI,
        environment={contract.SMLAUNCH_FAULTS: json.dumps(faults)},
    )
    assert run.status == contract.STATUS_FAILED
    assert run.reason.startswith("AlgorithmError: rank 3 on host algo-2 exited with code 9"), run.reason
    assert "crashes now with exit code 9" in run.reason and "train_step" in run.reason
    assert (
        "fault injection: crash of rank 3 on algo-2 with exit code 9 after 2 s: rank 3 (algo-2, pid"
        in run.log
    )


@needs_mpi4py
def test_kill_host_of_an_emulated_worker_ends_the_mpi_job(tmp_path: Path) -> None:
    faults = [{"kind": "kill_host", "host": "algo-2", "after_seconds": 2}]
    run = run_job(
        tmp_path,
        MPI4PY_LOOP,
        base_name="mpi-kill-host",
        distribution=MPI,
        environment={contract.SMLAUNCH_FAULTS: json.dumps(faults)},
    )
    assert run.status == contract.STATUS_FAILED
    assert "algo-2" in run.reason.splitlines()[0], run.reason
    # The waiting host dies, and so do its ranks under the master's mpirun (whichever comes first).
    assert "fault injection: kill_host of host algo-2 after 2 s: SIGKILL to" in run.log
