"""Oracle: ``TensorFlow(...).plan()`` equals the CreateTrainingJob request of the real
``sagemaker.tensorflow.TensorFlow`` (SDK 2.257.7) for the same arguments, captured under moto as in
``test_plan_oracle.py``; plus the TensorFlow-specific refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sagemaker.tensorflow import TensorFlow as SdkTensorFlow

from smlaunch import ConfigurationError, LocalSession, TensorFlow
from smlaunch.sdk.request import describe
from tests.unit.test_plan_oracle import (  # noqa: F401  (sdk_capture and src are fixtures)
    HPS,
    INPUTS,
    ROLE,
    FakeSageMakerSession,
    _differences,
    _normalise,
    sdk_capture,
    src,
)

CASES: dict[str, dict[str, Any]] = {
    "single_2.16_cpu": dict(
        instance_type="ml.c5.xlarge", instance_count=1, framework_version="2.16", py_version="py310"
    ),
    "single_2.13.0_gpu_model_dir_false": dict(
        instance_type="ml.p3.2xlarge",
        instance_count=1,
        framework_version="2.13.0",
        py_version="py310",
        model_dir=False,
    ),
    "model_dir_given": dict(
        instance_type="ml.m5.xlarge",
        instance_count=1,
        framework_version="2.14.1",
        py_version="py310",
        model_dir="s3://my-bucket/models",
    ),
    "mwms_2x": dict(
        instance_type="ml.c5.2xlarge",
        instance_count=2,
        framework_version="2.16",
        py_version="py310",
        distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
    ),
    "parameter_server_3x": dict(
        instance_type="ml.c5.xlarge",
        instance_count=3,
        framework_version="2.13.0",
        py_version="py310",
        distribution={"parameter_server": {"enabled": True}},
    ),
    "horovod_mpi_2x": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="2.13.0",
        py_version="py310",
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 8,
                "custom_mpi_options": "-verbose -x HOROVOD_FUSION_THRESHOLD=0",
            }
        },
    ),
    "smddp_2.5": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="2.5.0",
        py_version="py37",
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
    ),
    "old_1.15.5_py3_cuda11_p4d": dict(
        instance_type="ml.p4d.24xlarge", instance_count=1, framework_version="1.15.5", py_version="py37"
    ),
    "metrics_off_1.14": dict(
        instance_type="ml.m5.large", instance_count=1, framework_version="1.14", py_version="py3"
    ),
    "mwms_disabled": dict(
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.16",
        py_version="py310",
        distribution={"multi_worker_mirrored_strategy": {"enabled": False}},
    ),
}


def _ours(kwargs: dict[str, Any], inputs: Any, job_name: str) -> dict[str, Any]:
    estimator = TensorFlow(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
    return estimator.plan(inputs, job_name=job_name).to_request()


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_equals_sdk_request(case: str, src: Path, sdk_capture: Any) -> None:  # noqa: F811
    kwargs = {**CASES[case], "entry_point": "train.py", "source_dir": str(src), "hyperparameters": HPS}
    job_name = f"tf-{case.replace('_', '-').replace('.', '-')}"[:50]
    sdk_raw = sdk_capture(kwargs, INPUTS["default"], job_name, sdk_class=SdkTensorFlow)
    ours_raw = _ours(kwargs, INPUTS["default"], job_name)
    assert _differences(_normalise(sdk_raw), _normalise(ours_raw)) == []
    assert list(sdk_raw["HyperParameters"]) == list(ours_raw["HyperParameters"])


def test_default_job_name_and_image(src: Path) -> None:  # noqa: F811
    kwargs = {**CASES["single_2.16_cpu"], "entry_point": "train.py", "source_dir": str(src)}
    spec = TensorFlow(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs).plan()
    assert spec.TrainingJobName.startswith("tensorflow-training-")
    assert spec.AlgorithmSpecification.TrainingImage == (
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.16-cpu-py310"
    )


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        (
            dict(
                framework_version="2.8",
                py_version="py39",
                distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
            ),
            "framework_version",
            "2.9 or newer",
        ),
        (
            dict(distribution={"multi_worker_mirrored_strategy": {"enabled": True}, "parameter_server": {}}),
            "distribution",
            "cannot be combined",
        ),
        (
            dict(distribution={"torch_distributed": {"enabled": True}}),
            "distribution.torch_distributed",
            "PyTorch ranks",
        ),
        (
            dict(distribution={"parameter_server": {"enabled": True}, "mpi": {"enabled": True}}),
            "distribution",
            "two launchers",
        ),
        (
            dict(distribution={"multi_worker_mirrored_strategy": {"enabeld": True}}),
            "distribution.multi_worker_mirrored_strategy.enabeld",
            "did you mean 'enabled'",
        ),
        (dict(framework_version="2.99"), "framework_version", "TensorFlow training images"),
        (dict(framework_version="1.10"), "framework_version", "legacy mode"),
        (dict(py_version="py2"), "py_version", "Python 2"),
        (dict(model_dir=3), "model_dir", "string, or False"),
        (dict(framework_version=None), "framework_version", "pick the TensorFlow image"),
    ],
)
def test_bad_arguments_name_the_field(src: Path, kwargs: dict[str, Any], field: str, words: str) -> None:  # noqa: F811
    base = dict(
        entry_point="train.py",
        source_dir=str(src),
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.16",
        py_version="py310",
    )
    with pytest.raises(ConfigurationError) as error:
        TensorFlow(role=ROLE, sagemaker_session=FakeSageMakerSession(), **{**base, **kwargs})
    assert error.value.field == field and words in str(error.value), str(error.value)


def test_pytorch_refuses_tensorflow_strategies(src: Path) -> None:  # noqa: F811
    from smlaunch import PyTorch

    with pytest.raises(ConfigurationError, match="TensorFlow only"):
        PyTorch(
            role=ROLE,
            sagemaker_session=FakeSageMakerSession(),
            entry_point="train.py",
            source_dir=str(src),
            instance_type="ml.c5.xlarge",
            instance_count=2,
            framework_version="2.1.0",
            py_version="py310",
            distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
        )


def test_local_horovod_tensorflow_script_is_refused_at_fit(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import tensorflow as tf\nimport horovod.tensorflow.keras as hvd\n")
    estimator = TensorFlow(
        entry_point="train.py",
        source_dir=str(code),
        role=ROLE,
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.16",
        py_version="py310",
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
        sagemaker_session=LocalSession(tmp_path / "jobs"),
    )
    with pytest.raises(ConfigurationError) as error:
        estimator.fit(wait=False)
    assert error.value.field == "entry_point"
    assert "Horovod for TensorFlow needs the real Horovod, in a container image that has it" in str(
        error.value
    )
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())  # nothing started


def test_attach_restores_model_dir(src: Path, sdk_capture: Any) -> None:  # noqa: F811
    description = {
        "TrainingJobName": "tf-attach",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
            "tensorflow-training:2.16-cpu-py310",
            "TrainingInputMode": "File",
        },
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "HyperParameters": {
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": '"s3://b/src.tgz"',
            "sagemaker_container_log_level": "20",
            "sagemaker_region": '"us-west-2"',
            "sagemaker_job_name": '"tf-attach"',
            "model_dir": '"s3://b/tf-attach/model"',
            "epochs": "3",
        },
        "OutputDataConfig": {"S3OutputPath": "s3://b/"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    }
    kwargs = describe.arguments(description, "tensorflow")
    assert kwargs["model_dir"] == "s3://b/tf-attach/model" and kwargs["framework_version"] == "2.16"
    assert kwargs["py_version"] == "py310" and kwargs["image_uri"] is None
    assert kwargs["hyperparameters"] == {"epochs": 3}
