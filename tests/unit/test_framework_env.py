"""framework_env: the torch / Lightning / Accelerate / TF variables of one rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.framework_env import framework_env, framework_env_for, training_module_of_image
from smlaunch.runtime.environment import Environment
from tests.functional._runtime_tree import write_host_tree


def test_rank_variables_of_second_host() -> None:
    env = framework_env(
        rank=3,
        local_rank=1,
        local_world_size=2,
        node_rank=1,
        num_nodes=2,
        master_addr="10.0.0.1",
        master_port=7777,
        host_addresses=["10.0.0.1", "10.0.0.2"],
    )
    assert env["RANK"] == "3"
    assert env["LOCAL_RANK"] == "1"
    assert env["WORLD_SIZE"] == "4"
    assert env["LOCAL_WORLD_SIZE"] == "2"
    assert env["NODE_RANK"] == env["GROUP_RANK"] == "1"
    assert env["ROLE_RANK"] == "3" and env["ROLE_WORLD_SIZE"] == "4"
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "7777"
    assert all(isinstance(v, str) for v in env.values())
    assert "TORCHELASTIC_RUN_ID" not in env
    tf = json.loads(env["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 3}
    assert tf["cluster"]["worker"] == [
        "10.0.0.1:7778",
        "10.0.0.1:7779",
        "10.0.0.2:7780",
        "10.0.0.2:7781",
    ]


def test_tf_workers_never_share_a_port_on_one_address() -> None:
    env = framework_env(
        rank=0,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        num_nodes=3,
        master_addr="127.0.0.1",
        master_port=40000,
        host_addresses=["127.0.0.1"] * 3,
    )
    workers = json.loads(env["TF_CONFIG"])["cluster"]["worker"]
    assert len(set(workers)) == 3


@pytest.mark.parametrize(
    ("rank", "local_rank", "addresses"),
    [(4, 0, ["a", "b"]), (0, 2, ["a", "b"]), (0, 0, ["a"])],
)
def test_inconsistent_topology_is_refused(rank: int, local_rank: int, addresses: list[str]) -> None:
    with pytest.raises(ValueError, match="must"):
        framework_env(
            rank=rank,
            local_rank=local_rank,
            local_world_size=2,
            node_rank=0,
            num_nodes=2,
            master_addr="a",
            master_port=1,
            host_addresses=addresses,
        )


def test_from_environment_uses_distribution_hosts_and_addresses(tmp_path: Path) -> None:
    hosts = ["algo-1", "algo-2"]
    write_host_tree(
        tmp_path,
        "algo-2",
        hosts,
        {"sagemaker_program": '"train.py"', contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"},
    )
    environ = {
        contract.SMLAUNCH_HOST_ADDRESSES: json.dumps({h: "127.0.0.1" for h in hosts}),
        contract.SMLAUNCH_MASTER_PORT: "45000",
    }
    environment = Environment.from_files(tmp_path, environ)
    env = framework_env_for(environment, local_rank=1, local_world_size=2)
    assert env["RANK"] == "3"
    assert env["NODE_RANK"] == "1"
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["MASTER_PORT"] == "45000"


@pytest.mark.parametrize(
    ("image", "module"),
    [
        (
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310",
            contract.PYTORCH_TRAINING_MODULE,
        ),
        ("pytorch-training:2.1.0-cpu-py310", contract.PYTORCH_TRAINING_MODULE),
        (
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04",
            contract.PYTORCH_TRAINING_MODULE,
        ),
        (
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:1.13.1-neuronx-py310-sdk2.18.0-ubuntu20.04",
            contract.PYTORCH_TRAINING_MODULE,
        ),
        (
            "658645717510.dkr.ecr.us-west-2.amazonaws.com/smdistributed-modelparallel:2.0.1-gpu-py310-cu121",
            contract.PYTORCH_TRAINING_MODULE,
        ),
        ("localhost:5000/pytorch-training@sha256:abc", contract.PYTORCH_TRAINING_MODULE),
        (
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.13-cpu-py310",
            contract.TENSORFLOW_TRAINING_MODULE,
        ),
        ("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-inference:2.1.0-cpu-py310", None),
        ("382416733822.dkr.ecr.us-east-1.amazonaws.com/xgboost:1", None),
        ("smlaunch:cpu", None),
        ("my-pytorch-trainer:latest", None),
        (None, None),
        ("", None),
    ],
)
def test_training_module_of_image(image: str | None, module: str | None) -> None:
    assert training_module_of_image(image) == module
