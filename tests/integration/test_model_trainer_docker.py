"""A SDK v3 training cell, unchanged but for its imports, in real Docker containers.

``Mode.LOCAL_CONTAINER`` with no session and ``SMLAUNCH_EXECUTOR=docker`` (the no-session path a v3
notebook takes, files under ``local_container_root``): a 2-host ``Torchrun`` job in our CPU image,
one container per host, whose ranks read v3's variables (``SM_MASTER_ADDR``, ``SM_HOST_COUNT``,
``SM_CURRENT_HOST_RANK``, ``SM_SOURCE_DIR``, ``SM_HP_*``...), meet over torch.distributed across the
containers and leave their files in ``model.tar.gz``. Marker ``docker``: skipped, with the reason,
where no engine answers or the image cannot be built (``tests/_images.py``).
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from smlaunch.sdk.backends.emulated.executors.docker.containers import LABEL_JOB, docker_client
from smlaunch.sdk.errors import ConfigurationError
from tests._images import cpu_test_image
from tests.functional._local_helpers import assert_no_job_processes

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = """
import argparse, json, os, socket
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
    "rank": dist.get_rank(),
    "world": dist.get_world_size(),
    "total": total.item(),
    "lr": args.learning_rate,
    "hp": os.environ["SM_HP_LEARNING_RATE"],
    "lines": lines,
    "cwd": os.getcwd(),
    "source_dir": os.environ["SM_SOURCE_DIR"],
    "model_dir": os.environ["SM_MODEL_DIR"],
    "hostname": socket.gethostname(),
    "host": os.environ["SM_CURRENT_HOST"],
    "host_rank": os.environ["SM_CURRENT_HOST_RANK"],
    "host_count": os.environ["SM_HOST_COUNT"],
    "hosts": json.loads(os.environ["SM_HOSTS"]),
    "master": [os.environ["SM_MASTER_ADDR"], os.environ["SM_MASTER_PORT"]],
    "torch_master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]],
    "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]),
    "toolkit": "SM_MODULE_DIR" in os.environ,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def engine() -> Any:
    try:
        return docker_client()
    except ConfigurationError as exc:
        pytest.skip(f"no Docker engine answers: {exc}")


def _members(uri: str) -> dict[str, bytes]:
    with tarfile.open(urlparse(uri).path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_v3_torchrun_cell_on_two_containers(
    engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = cpu_test_image()
    from smlaunch.train import Mode, ModelTrainer
    from smlaunch.train.configs import Compute, InputData, SourceCode
    from smlaunch.train.distributed import Torchrun

    monkeypatch.setenv("SMLAUNCH_EXECUTOR", "docker")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("a b\n")

    trainer = ModelTrainer(
        training_mode=Mode.LOCAL_CONTAINER,
        training_image=image,
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        distributed=Torchrun(process_count_per_node=1),
        hyperparameters={"learning-rate": 0.5},
        base_job_name="v3-docker",
        local_container_root=str(tmp_path / "root"),
    )
    try:
        trainer.train(input_data_config=[InputData(channel_name="train", data_source=str(data))], logs=False)
        job = trainer.latest_training_job
        assert job is not None
        assert job.status == "Completed", job.describe().get("FailureReason")
        model = trainer.model_data
        assert model is not None and model.endswith("/output/model.tar.gz")
        assert urlparse(model).path.startswith(str(tmp_path / "root" / "smlaunch-jobs"))
        members = _members(model)
        assert sorted(members) == ["rank0.json", "rank1.json"]
        ranks = [json.load(io.BytesIO(members[f"rank{r}.json"])) for r in (0, 1)]
        masters = {tuple(seen["master"]) for seen in ranks}
        assert len(masters) == 1, masters  # both hosts meet at one address and port
        assert masters.pop()[0] == "algo-1"  # as v3's drivers name it; each container resolves it
        for rank, seen in enumerate(ranks):
            host = f"algo-{rank + 1}"
            assert (seen["rank"], seen["world"], seen["total"]) == (rank, 2, 3.0), seen
            assert (seen["hostname"], seen["host"], seen["host_rank"]) == (host, host, str(rank)), seen
            assert seen["host_count"] == "2" and seen["hosts"] == ["algo-1", "algo-2"], seen
            # in the container: the literal /opt/ml tree, the code channel as the working directory
            assert seen["model_dir"] == "/opt/ml/model", seen
            assert seen["cwd"] == seen["source_dir"] == "/opt/ml/input/data/code", seen
            assert seen["lr"] == 0.5 and seen["hp"] == "0.5" and seen["lines"] == ["a", "b"], seen
            assert seen["torch_master"] == seen["master"], seen
            assert seen["config"] == {"process_count_per_node": 1, "smp": None}, seen
            assert not seen["toolkit"], seen  # v3's contract, not the training toolkit's
    finally:
        _assert_nothing_left(engine, tmp_path / "root" / "smlaunch-jobs")


def _assert_nothing_left(engine: Any, jobs: Path) -> None:
    names = [p.name for p in jobs.iterdir() if p.is_dir()] if jobs.exists() else []
    deadline = time.monotonic() + 30  # the agent removes its containers as it ends
    for name in names:
        while engine.containers.list(all=True, filters={"label": f"{LABEL_JOB}={name}"}):
            if time.monotonic() > deadline:
                for container in engine.containers.list(all=True, filters={"label": f"{LABEL_JOB}={name}"}):
                    container.remove(force=True)
                pytest.fail(f"containers of {name} left behind")
            time.sleep(0.5)
        assert_no_job_processes(name, jobs / name)


PLAIN_SCRIPT = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
seen = {
    "epochs": args.epochs, "host": os.environ["SM_CURRENT_HOST"], "hosts": json.loads(os.environ["SM_HOSTS"]),
    "host_rank": os.environ["SM_CURRENT_HOST_RANK"], "master": os.environ["SM_MASTER_ADDR"],
    "port": os.environ["SM_MASTER_PORT"],
    "cwd": os.getcwd(), "source_dir": os.environ["SM_SOURCE_DIR"], "python": sys.executable,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], os.environ["SM_CURRENT_HOST"] + ".json"), "w") as handle:
    json.dump(seen, handle)
"""


def test_v3_cell_in_an_image_without_smlaunch_runs_sm_train_sh(
    engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image with bash and Python but no smlaunch (our base image): the containers run the
    request's entry point, v3's way (``sm_train.sh`` and its driver), as SageMaker would."""
    base = engine.images.get(cpu_test_image()).labels["smlaunch.base"]
    from smlaunch import LocalSession
    from smlaunch.train import ModelTrainer
    from smlaunch.train.configs import Compute, SourceCode

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(PLAIN_SCRIPT)
    jobs = tmp_path / "jobs"
    trainer = ModelTrainer(
        training_image=base,
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        hyperparameters={"epochs": 3},
        base_job_name="v3-plain-image",
        sagemaker_session=LocalSession(root=jobs, executor="docker", docker_client=engine),
    )
    try:
        trainer.train(logs=False)
        job = trainer.latest_training_job
        assert job is not None
        assert job.status == "Completed", job.describe().get("FailureReason")
        assert trainer.model_data is not None
        members = _members(trainer.model_data)
        assert sorted(members) == ["algo-1.json", "algo-2.json"]
        ports = {json.loads(members[f"{host}.json"])["port"] for host in ("algo-1", "algo-2")}
        assert len(ports) == 1 and ports != {"7777"}, ports  # the port picked free: a shared network
        for rank, host in enumerate(("algo-1", "algo-2")):
            seen = json.loads(members[f"{host}.json"])
            assert (seen["host"], seen["host_rank"], seen["master"]) == (host, str(rank), "algo-1"), seen
            assert seen["hosts"] == ["algo-1", "algo-2"] and seen["epochs"] == 3, seen
            assert seen["cwd"] == seen["source_dir"] == "/opt/ml/input/data/code", seen
            assert seen["python"] == "/usr/bin/python3", seen  # the image's, not smlaunch's
        log = "\n".join(trainer.sagemaker_session.backend().log_lines(job.name))
        assert "Starting training script" in log and "Executing command: /usr/bin/python3 train.py" in log, (
            log
        )
    finally:
        _assert_nothing_left(engine, jobs)
