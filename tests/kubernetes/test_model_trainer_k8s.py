"""A SDK v3 training cell, unchanged but for its imports, on the dev cluster:
``ModelTrainer(sagemaker_session=KubernetesSession(...))``.

``Torchrun``: 2 host pods x 2 ranks whose ranks read v3's variables (``SM_MASTER_ADDR``/``PORT``,
``SM_HOST_COUNT``, ``SM_CURRENT_HOST_RANK``, ``SM_SOURCE_DIR``, ``SM_HP_*``...), all-reduce across
the pods and leave their files in ``model.tar.gz`` in the moto S3. The code, the ``sm_drivers``
channel and a local data directory are uploaded below the session's bucket, as SDK v3 uploads
them. Nothing of the job is left but its record (the root ConfigMap).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch import KubernetesSession, contract
from tests.kubernetes.conftest import S3_BUCKET, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311"

SCRIPT = """
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
    "local_rank": int(os.environ["LOCAL_RANK"]),
    "lr": args.learning_rate, "hp": os.environ["SM_HP_LEARNING_RATE"], "lines": lines,
    "cwd": os.getcwd() == os.environ["SM_SOURCE_DIR"], "host": os.environ["SM_CURRENT_HOST"],
    "host_rank": os.environ["SM_CURRENT_HOST_RANK"], "host_count": os.environ["SM_HOST_COUNT"],
    "master": [os.environ["SM_MASTER_ADDR"], os.environ["SM_MASTER_PORT"]],
    "torch_master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]],
    "config": json.loads(os.environ["SM_DISTRIBUTED_CONFIG"]), "toolkit": "SM_MODULE_DIR" in os.environ,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(seen, handle)
print(f"rank {dist.get_rank()} on {os.environ['SM_CURRENT_HOST']}: done", flush=True)
dist.destroy_process_group()
"""


def test_v3_torchrun_two_host_pods_two_ranks_each(
    api: client.ApiClient,
    image: str,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
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
        training_image=IMAGE,  # the pods run the session's image; the request keeps v3's
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
        compute=Compute(instance_type="ml.c5.xlarge", instance_count=2),
        distributed=Torchrun(process_count_per_node=2),
        hyperparameters={"learning-rate": 0.5},
        base_job_name="v3-k8s",
        sagemaker_session=k8s_session(default_bucket=S3_BUCKET),
    )
    try:
        trainer.train(input_data_config=[InputData(channel_name="train", data_source=str(data))])
    finally:
        logs = capsys.readouterr().out
        print(logs)
    job = trainer.latest_training_job
    assert job is not None
    described = job.describe()
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, (
        described.get("FailureReason"),
        logs[-4000:],
    )
    for rank in range(4):
        host = f"algo-{rank // 2 + 1}"
        assert f"[{host}/rank {rank}] rank {rank} on {host}: done" in logs, logs[-4000:]

    name = job.name
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in described["InputDataConfig"]
    }
    assert channels == {
        channel: f"s3://{S3_BUCKET}/{name}/input/{channel}" for channel in ("train", "code", "sm_drivers")
    }, channels
    model = trainer.model_data
    assert model == f"s3://{S3_BUCKET}/{name}/output/model.tar.gz", model
    archive = s3.get_object(Bucket=S3_BUCKET, Key=f"{name}/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert sorted(members) == [f"rank{r}.json" for r in range(4)], sorted(members)
    ranks = [json.loads(members[f"rank{r}.json"]) for r in range(4)]
    assert len({tuple(seen["master"]) for seen in ranks}) == 1, ranks  # one rendezvous for both pods
    for rank, seen in enumerate(ranks):
        host = f"algo-{rank // 2 + 1}"
        assert (seen["rank"], seen["world"], seen["total"], seen["local_rank"]) == (rank, 4, 10.0, rank % 2)
        assert (seen["host"], seen["host_rank"], seen["host_count"]) == (host, str(rank // 2), "2"), seen
        assert seen["torch_master"] == seen["master"], seen
        assert seen["lr"] == 0.5 and seen["hp"] == "0.5" and seen["lines"] == ["a", "b"] and seen["cwd"], seen
        assert seen["config"] == {"process_count_per_node": 2, "smp": None} and not seen["toolkit"], seen

    assert job_objects(api, namespace) == []
