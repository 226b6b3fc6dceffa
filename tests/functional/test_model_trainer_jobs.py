"""A SDK v3 training cell, unchanged but for its imports, on the emulated platform: ``ModelTrainer``
with ``Torchrun(process_count_per_node=2)`` starts 2 ranks that read v3's variables (``SM_HP_*``
with ``-`` as ``_``, ``SM_CHANNEL_*``, ``SM_SOURCE_DIR``, ``SM_MASTER_ADDR``...), all-reduce over
torch.distributed and leave a model in ``model.tar.gz``."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from urllib.parse import urlparse

import pytest

SCRIPT = """
import argparse, json, os
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float)
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.txt")) as handle:
    lines = handle.read().split()
seen = {
    "rank": dist.get_rank(),
    "world": dist.get_world_size(),
    "total": total.item(),
    "args": [args.learning_rate, args.epochs],
    "hp": os.environ["SM_HP_LEARNING_RATE"],
    "hps": json.loads(os.environ["SM_HPS"]),
    "lines": lines,
    "cwd": os.getcwd() == os.environ["SM_SOURCE_DIR"],
    "entry": os.environ["SM_ENTRY_SCRIPT"],
    "hosts": json.loads(os.environ["SM_HOSTS"]),
    "host_count": os.environ["SM_HOST_COUNT"],
    "master": os.environ["SM_MASTER_ADDR"],
    "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]),
    "toolkit": "SM_MODULE_DIR" in os.environ,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_v3_cell_runs_torchrun_on_the_emulated_platform(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from smlaunch import LocalSession
    from smlaunch.train import ModelTrainer
    from smlaunch.train.configs import Compute, InputData, SourceCode
    from smlaunch.train.distributed import Torchrun

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("a b\n")

    trainer = ModelTrainer(
        training_image="123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311",
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=1),
        distributed=Torchrun(process_count_per_node=2),
        hyperparameters={"learning-rate": 0.5, "epochs": 2},
        base_job_name="v3-cell",
        sagemaker_session=LocalSession(root=tmp_path / "jobs"),
    )
    trainer.train(input_data_config=[InputData(channel_name="train", data_source=str(data))], logs=False)

    job = trainer.latest_training_job
    assert job is not None and job.status == "Completed"
    model = trainer.model_data
    assert model is not None and model.endswith("/output/model.tar.gz")
    with tarfile.open(urlparse(model).path) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    ranks = [json.load(io.BytesIO(members[f"rank{r}.json"])) for r in (0, 1)]
    for rank, seen in enumerate(ranks):
        assert seen["rank"] == rank and seen["world"] == 2 and seen["total"] == 3.0
        assert seen["args"] == [0.5, 2] and seen["hp"] == "0.5"
        assert seen["hps"] == {"learning-rate": 0.5, "epochs": 2}
        assert seen["lines"] == ["a", "b"] and seen["cwd"] and seen["entry"] == "train.py"
        assert seen["hosts"] == ["algo-1"] and seen["host_count"] == "1" and seen["master"] == "127.0.0.1"
        assert seen["config"] == {"process_count_per_node": 2, "smp": None}
        assert not seen["toolkit"]  # v3's contract, not the training toolkit's


MPI_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
seen = {"rank": dist.get_rank(), "world": dist.get_world_size(), "total": total.item(),
        "argv": sys.argv[1:], "host": os.environ["SM_CURRENT_HOST"],
        "host_rank": os.environ["SM_CURRENT_HOST_RANK"],
        "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]), "extra": os.environ.get("FROM_OPTIONS")}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun")
def test_v3_mpi_job_across_two_emulated_hosts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from smlaunch import LocalSession
    from smlaunch.train import ModelTrainer
    from smlaunch.train.configs import Compute, SourceCode
    from smlaunch.train.distributed import MPI

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(MPI_SCRIPT)
    trainer = ModelTrainer(
        training_image="123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311",
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        distributed=MPI(process_count_per_node=1, mpi_additional_options=["-x", "FROM_OPTIONS=yes"]),
        hyperparameters={"epochs": 1},
        sagemaker_session=LocalSession(root=tmp_path / "jobs"),
    )
    trainer.train(logs=False)
    model = trainer.model_data
    assert model is not None
    with tarfile.open(urlparse(model).path) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    ranks = [json.load(io.BytesIO(members[f"rank{r}.json"])) for r in (0, 1)]
    assert [(s["rank"], s["host"], s["host_rank"]) for s in ranks] == [(0, "algo-1", "0"), (1, "algo-2", "1")]
    for seen in ranks:
        assert seen["world"] == 2 and seen["total"] == 3.0 and seen["argv"] == ["--epochs", "1"]
        assert seen["config"] == {
            "process_count_per_node": 1,
            "mpi_additional_options": ["-x", "FROM_OPTIONS=yes"],
        }
        assert seen["extra"] == "yes"
