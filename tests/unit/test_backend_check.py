"""``Backend.check``: distribution strategies and input modes against a backend's Capabilities.

The hyperparameters of each spec are the wire encoding of a parsed ``distribution`` (what the
estimator sends), so the strategy ``check`` derives is the one the runtime would launch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, get_args

import pytest

from estimator import hyperparameters as hp
from estimator.backends.base import Backend, Capabilities
from estimator.backends.local.backend import LocalBackend
from estimator.backends.sagemaker import SageMakerBackend
from estimator.distribution import Distribution, Strategy
from estimator.errors import ConfigurationError, UnsupportedByBackendError
from estimator.session import LocalSession
from estimator.spec import CheckpointConfig, RetryStrategy, TensorBoardOutputConfig, TrainingJobSpec

DISTRIBUTIONS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "torch_distributed": {"torch_distributed": {"enabled": True}},
    "pytorchddp": {"pytorchddp": {"enabled": True}},
    "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}},
    "mpi": {"mpi": {"enabled": True, "processes_per_host": 2}},
    "modelparallel": {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}},
        "mpi": {"enabled": True, "processes_per_host": 8},
    },
    "parameter_server": {"parameter_server": {"enabled": True}},
    "multi_worker_mirrored_strategy": {"multi_worker_mirrored_strategy": {"enabled": True}},
}


class NarrowBackend(Backend):
    """A backend that runs plain processes and torchrun-style DDP only, from File-mode inputs."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        name="narrow",
        uri_schemes=frozenset({"s3"}),
        input_modes=frozenset({"File"}),
        distributions=frozenset({"none", "torch_distributed"}),
    )

    def submit(self, spec: TrainingJobSpec) -> None:
        raise AssertionError("check only")

    def describe(self, job_name: str) -> dict[str, Any]:
        raise AssertionError("check only")

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        raise AssertionError("check only")

    def stop(self, job_name: str, reason: str | None = None) -> None:
        raise AssertionError("check only")


def make_spec(
    distribution: Mapping[str, Any] | None = None,
    input_mode: str = "File",
    channels: list[dict[str, Any]] | None = None,
) -> TrainingJobSpec:
    hyperparameters = {"epochs": 2, **Distribution.parse(distribution).to_hyperparameters("ml.p4d.24xlarge")}
    return TrainingJobSpec(
        TrainingJobName="check-2026-11-22-03-50-00-000",
        AlgorithmSpecification={"TrainingInputMode": input_mode},
        RoleArn="arn:aws:iam::111122223333:role/check",
        OutputDataConfig={"S3OutputPath": "s3://out/prefix/"},
        ResourceConfig={"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        HyperParameters=hp.encode(hyperparameters),
        InputDataConfig=channels,
    )


def s3_channel(name: str, mode: str | None = None) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "ChannelName": name,
        "DataSource": {"S3DataSource": {"S3Uri": f"s3://data/{name}/"}},
    }
    if mode is not None:
        channel["InputMode"] = mode
    return channel


def test_distribution_table_covers_every_strategy() -> None:
    assert {Distribution.parse(d).strategy for d in DISTRIBUTIONS.values()} == set(get_args(Strategy))
    for name, distribution in DISTRIBUTIONS.items():
        assert Distribution.parse(distribution).strategy == name


@pytest.mark.parametrize("backend", [LocalBackend, SageMakerBackend], ids=lambda b: b.__name__)
def test_every_backend_declares_the_strategy_names_distribution_uses(backend: type[Backend]) -> None:
    assert backend.capabilities.distributions == frozenset(get_args(Strategy))


@pytest.mark.parametrize("strategy", list(DISTRIBUTIONS))
def test_local_backend_accepts_every_strategy(strategy: str, tmp_path: Path) -> None:
    LocalBackend(LocalSession(tmp_path)).check(make_spec(DISTRIBUTIONS[strategy]))


@pytest.mark.parametrize("strategy", ["none", "torch_distributed"])
def test_declared_strategies_pass(strategy: str) -> None:
    NarrowBackend().check(make_spec(DISTRIBUTIONS[strategy]))


@pytest.mark.parametrize("strategy", ["pytorchddp", "smddp", "mpi", "modelparallel"])
def test_undeclared_strategy_is_refused_by_name(strategy: str) -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_spec(DISTRIBUTIONS[strategy]))
    assert caught.value.field == "distribution"
    assert caught.value.value == strategy
    assert str(caught.value) == (
        f"distribution={strategy!r}: distribution strategy not supported on the narrow backend. "
        "Fix: use one of ['none', 'torch_distributed'] or another backend"
    )


def test_disabled_strategy_is_none() -> None:
    NarrowBackend().check(make_spec({"mpi": {"enabled": False}}))


def test_job_input_mode_is_checked_without_any_channel() -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_spec(input_mode="Pipe"))
    assert caught.value.field == "input_mode"
    assert str(caught.value) == (
        "input_mode='Pipe': input mode not supported on the narrow backend. Fix: use one of ['File']"
    )


def test_job_input_mode_is_checked_when_channels_override_it() -> None:
    with pytest.raises(UnsupportedByBackendError, match=r"^input_mode='FastFile': input mode not supported"):
        NarrowBackend().check(make_spec(input_mode="FastFile", channels=[s3_channel("train", "File")]))


def test_channel_input_mode_is_still_checked() -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_spec(channels=[s3_channel("train"), s3_channel("eval", "Pipe")]))
    assert caught.value.field == "inputs['eval'].input_mode"
    assert str(caught.value) == (
        "inputs['eval'].input_mode='Pipe': input mode not supported on the narrow backend. "
        "Fix: use one of ['File']"
    )


def test_supported_modes_pass(tmp_path: Path) -> None:
    NarrowBackend().check(make_spec(channels=[s3_channel("train"), s3_channel("eval", "File")]))
    LocalBackend(LocalSession(tmp_path)).check(make_spec(input_mode="Pipe"))


def _with_local_path(field: str, local_path: str | None) -> TrainingJobSpec:
    if field == "checkpoint_local_path":
        return make_spec().model_copy(
            update={"CheckpointConfig": CheckpointConfig(S3Uri="s3://out/ckpt", LocalPath=local_path)}
        )
    return make_spec().model_copy(
        update={
            "TensorBoardOutputConfig": TensorBoardOutputConfig(
                S3OutputPath="s3://out/tb", LocalPath=local_path
            )
        }
    )


CONTAINER_DIR_FIELDS = ["checkpoint_local_path", "tensorboard_output_config.container_local_output_path"]


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
@pytest.mark.parametrize(
    ("local_path", "problem"),
    [
        ("/tmp/tensorboard", "outside /opt/ml"),
        ("/opt/ml/../tmp/tb", "outside /opt/ml"),
        ("/opt/ml", "is /opt/ml itself or above it"),
        ("/opt/", "is /opt/ml itself or above it"),
        ("logs/tb", "must be an absolute path"),
    ],
)
def test_local_processes_refuse_a_container_path_outside_opt_ml(
    tmp_path: Path, field: str, local_path: str, problem: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        LocalBackend(LocalSession(tmp_path)).check(_with_local_path(field, local_path))
    assert caught.value.field == field and caught.value.value == local_path
    assert problem in str(caught.value) and caught.value.fix
    if problem == "outside /opt/ml":
        assert "executor='docker'" in caught.value.fix


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
def test_local_processes_accept_container_paths_under_opt_ml(tmp_path: Path, field: str) -> None:
    for local_path in (None, "/opt/ml/output/tensorboard", "/opt/ml/checkpoints", "/opt/ml/logs/x"):
        LocalBackend(LocalSession(tmp_path)).check(_with_local_path(field, local_path))


@pytest.mark.parametrize(("job_mode", "channel_mode"), [("File", None), ("FastFile", None), ("Pipe", "File")])
def test_gzip_channels_outside_pipe_mode_are_refused_by_every_backend(
    tmp_path: Path, job_mode: str, channel_mode: str | None
) -> None:
    channel = {**s3_channel("train", channel_mode), "CompressionType": "Gzip"}
    spec = make_spec(input_mode=job_mode, channels=[channel])
    for backend in (LocalBackend(LocalSession(tmp_path)), SageMakerBackend.__new__(SageMakerBackend)):
        with pytest.raises(ConfigurationError) as caught:
            backend.check(spec)
        assert not isinstance(caught.value, UnsupportedByBackendError)  # SageMaker's rule, not a gap
        assert caught.value.field == "inputs['train'].compression" and caught.value.value == "Gzip"
        assert f"in {channel_mode or job_mode} mode" in str(caught.value)
        assert "input_mode='Pipe'" in caught.value.fix


def test_gzip_channels_in_pipe_mode_pass(tmp_path: Path) -> None:
    gzipped = {**s3_channel("train", "Pipe"), "CompressionType": "Gzip"}
    plain = {**s3_channel("val"), "CompressionType": "None"}
    LocalBackend(LocalSession(tmp_path)).check(make_spec(channels=[gzipped, plain]))


def test_a_backend_without_retries_names_max_retry_attempts() -> None:
    spec = make_spec().model_copy(update={"RetryStrategy": RetryStrategy(MaximumRetryAttempts=2)})
    with pytest.raises(
        UnsupportedByBackendError, match=r"^max_retry_attempts=2: .*Fix: drop max_retry_attempts"
    ):
        NarrowBackend().check(spec)


def test_the_local_backend_accepts_max_retry_attempts(tmp_path: Path) -> None:
    spec = make_spec().model_copy(update={"RetryStrategy": RetryStrategy(MaximumRetryAttempts=2)})
    LocalBackend(LocalSession(tmp_path)).check(spec)
