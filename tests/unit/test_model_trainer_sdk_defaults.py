"""``ModelTrainer``'s "intelligent defaults" from the SDK's ``config.yaml``
(:mod:`smlaunch.sdk.train.sdk_defaults`): what a SageMaker session takes and a local one does not,
the role, and bad values named by their key. (The request with a config equals SDK v3's:
``test_model_trainer_oracle.py``, the ``config.yaml`` cases.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.train import sdk_defaults
from smlaunch.train import ModelTrainer
from smlaunch.train.configs import Networking, SourceCode

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311"
ROLE = "arn:aws:iam::123456789012:role/FromConfig"
MT = sdk_defaults.MODEL_TRAINER


def _config(model_trainer: dict[str, Any] | None = None, **training_job: Any) -> dict[str, Any]:
    return {
        "SchemaVersion": "1.0",
        "SageMaker": {
            "PythonSDK": {"Modules": {"ModelTrainer": model_trainer or {}}},
            "TrainingJob": training_job,
        },
    }


class SageMakerShaped:
    is_local = False
    instance_count_quota = None
    processes_per_host = None

    def __init__(self, config: dict[str, Any]) -> None:
        self.sagemaker_config = config


def test_role_comes_from_the_config_when_left_out(src: Path) -> None:
    code = SourceCode(source_dir=str(src), entry_script="train.py")
    session = SageMakerShaped(_config(RoleArn=ROLE))
    trainer = ModelTrainer(training_image=IMAGE, source_code=code, sagemaker_session=session)  # type: ignore[arg-type]
    assert trainer.role == ROLE
    mine = "arn:aws:iam::123456789012:role/Mine"
    given = ModelTrainer(training_image=IMAGE, source_code=code, role=mine, sagemaker_session=session)  # type: ignore[arg-type]
    assert given.role == mine


def test_sagemaker_session_takes_the_model_trainer_keys(src: Path) -> None:
    config = _config(
        {
            "sourceCode": {"source_dir": str(src), "command": "python train.py"},
            "networking": {"subnets": ["subnet-1"], "security_group_ids": ["sg-1"]},
            "checkpointConfig": {"s3_uri": "s3://bucket/ckpt"},
            "inputS3KeyPrefix": "pipeline",
            "SourceCode": {"source_dir": "not-read"},  # v3 reads lowerCamelCase only
        },
        EnableNetworkIsolation=True,
        Environment={"FROM_CONFIG": "1"},
    )
    trainer = ModelTrainer(training_image=IMAGE, role=ROLE, sagemaker_session=SageMakerShaped(config))  # type: ignore[arg-type]
    assert trainer.source_code is not None and trainer.source_code.command == "python train.py"
    assert trainer.networking == Networking(
        subnets=["subnet-1"], security_group_ids=["sg-1"], enable_network_isolation=True
    )
    assert trainer.checkpoint_config is not None and trainer.checkpoint_config.s3_uri == "s3://bucket/ckpt"
    assert trainer.input_s3_key_prefix == "pipeline"
    assert trainer.environment == {"FROM_CONFIG": "1"}


def test_local_session_takes_the_environment_only(src: Path, tmp_path: Path) -> None:
    config = _config(
        {"networking": {"subnets": ["subnet-1"], "security_group_ids": ["sg-1"]}, "inputS3KeyPrefix": "p"},
        EnableNetworkIsolation=True,
        Environment={"FROM_CONFIG": "1"},
        RoleArn=ROLE,
    )
    session = LocalSession(root=tmp_path / "jobs", sagemaker_config=config)
    code = SourceCode(source_dir=str(src), entry_script="train.py")
    trainer = ModelTrainer(training_image=IMAGE, source_code=code, sagemaker_session=session)
    assert trainer.environment == {"FROM_CONFIG": "1"}
    assert trainer.networking is None and trainer.input_s3_key_prefix is None and trainer.role is None
    mine = ModelTrainer(
        training_image=IMAGE, source_code=code, environment={"A": "1"}, sagemaker_session=session
    )
    assert mine.environment == {"A": "1"}  # the whole map, not merged


@pytest.mark.parametrize(
    ("model_trainer", "key", "says"),
    [
        ({"networking": {"subnet": ["s"]}}, f"{MT}.networking.subnet", "Extra inputs"),
        ({"checkpointConfig": "s3://bucket/ckpt"}, f"{MT}.checkpointConfig", "mapping"),
        ({"inputS3KeyPrefix": 3}, f"{MT}.inputS3KeyPrefix", "string"),
        ({"algorithmName": "xgboost"}, f"{MT}.algorithmName", "not supported"),
        ({"sourceCode": {"source_dir": "/nowhere"}}, "source_code", "neither an entry_script nor a command"),
    ],
    ids=["unknown field", "not a mapping", "not a string", "unsupported", "checked as an argument"],
)
def test_bad_config_values_name_their_key(model_trainer: dict[str, Any], key: str, says: str) -> None:
    session = SageMakerShaped(_config(model_trainer))
    with pytest.raises(ConfigurationError) as caught:
        ModelTrainer(training_image=IMAGE, role=ROLE, sagemaker_session=session)  # type: ignore[arg-type]
    assert key in str(caught.value) and says in str(caught.value)


def test_smlaunch_variables_from_the_config_never_reach_sagemaker(src: Path) -> None:
    class Planned(SageMakerShaped):
        region_name = "us-west-2"

        def default_output_path(self) -> str:
            return "s3://bucket/"

        def expand_role(self, role: str | None) -> str:
            assert role
            return role

    config = _config(Environment={"SMLAUNCH_FAULTS": "crash@1", "FROM_CONFIG": "1"})
    code = SourceCode(source_dir=str(src), entry_script="train.py")
    trainer = ModelTrainer(
        training_image=IMAGE, role=ROLE, source_code=code, sagemaker_session=Planned(config)
    )  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="SMLAUNCH_FAULTS"):
        spec = trainer.plan()
    assert spec.Environment == {"FROM_CONFIG": "1"}
