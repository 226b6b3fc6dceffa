"""A SDK v3 training cell, unchanged but for its imports, on the real two-node Slurm test cluster
(``conftest.py``): ``ModelTrainer(sagemaker_session=SlurmSession(...))``.

``Torchrun``: 2 hosts x 2 ranks whose ranks run on the node Slurm gave their host, read v3's
variables (``SM_MASTER_ADDR``/``PORT``, ``SM_HOST_COUNT``, ``SM_CURRENT_HOST_RANK``,
``SM_SOURCE_DIR``, ``SM_HP_*``...), all-reduce across the nodes and leave their files in
``model.tar.gz``. ``MPI``: the same over ``mpirun`` with ``mpi_additional_options``, the master
starting algo-2's ranks on node2 through Slurm. After every test no process of the job is left and
Slurm runs nothing of it (the ``session`` fixture).
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from smlaunch import contract
from smlaunch.sdk.sessions.slurm import SlurmSession

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311"

TORCHRUN_SCRIPT = """
import argparse, json, os
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float)
args = parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.txt")) as handle:
    lines = handle.read().split()
seen = {
    "rank": dist.get_rank(), "world": dist.get_world_size(), "total": total.item(),
    "local_rank": int(os.environ["LOCAL_RANK"]), "node": os.environ["SLURMD_NODENAME"],
    "lr": args.learning_rate, "hp": os.environ["SM_HP_LEARNING_RATE"], "lines": lines,
    "cwd": os.getcwd() == os.environ["SM_SOURCE_DIR"], "host": os.environ["SM_CURRENT_HOST"],
    "host_rank": os.environ["SM_CURRENT_HOST_RANK"], "host_count": os.environ["SM_HOST_COUNT"],
    "master": [os.environ["SM_MASTER_ADDR"], os.environ["SM_MASTER_PORT"]],
    "torch_master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]],
    "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]), "toolkit": "SM_MODULE_DIR" in os.environ,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
dist.destroy_process_group()
"""

MPI_SCRIPT = """
import json, os, sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
seen = {
    "rank": comm.Get_rank(), "world": comm.Get_size(), "total": total, "argv": sys.argv[1:],
    "node": os.environ["SLURMD_NODENAME"], "host": os.environ["SM_CURRENT_HOST"],
    "host_rank": os.environ["SM_CURRENT_HOST_RANK"], "host_count": os.environ["SM_HOST_COUNT"],
    "cwd": os.getcwd() == os.environ["SM_SOURCE_DIR"],
    "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]), "toolkit": "SM_MODULE_DIR" in os.environ,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{comm.Get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
"""

# The two test nodes are one machine with one host name: OpenMPI's shared-memory segments would
# collide across them, so the ranks talk over TCP on 127.0.0.1 (as in test_slurm_mpi.py).
MPI_OPTIONS = [
    "-mca",
    "btl",
    "self,tcp",
    "-mca",
    "btl_tcp_if_include",
    "lo",
    "-mca",
    "oob_tcp_if_include",
    "lo",
]


def _ranks(model: str | None, count: int) -> list[dict[str, Any]]:
    assert model is not None and model.endswith("/output/model.tar.gz"), model
    with tarfile.open(urlparse(model).path) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert sorted(members) == [f"rank{r}.json" for r in range(count)], sorted(members)
    return [json.load(io.BytesIO(members[f"rank{r}.json"])) for r in range(count)]


def _failure(trainer: Any) -> str:
    job = trainer.latest_training_job
    assert job is not None
    described = job.describe()
    return f"{described['TrainingJobStatus']}: {described.get('FailureReason')}"


def test_v3_torchrun_two_nodes_two_ranks_each(session: SlurmSession, tmp_path: Path) -> None:
    from smlaunch.train import ModelTrainer
    from smlaunch.train.configs import Compute, InputData, SourceCode
    from smlaunch.train.distributed import Torchrun

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TORCHRUN_SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("a b\n")
    trainer = ModelTrainer(
        training_image=IMAGE,
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        distributed=Torchrun(process_count_per_node=2),
        hyperparameters={"learning-rate": 0.5},
        base_job_name="v3-slurm",
        sagemaker_session=session,
    )
    trainer.train(input_data_config=[InputData(channel_name="train", data_source=str(data))], logs=False)
    job = trainer.latest_training_job
    assert job is not None and job.status == contract.STATUS_COMPLETED, _failure(trainer)
    ranks = _ranks(trainer.model_data, 4)
    assert len({tuple(seen["master"]) for seen in ranks}) == 1, ranks  # one rendezvous for both nodes
    for rank, seen in enumerate(ranks):
        host, node = f"algo-{rank // 2 + 1}", f"node{rank // 2 + 1}"
        assert (seen["rank"], seen["world"], seen["total"], seen["local_rank"]) == (rank, 4, 10.0, rank % 2)
        assert (seen["host"], seen["node"], seen["host_rank"]) == (host, node, str(rank // 2)), seen
        assert seen["host_count"] == "2" and seen["torch_master"] == seen["master"], seen
        assert seen["lr"] == 0.5 and seen["hp"] == "0.5" and seen["lines"] == ["a", "b"] and seen["cwd"]
        assert seen["config"] == {"process_count_per_node": 2, "smp": None} and not seen["toolkit"], seen


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun")
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py")
def test_v3_mpi_two_nodes_two_ranks_each(session: SlurmSession, tmp_path: Path) -> None:
    from smlaunch.train import ModelTrainer
    from smlaunch.train.configs import Compute, SourceCode
    from smlaunch.train.distributed import MPI

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(MPI_SCRIPT)
    trainer = ModelTrainer(
        training_image=IMAGE,
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        distributed=MPI(process_count_per_node=2, mpi_additional_options=MPI_OPTIONS),
        hyperparameters={"epochs": 1},
        base_job_name="v3-slurm-mpi",
        sagemaker_session=session,
    )
    trainer.train(logs=False)
    job = trainer.latest_training_job
    assert job is not None and job.status == contract.STATUS_COMPLETED, _failure(trainer)
    for rank, seen in enumerate(_ranks(trainer.model_data, 4)):
        host, node = f"algo-{rank // 2 + 1}", f"node{rank // 2 + 1}"
        assert (seen["rank"], seen["world"], seen["total"]) == (rank, 4, 10), seen
        assert (seen["host"], seen["node"], seen["host_rank"]) == (host, node, str(rank // 2)), seen
        assert seen["host_count"] == "2" and seen["argv"] == ["--epochs", "1"] and seen["cwd"], seen
        assert seen["config"] == {"process_count_per_node": 2, "mpi_additional_options": MPI_OPTIONS}
        assert not seen["toolkit"], seen
