"""SDK v3 is the oracle for ``ModelTrainer``: for each configuration of the table, the
CreateTrainingJob request ``sagemaker.train.ModelTrainer.train()`` sends (under moto) equals
``smlaunch.train.ModelTrainer.plan()``'s for a SageMaker session, and the ``sourcecode.json`` /
``distributed.json`` v3 uploads equal ours; and on a host tree, the variables v3's own
``environment.py`` writes and the command its basic driver runs equal what our runtime gives the
script. SDK v3 runs in a virtualenv of its own (``tests/unit/_sdk_v3.py``), made once and cached;
the tests are skipped with the reason where it cannot be made."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from smlaunch.sdk.train import configs, distributed
from smlaunch.sdk.train.drivers import driver_files
from smlaunch.sdk.train.model_trainer import ModelTrainer
from tests.unit import _sdk_v3

pytestmark = pytest.mark.slow

BUCKET = "sagemaker-us-west-2-123456789012"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-gpu-py311"


class OracleSession:
    """A SageMaker-shaped session for ``plan()``: moto's default bucket, nothing sent."""

    is_local = False
    instance_count_quota = None
    processes_per_host = None
    region_name = "us-west-2"

    def __init__(self, sagemaker_config: dict[str, Any] | None = None) -> None:
        self.sagemaker_config = sagemaker_config or {}

    def default_output_path(self) -> str:
        return f"s3://{BUCKET}/"

    def expand_role(self, role: str | None) -> str:
        assert role
        return role


def _config(src: str) -> dict[str, Any]:
    """A config.yaml with every key v3's ModelTrainer reads, and some it does not."""
    return {
        "SchemaVersion": "1.0",
        "SageMaker": {
            "PythonSDK": {
                "Modules": {
                    "ModelTrainer": {
                        "sourceCode": {"source_dir": src, "command": "python train.py --from config"},
                        "networking": {"subnets": ["subnet-9"], "security_group_ids": ["sg-9"]},
                        "checkpointConfig": {"s3_uri": "s3://ckpt-bucket/from-config"},
                        "inputS3KeyPrefix": "from-config",
                        "InputS3KeyPrefix": "not-taken",  # v3 reads lowerCamelCase keys
                        "stoppingCondition": {"max_runtime_in_seconds": 60},
                        "environment": {"NOT_TAKEN": "1"},
                    }
                }
            },
            "TrainingJob": {
                "Environment": {"FROM_CONFIG": "1"},
                "EnableNetworkIsolation": True,
                "Tags": [{"Key": "team", "Value": "config"}],
                "VpcConfig": {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]},
                "OutputDataConfig": {"KmsKeyId": "from-config"},
            },
        },
    }


def _cases(src: str, data: str) -> dict[str, dict[str, Any]]:
    code = {"source_dir": src, "entry_script": "train.py"}
    base = {"training_image": IMAGE, "role": ROLE}
    hps = {"lr": 0.1, "batch-size": 32, "name": "x y", "layers": [1, 2], "opt": {"beta": 0.9}, "flag": True}
    return {
        "config.yaml fills": {
            "config": _config(src),
            "trainer": {**base},
            "inputs": [{"InputData": {"channel_name": "local", "data_source": data}}],
        },
        "config.yaml under arguments": {
            "config": _config(src),
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "environment": {"MINE": "1"},
                "networking": {"Networking": {"enable_inter_container_traffic_encryption": True}},
                "checkpoint_config": {"CheckpointConfig": {"s3_uri": "s3://ckpt-bucket/mine"}},
                "input_s3_key_prefix": "mine",
                "tags": [{"Tag": {"key": "team", "value": "ml"}}],
            },
            "inputs": [{"InputData": {"channel_name": "local", "data_source": data}}],
        },
        "config.yaml VpcConfig alone": {
            "config": {
                "SchemaVersion": "1.0",
                "SageMaker": {"TrainingJob": {"VpcConfig": {"Subnets": ["s-1"], "SecurityGroupIds": ["g"]}}},
            },
            "trainer": {**base, "source_code": {"SourceCode": code}},
        },
        "plain script": {
            "trainer": {**base, "source_code": {"SourceCode": code}, "hyperparameters": hps},
            "inputs": [{"InputData": {"channel_name": "train", "data_source": "s3://data-bucket/train"}}],
        },
        "command": {
            "trainer": {
                **base,
                "source_code": {
                    "SourceCode": {"source_dir": src, "command": "python train.py --x 1", "args": ["a b", 3]}
                },
            },
        },
        "requirements": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": {**code, "requirements": "requirements.txt"}},
                "base_job_name": "with_reqs",
                "input_s3_key_prefix": "my-pipeline",
            },
            "inputs": [{"InputData": {"channel_name": "local", "data_source": data}}],
        },
        "torchrun": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "compute": {"Compute": {"instance_type": "ml.g5.12xlarge", "instance_count": 2}},
                "distributed": {"Torchrun": {"process_count_per_node": 4}},
            },
        },
        "mpi": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "compute": {"Compute": {"instance_type": "ml.p4d.24xlarge", "instance_count": 2}},
                "distributed": {
                    "MPI": {"process_count_per_node": 8, "mpi_additional_options": ["-x", "FOO"]}
                },
            },
        },
        "smp": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "compute": {"Compute": {"instance_type": "ml.p4d.24xlarge", "instance_count": 1}},
                "distributed": {
                    "Torchrun": {"smp": {"SMP": {"hybrid_shard_degree": 4, "tensor_parallel_degree": 2}}}
                },
                "hyperparameters": {"epochs": 2},
            },
        },
        "spot with checkpoints": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "compute": {
                    "Compute": {
                        "instance_type": "ml.g5.2xlarge",
                        "instance_count": 1,
                        "enable_managed_spot_training": True,
                        "volume_size_in_gb": 100,
                        "keep_alive_period_in_seconds": 600,
                    }
                },
                "stopping_condition": {
                    "StoppingCondition": {"max_runtime_in_seconds": 7200, "max_wait_time_in_seconds": 10800}
                },
                "checkpoint_config": {"CheckpointConfig": {}},
            },
        },
        "several channels": {
            "trainer": {
                **base,
                "source_code": {"SourceCode": code},
                "environment": {"MY_VAR": "1"},
                "output_data_config": {"OutputDataConfig": {"s3_output_path": "s3://out-bucket/models"}},
                "checkpoint_config": {"CheckpointConfig": {"s3_uri": "s3://ckpt-bucket/run"}},
                "networking": {
                    "Networking": {
                        "subnets": ["subnet-1"],
                        "security_group_ids": ["sg-1"],
                        "enable_network_isolation": True,
                    }
                },
                "tags": [{"Tag": {"key": "team", "value": "ml"}}],
                "input_data_config": [
                    {"InputData": {"channel_name": "train", "data_source": "s3://data-bucket/train"}}
                ],
            },
            "inputs": [
                {
                    "InputData": {
                        "channel_name": "val",
                        "data_source": {
                            "S3DataSource": {
                                "s3_data_type": "S3Prefix",
                                "s3_uri": "s3://data-bucket/val",
                                "s3_data_distribution_type": "ShardedByS3Key",
                            }
                        },
                        "content_type": "text/csv",
                    }
                },
                {"InputData": {"channel_name": "local", "data_source": data}},
                {"InputData": {"channel_name": "train", "data_source": "s3://data-bucket/train-v2"}},
            ],
        },
    }


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1:
        ((name, kwargs),) = value.items()
        kind = getattr(configs, name, None) or getattr(distributed, name, None)
        if kind is not None:
            return kind(**{k: _decode(v) for k, v in kwargs.items()})
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("v3")
    src = root / "src"
    src.mkdir()
    (src / "train.py").write_text("print('train')\n")
    (src / "requirements.txt").write_text("numpy\n")
    data = root / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    return {"root": str(root), "src": str(src), "data": str(data)}


@pytest.fixture(scope="module")
def oracle(tree: dict[str, str]) -> dict[str, Any]:
    python = _sdk_v3.venv_python()
    cases = _cases(tree["src"], tree["data"])
    return _sdk_v3.run_oracle(python, {"cases": cases}, Path(tree["root"]))


CASES = list(_cases("src", "data"))


@pytest.mark.parametrize("case", CASES)
def test_request_equals_sdk_v3(case: str, tree: dict[str, str], oracle: dict[str, Any]) -> None:
    theirs = oracle["requests"][case]
    spec = _cases(tree["src"], tree["data"])[case]
    session = OracleSession(spec.get("config"))
    trainer = ModelTrainer(sagemaker_session=session, **_decode(spec["trainer"]))  # type: ignore[arg-type]
    stamp = theirs["TrainingJobName"].rsplit("-", 1)[1]
    ours = trainer.plan(_decode(spec.get("inputs")), now=datetime.strptime(stamp, "%Y%m%d%H%M%S"))
    assert ours.to_request() == theirs


@pytest.mark.parametrize("case", CASES)
def test_drivers_json_equals_sdk_v3(case: str, tree: dict[str, str], oracle: dict[str, Any]) -> None:
    spec = _cases(tree["src"], tree["data"])[case]
    trainer = ModelTrainer(sagemaker_session=OracleSession(spec.get("config")), **_decode(spec["trainer"]))  # type: ignore[arg-type]
    assert trainer.source_code is not None
    files = driver_files(trainer.source_code, trainer.distributed)
    ours = {name: json.loads(files[name]) for name in ("sourcecode.json", "distributed.json")}
    assert ours == oracle["drivers"][case]


@pytest.mark.parametrize(
    ("source_code", "dist"),
    [
        ({"source_dir": "src", "entry_script": "train.py"}, {}),
        ({"source_dir": "src", "entry_script": "run.sh"}, {}),
        ({"source_dir": "src", "entry_script": "train.py"}, {"process_count_per_node": 2, "smp": None}),
    ],
    ids=["script", "shell script", "torchrun"],
)
def test_host_environment_equals_sdk_v3_drivers(
    tmp_path: Path, source_code: dict[str, Any], dist: dict[str, Any]
) -> None:
    from smlaunch.runtime import v3
    from smlaunch.runtime.environment import Environment

    python = _sdk_v3.venv_python()
    base = tmp_path / "tree"
    config = base / "input/config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(
        json.dumps(
            {
                "current_host": "algo-2",
                "current_instance_type": "ml.g5.2xlarge",
                "current_group_name": "homogeneousCluster",
                "hosts": ["algo-2", "algo-1"],
                "instance_groups": [
                    {
                        "instance_group_name": "homogeneousCluster",
                        "instance_type": "ml.g5.2xlarge",
                        "hosts": ["algo-2", "algo-1"],
                    }
                ],
                "network_interface_name": "eth0",
            }
        )
    )
    channel = {
        "TrainingInputMode": "File",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": "None",
    }
    (config / "inputdataconfig.json").write_text(
        json.dumps({"train": channel, "code": channel, "sm_drivers": channel})
    )
    hps = {"lr": "0.1", "batch-size": "32", "name": "x y", "layers": "[1, 2]", "opt": '{"beta": 0.9}'}
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    drivers = base / "input/data/sm_drivers"
    drivers.mkdir(parents=True)
    full_source = {"requirements": None, "command": None, "args": None, "ignore_patterns": [], **source_code}
    (drivers / "sourcecode.json").write_text(json.dumps(full_source))
    (drivers / "distributed.json").write_text(json.dumps(dist))
    (base / "input/data/code").mkdir()
    (base / "input/data/train").mkdir()
    answer = _sdk_v3.run_oracle(
        python, {"tree": str(base), "job_name": "job-1", "scratch": str(tmp_path)}, tmp_path
    )
    env = Environment.from_files(
        base, {"TRAINING_JOB_NAME": "job-1", "SMLAUNCH_NUM_CPUS": "4", "SMLAUNCH_NUM_GPUS": "0"}
    )
    ours = {k: v.replace(str(base), "/opt/ml") for k, v in v3.to_env_vars(env).items()}
    assert ours == answer["environment"]
    if not dist:  # the basic driver's command (a distributed job's ranks are started by our runtime)
        assert v3.program_argv(env, "python")[1:] == answer["command"][1:]
