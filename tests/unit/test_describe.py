"""``describe.arguments`` is the exact inverse of ``build``: the arguments an estimator was built
from come back from the request it sent (what ``attach`` relies on), for several shapes of
estimator. What the request cannot carry is named: the local ``source_dir`` comes back as the
staged code's URI (with ``enable_network_isolation``, the code channel's path: not a round trip)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from smlaunch import Estimator, PyTorch, TensorFlow
from smlaunch.sdk.request import build, describe
from tests.unit.test_estimator import ROLE, FakeSageMakerSession

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-training:1"
OUTPUT = "s3://my-bucket/jobs"
PYTORCH = {"framework_version": "2.1.0", "py_version": "py310", "instance_type": "ml.p4d.24xlarge"}
TENSORFLOW = {"framework_version": "2.16", "py_version": "py310", "instance_type": "ml.c5.xlarge"}

SHAPES: dict[str, tuple[type[Estimator], dict[str, Any]]] = {
    "pytorch_torch_distributed": (
        PyTorch,
        {
            **PYTORCH,
            "instance_count": 2,
            "distribution": {"torch_distributed": {"enabled": True}},
            "hyperparameters": {"lr": 0.1, "layers": [1, 2], "name": "bert"},
            "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        },
    ),
    "pytorch_every_option": (
        PyTorch,
        {
            **PYTORCH,
            "instance_count": 2,
            "distribution": {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-v"}},
            "use_spot_instances": True,
            "max_run": 3600,
            "max_wait": 7200,
            "checkpoint_s3_uri": "s3://my-bucket/checkpoints",
            "checkpoint_local_path": "/opt/ml/checkpoints",
            "subnets": ["subnet-1"],
            "security_group_ids": ["sg-1"],
            "tags": [{"Key": "team", "Value": "nlp"}],
            "volume_size": 100,
            "volume_kms_key": "volume-key",
            "output_kms_key": "output-key",
            "encrypt_inter_container_traffic": True,
            "max_retry_attempts": 3,
            "keep_alive_period_in_seconds": 600,
            "disable_output_compression": True,
            "container_log_level": 10,
            "environment": {"NCCL_DEBUG": "INFO"},
            "input_mode": "FastFile",
        },
    ),
    "tensorflow_model_dir": (
        TensorFlow,
        {
            **TENSORFLOW,
            "instance_count": 2,
            "model_dir": "s3://my-bucket/models",
            "distribution": {"multi_worker_mirrored_strategy": {"enabled": True}},
        },
    ),
    "tensorflow_without_model_dir": (TensorFlow, {**TENSORFLOW, "instance_count": 1, "model_dir": False}),
    "generic_image": (
        Estimator,
        {
            "image_uri": IMAGE,
            "instance_type": "ml.m5.xlarge",
            "instance_count": 1,
            "hyperparameters": {"epochs": 3},
        },
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_describe_inverts_build(src: Path, shape: str) -> None:
    cls, kwargs = SHAPES[shape]
    session = FakeSageMakerSession()
    common = {
        "role": ROLE,
        "output_path": OUTPUT,
        "base_job_name": "round-trip",
        "sagemaker_session": session,
    }
    built = cls(entry_point="train.py", source_dir=str(src), **common, **kwargs)
    spec = built.plan()

    arguments = describe.arguments(spec.to_request(), cls._framework)
    again = cls(sagemaker_session=session, **arguments)

    code = build.code_uri(built.args, spec.TrainingJobName, OUTPUT)  # the local source_dir, staged
    assert again.args == dataclasses.replace(built.args, source_dir=code)
    assert again.plan(job_name=spec.TrainingJobName).to_request() == spec.to_request()


def test_the_round_trip_can_fail(src: Path) -> None:
    """The equality above compares every argument: one the request does not carry differs."""
    session = FakeSageMakerSession()
    built = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role=ROLE,
        sagemaker_session=session,
        dependencies=[str(src / "train.py")],
        **PYTORCH,
        instance_count=1,
    )
    again = PyTorch(sagemaker_session=session, **describe.arguments(built.plan().to_request(), "pytorch"))
    assert again.args.dependencies == [] != built.args.dependencies
