"""JobSettings: ranks per host, GPUs and CUDA emulation decided once, and ``settings.json`` typed."""

from __future__ import annotations

import typing
from pathlib import Path

import pydantic
import pytest

from smlaunch.sdk.backends.emulated.executors import EXECUTORS
from smlaunch.sdk.backends.emulated.job_settings import (
    DockerSettings,
    EmulatedGpus,
    ExecutorSettings,
    JobSettings,
    ProcessSettings,
    SlurmSettings,
)
from smlaunch.sdk.request.spec import TrainingJobSpec
from smlaunch.sdk.sessions.settings import Settings

PROCESS = ProcessSettings(python="/usr/bin/python3")
V100S = EmulatedGpus(gpus=8, model="V100", memory_gib=16.0)


def _spec(instance_type: str) -> TrainingJobSpec:
    return TrainingJobSpec(
        TrainingJobName="settings-job",
        AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/r",
        OutputDataConfig={"S3OutputPath": "file:///tmp/out"},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )


def _resolve(
    instance_type: str, machine_gpus: int = 0, host_gpus: int | None = 0, **knobs: object
) -> JobSettings:
    session = Settings(root=Path("/tmp/jobs"), **knobs)  # type: ignore[arg-type]
    return JobSettings.resolve(
        _spec(instance_type), session, PROCESS, machine_gpus=machine_gpus, host_gpus=host_gpus
    )


def test_a_gpu_type_on_a_machine_without_gpus_gets_a_rank_per_emulated_gpu() -> None:
    settings = _resolve("ml.p3.16xlarge")
    assert settings.processes_per_host == 8
    assert settings.emulate_cuda == V100S and settings.num_gpus == 8
    assert settings.gpu_devices is False


def test_a_cpu_type_gets_one_rank_and_no_gpus() -> None:
    settings = _resolve("ml.c5.xlarge", machine_gpus=4, host_gpus=None)
    assert settings.processes_per_host == 1
    assert settings.emulate_cuda is None and settings.num_gpus is None  # the host counts them
    assert settings.gpu_devices is False


def test_an_explicit_processes_per_host_replaces_the_gpu_count() -> None:
    settings = _resolve("ml.p3.16xlarge", processes_per_host=3)
    assert settings.processes_per_host == 3
    assert settings.emulate_cuda == V100S  # the GPUs the ranks see do not change


def test_trainium_gets_a_rank_per_neuron_core() -> None:
    assert _resolve("ml.trn1.32xlarge").processes_per_host == 32
    assert _resolve("ml.trn2.48xlarge").processes_per_host == 64
    assert _resolve("ml.trn1.32xlarge").emulate_cuda is None


def test_local_gpu_means_this_machines_gpus() -> None:
    settings = _resolve("local_gpu", machine_gpus=4, host_gpus=None)
    assert settings.processes_per_host == 4 and settings.gpu_devices is True
    assert settings.emulate_cuda is None and settings.num_gpus is None
    assert _resolve("local_gpu", machine_gpus=0).processes_per_host == 1


def test_cuda_emulation_follows_the_machine_and_the_session() -> None:
    assert _resolve("ml.p3.16xlarge", emulate_cuda=False).emulate_cuda is None
    assert _resolve("ml.p3.16xlarge", emulate_cuda=False).num_gpus == 0  # what the host is told
    enough = _resolve("ml.p3.16xlarge", machine_gpus=8, host_gpus=None)
    assert enough.emulate_cuda is None and enough.num_gpus is None and enough.gpu_devices is True
    fewer = _resolve("ml.p3.16xlarge", machine_gpus=4, host_gpus=None)
    assert fewer.emulate_cuda == V100S and fewer.num_gpus == 8
    forced = _resolve("ml.p3.16xlarge", machine_gpus=8, host_gpus=None, emulate_cuda=True)
    assert forced.emulate_cuda == V100S
    assert _resolve("ml.c5.xlarge", emulate_cuda=True).emulate_cuda is None  # no GPUs to emulate


def test_the_session_knobs_are_carried_over() -> None:
    settings = _resolve(
        "ml.c5.xlarge",
        stop_grace_seconds=7,
        artifact_conflicts="error",
        install_requirements=False,
    )
    assert settings.stop_grace_seconds == 7.0
    assert settings.artifact_conflicts == "error" and settings.install_requirements is False


@pytest.mark.parametrize(
    "executor",
    [
        PROCESS,
        DockerSettings(image="smlaunch-cpu:test", uid=1000, gid=1000),
        SlurmSettings(python="/venv/bin/python", shared_dir="/shared", container_image=None),
    ],
)
def test_settings_json_reads_back_as_written(executor: ExecutorSettings) -> None:
    settings = _resolve("ml.p3.16xlarge").model_copy(
        update={"executor": executor, "requirements_cache": Path("/tmp/jobs/.requirements")}
    )
    assert JobSettings.model_validate_json(settings.model_dump_json()) == settings
    assert settings.executor_fields(type(executor)) is executor


def test_a_settings_json_with_an_unknown_field_is_refused() -> None:
    text = _resolve("ml.c5.xlarge").model_dump_json()
    with pytest.raises(pydantic.ValidationError, match="gpus"):
        JobSettings.model_validate_json(text[:-1] + ', "gpus": true}')


def test_an_executor_reading_another_executors_fields_is_told_which() -> None:
    with pytest.raises(ValueError, match="'process' is not 'docker'"):
        _resolve("ml.c5.xlarge").executor_fields(DockerSettings)


def test_the_hosts_are_pointed_at_the_sessions_s3() -> None:
    settings = _resolve("ml.c5.xlarge")
    assert settings.s3_environment() == {}
    remote = settings.model_copy(
        update={"s3_endpoint_url": "http://127.0.0.1:5000", "s3_region_name": "eu-west-1"}
    )
    assert remote.s3_environment() == {
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:5000",
        "AWS_REGION": "eu-west-1",
    }


def test_every_executor_has_a_settings_model_of_its_name() -> None:
    union = typing.get_args(typing.get_args(ExecutorSettings)[0])
    assert sorted(model.model_fields["name"].default for model in union) == sorted(EXECUTORS)
