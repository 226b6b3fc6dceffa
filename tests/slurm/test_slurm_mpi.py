"""MPI (``distribution={"mpi": ...}``) on the real two-node test cluster (``conftest.py``).

The master host's ``mpirun`` starts each host's ``orted`` as a step of the job on that host's node
(``srun --overlap``, :mod:`smlaunch.contract.mpi_slurm`): a 2 nodes x 2 ranks job in the style of the
SageMaker Horovod/MPI examples trains to a correct ``model.tar.gz`` and every rank reports the
node Slurm ran it on (algo-2's ranks on node2, never the master's node: both test nodes have the
address 127.0.0.1, so a local emulation would put every rank on node1) with its own host's
environment and literal ``/opt/ml`` tree; a crash on one rank of algo-2 fails the job naming the
host and rank and ends the other ranks; ``stop()`` reaches every rank on both nodes. After every
test no process of the job is left and Slurm runs nothing of it (the ``session`` fixture).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from smlaunch import PyTorch, contract
from smlaunch.runtime.requirements_cache import READY_MARKER
from smlaunch.sdk.sessions.slurm import SlurmSession
from tests._wheels import make_wheel
from tests.functional._local_helpers import wait_for_line, wait_terminal
from tests.security.test_requirements_cache import RANK_UNDER_MPI
from tests.slurm.conftest import JOB_TIMEOUT

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py"),
]

TRAIN = """
import argparse, json, os, signal, time

import numpy as np
from mpi4py import MPI


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--sigterm-dir", type=str, default="")
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
    parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
    return parser.parse_args()


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    node = os.environ["SLURMD_NODENAME"]

    def on_sigterm(signum, frame):  # a checkpoint would be saved here; then mpirun ends the rank
        if args.sigterm_dir:
            with open(os.path.join(args.sigterm_dir, f"rank-{rank}"), "w") as handle:
                handle.write(f"{node} {args.current_host}")

    signal.signal(signal.SIGTERM, on_sigterm)
    print(f"rank {rank}/{size} local {local_rank} on {node} as {args.current_host}", flush=True)
    with open("/opt/ml/input/config/resourceconfig.json") as handle:
        tree_host = json.load(handle)["current_host"]
    # Each rank fits y = 3x + 1 on its own shard; gradients are averaged with allreduce (Horovod style).
    rng = np.random.default_rng(rank)
    x = rng.uniform(-1, 1, 256)
    y = 3 * x + 1
    w = np.zeros(2)
    for epoch in range(args.epochs * 10):
        error = w[0] * x + w[1] - y
        grad = np.array([np.mean(error * x), np.mean(error)]) * 2
        total = np.zeros(2)
        comm.Allreduce(grad, total, op=MPI.SUM)
        w -= args.lr * total / size
        if rank == args.fail_rank and epoch == 5:
            raise RuntimeError(f"rank {rank} on {node} diverged")
    seen = {
        "rank": rank, "size": size, "local_rank": local_rank, "node": node,
        "step_nodes": os.environ["SLURM_STEP_NODELIST"], "host": args.current_host,
        "tree_host": tree_host, "model_dir": args.model_dir, "hosts": args.hosts,
    }
    with open(os.path.join("/opt/ml/model", f"rank-{rank}.json"), "w") as handle:
        json.dump(seen, handle)
    if rank == 0:
        with open(os.path.join(args.model_dir, "model.json"), "w") as handle:
            json.dump({"w": w[0], "b": w[1]}, handle)
    if os.environ.get("SLEEP_AFTER"):
        time.sleep(float(os.environ["SLEEP_AFTER"]))


if __name__ == "__main__":
    main()
"""


def _estimator(
    session: SlurmSession, tmp_path: Path, environment: dict[str, str] | None = None, **hyperparameters: Any
) -> PyTorch:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(textwrap.dedent(TRAIN))
    return PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        instance_type="ml.c5.xlarge",
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
        # The two test nodes are one machine with one host name, and OpenMPI names its shared-memory
        # (vader) segments by host name, job and local rank: they would collide across the nodes.
        # Real nodes are separate machines; here the ranks talk over TCP, on 127.0.0.1 (both nodes'
        # address) only, daemons and ranks alike.
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 2,
                "custom_mpi_options": (
                    "-mca btl self,tcp -mca btl_tcp_if_include lo -mca oob_tcp_if_include lo"
                ),
            }
        },
        base_job_name="slurm-mpi",
        environment=environment,
        hyperparameters={"epochs": 20, "lr": 0.1, **hyperparameters},
    )


def _model_files(described: dict[str, Any]) -> dict[str, Any]:
    """The JSON files of a completed job's ``model.tar.gz``, by name."""
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        files = {m.name: archive.extractfile(m) for m in archive.getmembers() if m.isfile()}
        return {name: json.loads(f.read()) for name, f in files.items() if f is not None}


def test_mpi_two_nodes_two_ranks_each_rank_on_its_own_node(
    session: SlurmSession,
    tmp_path: Path,
) -> None:
    estimator = _estimator(session, tmp_path)
    estimator.fit(wait=False)
    job = estimator.latest_training_job.name
    described = wait_terminal(session.backend(), job, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    data = _model_files(described)
    assert sorted(data) == ["model.json", "rank-0.json", "rank-1.json", "rank-2.json", "rank-3.json"]
    assert abs(data["model.json"]["w"] - 3) < 0.01 and abs(data["model.json"]["b"] - 1) < 0.01
    for rank in range(4):
        seen = data[f"rank-{rank}.json"]
        host, node = f"algo-{rank // 2 + 1}", f"node{rank // 2 + 1}"
        assert (seen["rank"], seen["size"], seen["local_rank"]) == (rank, 4, rank % 2), seen
        assert (seen["node"], seen["step_nodes"]) == (node, node), seen
        assert (seen["host"], seen["tree_host"]) == (host, host), seen
        assert seen["model_dir"].endswith(f"/hosts/{host}/model") and seen["hosts"] == ["algo-1", "algo-2"]
    log = "\n".join(session.backend().log_lines(job))
    assert "[algo-2/rank 3] rank 3/4 local 1 on node2 as algo-2" in log, log[-3000:]
    assert "[algo-2] MPI: the master (algo-1) starts this host's ranks through Slurm" in log, log[-3000:]


def test_mpi_crash_on_a_rank_of_algo_2_fails_the_job_naming_host_and_rank(
    session: SlurmSession,
    tmp_path: Path,
) -> None:
    # SLEEP_AFTER: the other ranks would outlive a crash that did not end the job
    estimator = _estimator(session, tmp_path, {"SLEEP_AFTER": "600"}, **{"fail-rank": 3})
    estimator.fit(wait=False)
    job = estimator.latest_training_job.name
    described = wait_terminal(session.backend(), job, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = described["FailureReason"]
    assert "rank 3 on host algo-2" in reason and "rank 3 on node2 diverged" in reason, reason
    log = "\n".join(session.backend().log_lines(job))
    assert "[algo-2/rank 3] rank 3/4 local 1 on node2 as algo-2" in log, log[-3000:]


def test_mpi_stop_reaches_every_rank_on_both_nodes(
    session: SlurmSession,
    tmp_path: Path,
) -> None:
    """``mpirun`` gets exactly one SIGTERM (from Slurm, in the master's step) and passes it to
    every rank through each ``orted``. The handler records and returns: a rank that exited non-zero
    from it would make mpi4py's runner call ``MPI_Abort`` (as under SageMaker's toolkit, which runs
    ``python -m mpi4py`` too), killing the ranks whose handler had not run yet."""
    marks = tmp_path / "sigterm"
    marks.mkdir()
    estimator = _estimator(session, tmp_path, {"SLEEP_AFTER": "600"}, **{"sigterm-dir": str(marks)})
    estimator.fit(wait=False)
    job = estimator.latest_training_job.name
    backend = session.backend()
    wait_for_line(backend, job, "[algo-2/rank 3] rank 3/4 local 1 on node2", timeout=JOB_TIMEOUT)
    estimator.latest_training_job.stop()
    described = wait_terminal(backend, job, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED, described.get("FailureReason")
    seen = {path.name: path.read_text() for path in marks.iterdir()}
    assert seen == {f"rank-{r}": f"node{r // 2 + 1} algo-{r // 2 + 1}" for r in range(4)}, seen


def test_mpi_ranks_on_both_nodes_write_only_their_jobs_own_requirements_environment(
    session: SlurmSession,
    tmp_path: Path,
) -> None:
    """algo-2's ranks are started by an orted step, not by algo-2's runtime: sealed all the same."""
    estimator = _estimator(session, tmp_path)
    (tmp_path / "src" / "train.py").write_text(RANK_UNDER_MPI)
    probe = make_wheel(tmp_path / "wheels", "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 1\n"})
    (tmp_path / "src" / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{probe}\n")
    estimator.fit(wait=False)
    job = estimator.latest_training_job.name
    described = wait_terminal(session.backend(), job, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    data = _model_files(described)
    cache = session.root / ".requirements"
    template = next(p.name for p in cache.iterdir() if (p / READY_MARKER).is_file())
    for rank in range(4):
        node = f"node{rank // 2 + 1}"
        assert data[f"rank-{rank}.json"] == {"node": node, template: "OSError", job: "written"}, data
    assert not list((cache / template).glob("rank-*"))
