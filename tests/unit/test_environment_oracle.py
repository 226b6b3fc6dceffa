"""Oracle: our ``SM_*`` variables and argv equal SageMaker's training toolkit's on the same trees.

The toolkit (``sagemaker-training`` 5.1.4) freezes its paths when it is imported, so each tree is
read by a fresh ``python`` subprocess with ``SAGEMAKER_BASE_DIR`` set. Documented differences
(``smlaunch/runtime/environment.py``): our SDK-v3 extras, removed before comparing; everything else must be
equal byte for byte, ``SM_TRAINING_ENV`` included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.runtime.env_vars import to_env_vars
from smlaunch.runtime.environment import Environment
from tests.functional._runtime_tree import write_host_tree

pytest.importorskip("sagemaker_training")

OUR_EXTRAS = {
    contract.SM_MASTER_ADDR,
    contract.SM_MASTER_PORT,
    contract.SM_HOST_COUNT,
    contract.SM_CURRENT_HOST_RANK,
}

_TOOLKIT_SCRIPT = """
import json, sys
from sagemaker_training import environment, mapping
env = environment.Environment()
print(json.dumps({"env": env.to_env_vars(), "argv": env.to_cmd_args(),
                  "cmd_args": mapping.to_cmd_args(env.hyperparameters)}))
"""

# The reference's example hyperparameters, in their wire form: JSON text, raw strings, null.
REFERENCE_HPS = {
    "epochs": "3",
    "lr": "0.01",
    "batch-size": "64",
    "use_amp": "true",
    "layers": "[64, 32]",
    "opt": '{"name": "adam", "beta": 0.9}',
    "model_name": '"bert-base"',
    "x": "1",
    "none_hp": "null",
    "raw_string": "not json at all",
    "spaced": '"a b  c"',
    "empty": '""',
    "leading_zero": "007",
    "big": "1e3",
    "mixed": '[1, "x", true, null]',
    "sagemaker_program": '"train.py"',
    "sagemaker_submit_directory": '"s3://bucket/job/source/sourcedir.tar.gz"',
    "sagemaker_container_log_level": "20",
    "sagemaker_job_name": '"pytorch-training-2024-01-01-00-00-00-000"',
    "sagemaker_region": '"us-west-2"',
}

TORCH_DISTRIBUTED = {
    "sagemaker_torch_distributed_enabled": "true",
    "sagemaker_instance_type": '"ml.p4d.24xlarge"',
}

CHANNELS = {
    "train": {
        "ContentType": "application/x-parquet",
        "TrainingInputMode": "File",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": "None",
    },
    "validation": {
        "TrainingInputMode": "File",
        "S3DistributionType": "ShardedByS3Key",
        "RecordWrapperType": "None",
    },
    "my-ch": {},
}

HETERO_GROUPS = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "gpu_group", "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-3", "algo-2"]},
]

CASES: dict[str, dict[str, Any]] = {
    "reference-one-host": dict(host="algo-1", hosts=["algo-1"], hps=REFERENCE_HPS, channels=CHANNELS),
    "two-hosts-torch-distributed-master": dict(
        host="algo-1",
        hosts=["algo-1", "algo-2"],
        hps={**REFERENCE_HPS, **TORCH_DISTRIBUTED},
        channels=CHANNELS,
        instance_type="ml.p4d.24xlarge",
    ),
    "two-hosts-torch-distributed-worker": dict(
        host="algo-2",
        hosts=["algo-1", "algo-2"],
        hps={**REFERENCE_HPS, **TORCH_DISTRIBUTED},
        instance_type="ml.p4d.24xlarge",
    ),
    "hetero-instance-groups": dict(
        host="algo-2",
        hosts=["algo-1", "algo-2", "algo-3"],
        hps={**REFERENCE_HPS, **TORCH_DISTRIBUTED, "sagemaker_distribution_instance_groups": '["gpu_group"]'},
        instance_groups=HETERO_GROUPS,
        channels={"train": {}},
    ),
    "hetero-plain-host": dict(
        host="algo-1",
        hosts=["algo-1", "algo-2", "algo-3"],
        hps={**REFERENCE_HPS, **TORCH_DISTRIBUTED, "sagemaker_distribution_instance_groups": '["gpu_group"]'},
        instance_groups=HETERO_GROUPS,
    ),
    "mpi-and-no-program": dict(
        host="algo-1",
        hosts=["algo-1", "algo-2"],
        hps={
            "epochs": "2",
            "sagemaker_mpi_enabled": "true",
            "sagemaker_mpi_num_of_processes_per_host": "2",
            "sagemaker_mpi_custom_mpi_options": '""',
            "_tuning_objective_metric": '"loss"',
        },
    ),
    "empty-hyperparameters": dict(host="algo-1", hosts=["algo-1"], hps={}),
    "model-parallel": dict(
        host="algo-2",
        hosts=["algo-1", "algo-2"],
        hps={
            **REFERENCE_HPS,
            "sagemaker_mpi_enabled": "true",
            "sagemaker_mpi_num_of_processes_per_host": "4",
            "mp_parameters": '{"partitions": 2, "microbatches": 4}',
        },
    ),
    "topology-ultraserver": dict(
        host="algo-1",
        hosts=["algo-1", "algo-2"],
        hps=REFERENCE_HPS,
        topology=[
            {"hostName": "algo-1", "capacityUnitId": "cu-1"},
            {"hostName": "algo-2", "capacityUnitId": "cu-1"},
        ],
    ),
    "topology-null": dict(host="algo-1", hosts=["algo-1"], hps=REFERENCE_HPS, topology=None),
}


def _environ(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_", "SAGEMAKER_"))}
    env.pop("TRAINING_JOB_NAME", None)
    env[contract.BASE_DIR_ENV] = str(base)
    env[contract.TRAINING_JOB_NAME_ENV] = "pytorch-training-2024-01-01-00-00-00-000"
    return env


def _toolkit(base: Path, environ: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _TOOLKIT_SCRIPT], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_env_vars_and_argv_equal_the_toolkit(case: str, tmp_path: Path) -> None:
    spec = CASES[case]
    base = tmp_path / "opt" / "ml"
    write_host_tree(
        base,
        spec["host"],
        spec["hosts"],
        spec["hps"],
        instance_type=spec.get("instance_type", "local"),
        channels=spec.get("channels", {}),
        instance_groups=spec.get("instance_groups"),
    )
    if "topology" in spec:
        config = json.loads(contract.Paths(base).resource_config_file.read_text())
        config["topology"] = spec["topology"]
        contract.Paths(base).resource_config_file.write_text(json.dumps(config))
    environ = _environ(base)
    toolkit_environ = dict(environ)
    if "mp_parameters" in spec["hps"]:
        # The toolkit reads SM_HP_MP_PARAMETERS from its own process environment, so only an
        # Environment() built inside the user's script (where it is exported) sees the flag. We
        # report that view; give the toolkit the same one.
        toolkit_environ["SM_HP_MP_PARAMETERS"] = hp.env_value(json.loads(spec["hps"]["mp_parameters"]))
    theirs = _toolkit(base, toolkit_environ)
    ours_env = Environment.from_files(base, environ)
    ours = to_env_vars(ours_env)

    assert OUR_EXTRAS <= set(ours)
    ours_compared = {k: v for k, v in ours.items() if k not in OUR_EXTRAS}
    assert set(ours_compared) == set(theirs["env"]), sorted(set(ours_compared) ^ set(theirs["env"]))
    for key in sorted(theirs["env"]):
        if key == "SM_TRAINING_ENV":
            assert json.loads(ours_compared[key]) == json.loads(theirs["env"][key])
        assert ours_compared[key] == theirs["env"][key], key
    assert ours_env.user_args() == theirs["argv"] == theirs["cmd_args"]
    assert hp.to_cmd_args(ours_env.hyperparameters) == theirs["cmd_args"]


def test_master_and_ranks_follow_instance_group_order(tmp_path: Path) -> None:
    spec = CASES["hetero-instance-groups"]
    base = tmp_path / "ml"
    write_host_tree(base, "algo-2", spec["hosts"], spec["hps"], instance_groups=HETERO_GROUPS)
    env = Environment.from_files(
        base,
        {
            "SMLAUNCH_HOST_ADDRESSES": json.dumps(
                {"algo-1": "127.0.0.11", "algo-2": "127.0.0.12", "algo-3": "127.0.0.13"}
            )
        },
    )
    assert env.master_hostname == "algo-3"
    assert env.master_addr == "127.0.0.13"
    assert env.host_rank == 1
    vars_ = to_env_vars(env)
    assert vars_["SM_MASTER_ADDR"] == "127.0.0.13"
    assert vars_["SM_CURRENT_HOST_RANK"] == "1"
    assert vars_["SM_HOST_COUNT"] == "3"
    assert vars_["SM_MASTER_PORT"] == "7777"
    # Names stay names: only the address is mapped.
    assert vars_["SM_HOSTS"] == '["algo-1","algo-2","algo-3"]'
    assert vars_["SM_CURRENT_HOST"] == "algo-2"
