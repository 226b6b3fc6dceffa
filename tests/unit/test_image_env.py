"""What a SageMaker framework image gives a job that local processes must be given: Keras 2 as
``tf.keras`` for TensorFlow images before 2.16 (``smlaunch/sdk/backends/emulated/image_env.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch.sdk.backends.emulated import image_env, layout
from smlaunch.sdk.request.spec import TrainingJobSpec

DLC = "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training"


@pytest.fixture
def tf_keras_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_env, "installed", lambda module: module == "tf_keras")


@pytest.mark.parametrize(
    ("image", "version"),
    [
        (f"{DLC}:2.14.1-cpu-py310", (2, 14)),
        (f"{DLC}:2.1.0-gpu-py3", (2, 1)),
        (f"{DLC}:1.15.2-cpu-py3", (1, 15)),
        ("tensorflow-training:2.16-cpu-py310", (2, 16)),
        (
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-tensorflow-training:2.6.3-"
            "transformers4.17.0-gpu-py38-cuda11.2-ubuntu20.04",
            (2, 6),
        ),
        (f"{DLC}@sha256:0123", None),
        ("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.13.1-cpu-py39", None),
        ("my-image:2.14", None),
        (None, None),
    ],
)
def test_the_tensorflow_version_comes_from_the_image_tag(image: str | None, version: object) -> None:
    assert image_env.tensorflow_image_version(image) == version


@pytest.mark.usefixtures("tf_keras_installed")
def test_images_before_2_16_get_keras_2() -> None:
    assert image_env.image_environment(f"{DLC}:2.14.1-cpu-py310") == {"TF_USE_LEGACY_KERAS": "1"}
    assert image_env.image_environment(f"{DLC}:1.15.2-cpu-py3") == {"TF_USE_LEGACY_KERAS": "1"}
    assert image_env.image_environment(f"{DLC}:2.16.2-cpu-py310") == {}
    assert image_env.image_environment(f"{DLC}:2.19-cpu-py312") == {}
    assert image_env.image_environment("sagemaker-training-toolkit-test:tensorflow") == {}


def test_without_tf_keras_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_env, "installed", lambda module: False)
    assert image_env.image_environment(f"{DLC}:2.14.1-cpu-py310") == {}


def _spec(image: str, environment: dict[str, str] | None = None) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(
        {
            "TrainingJobName": "keras-job",
            "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
            "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"},
            "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
            "Environment": environment,
        }
    )


@pytest.mark.usefixtures("tf_keras_installed")
def test_every_host_gets_it_below_the_jobs_environment(tmp_path: Path) -> None:
    def host_env(spec: TrainingJobSpec) -> dict[str, str]:
        return layout.host_environment(spec, tmp_path, {"algo-1": "127.0.0.1"}, 29500, 1, 10.0, 0)

    assert host_env(_spec(f"{DLC}:2.14.1-cpu-py310"))["TF_USE_LEGACY_KERAS"] == "1"
    assert (
        host_env(_spec(f"{DLC}:2.14.1-cpu-py310", {"TF_USE_LEGACY_KERAS": "0"}))["TF_USE_LEGACY_KERAS"] == "0"
    )
    assert "TF_USE_LEGACY_KERAS" not in host_env(_spec(f"{DLC}:2.16.2-cpu-py310"))
