"""``Backend.check``: distribution strategies and input modes against a backend's Capabilities.

Each request is what the estimator hands a backend: the spec, whose hyperparameters are the wire
encoding of a parsed ``distribution``, and that distribution's strategy beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.base import Backend, Capabilities
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.executors.process.spawn import PrivateOptMl
from smlaunch.sdk.backends.sagemaker.backend import SageMakerBackend
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.distribution import Distribution
from smlaunch.sdk.request.spec import (
    CheckpointConfig,
    JobRequest,
    RetryStrategy,
    TensorBoardOutputConfig,
    TrainingJobSpec,
)
from smlaunch.sdk.sessions.sagemaker import LocalSession

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
        distributions=frozenset({Strategy.NONE, Strategy.TORCH_DISTRIBUTED}),
    )

    def submit(self, request: JobRequest) -> None:
        raise AssertionError("check only")

    def describe(self, job_name: str) -> dict[str, Any]:
        raise AssertionError("check only")

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        raise AssertionError("check only")

    def stop(self, job_name: str, reason: str | None = None) -> None:
        raise AssertionError("check only")


def make_request(
    distribution: Mapping[str, Any] | None = None,
    input_mode: str = "File",
    channels: list[dict[str, Any]] | None = None,
) -> JobRequest:
    parsed = Distribution.parse(distribution)
    hyperparameters = {"epochs": 2, **parsed.to_hyperparameters("ml.p4d.24xlarge")}
    spec = TrainingJobSpec(
        TrainingJobName="check-2026-11-22-03-50-00-000",
        AlgorithmSpecification={"TrainingInputMode": input_mode},
        RoleArn="arn:aws:iam::111122223333:role/check",
        OutputDataConfig={"S3OutputPath": "s3://out/prefix/"},
        ResourceConfig={"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        HyperParameters=hp.encode(hyperparameters),
        InputDataConfig=channels,
    )
    return JobRequest(spec, parsed.strategy)


def plain_request(**update: Any) -> JobRequest:
    """A job without a distribution, with these spec fields replaced."""
    return JobRequest(make_request().spec.model_copy(update=update), Strategy.NONE)


def s3_channel(name: str, mode: str | None = None) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "ChannelName": name,
        "DataSource": {"S3DataSource": {"S3Uri": f"s3://data/{name}/"}},
    }
    if mode is not None:
        channel["InputMode"] = mode
    return channel


def test_distribution_table_covers_every_strategy() -> None:
    assert {Distribution.parse(d).strategy for d in DISTRIBUTIONS.values()} == set(Strategy)
    for name, distribution in DISTRIBUTIONS.items():
        assert Distribution.parse(distribution).strategy == name


@pytest.mark.parametrize("backend", [LocalBackend, SageMakerBackend], ids=lambda b: b.__name__)
def test_every_backend_declares_the_strategy_names_distribution_uses(backend: type[Backend]) -> None:
    assert backend.capabilities.distributions == frozenset(Strategy)


@pytest.mark.parametrize("strategy", list(DISTRIBUTIONS))
def test_local_backend_accepts_every_strategy(strategy: str, tmp_path: Path) -> None:
    LocalBackend(LocalSession(tmp_path)).check(make_request(DISTRIBUTIONS[strategy]))


@pytest.mark.parametrize("strategy", ["none", "torch_distributed"])
def test_declared_strategies_pass(strategy: str) -> None:
    NarrowBackend().check(make_request(DISTRIBUTIONS[strategy]))


@pytest.mark.parametrize("strategy", ["pytorchddp", "smddp", "mpi", "modelparallel"])
def test_undeclared_strategy_is_refused_by_name(strategy: str) -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_request(DISTRIBUTIONS[strategy]))
    assert caught.value.field == "distribution"
    assert caught.value.value == strategy
    assert str(caught.value) == (
        f"distribution={strategy!r}: distribution strategy not supported on the narrow backend. "
        "Fix: use one of ['none', 'torch_distributed'] or another backend"
    )


def test_disabled_strategy_is_none() -> None:
    NarrowBackend().check(make_request({"mpi": {"enabled": False}}))


def test_job_input_mode_is_checked_without_any_channel() -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_request(input_mode="Pipe"))
    assert caught.value.field == "input_mode"
    assert str(caught.value) == (
        "input_mode='Pipe': input mode not supported on the narrow backend. Fix: use one of ['File']"
    )


def test_job_input_mode_is_checked_when_channels_override_it() -> None:
    with pytest.raises(UnsupportedByBackendError, match=r"^input_mode='FastFile': input mode not supported"):
        NarrowBackend().check(make_request(input_mode="FastFile", channels=[s3_channel("train", "File")]))


def test_channel_input_mode_is_still_checked() -> None:
    with pytest.raises(UnsupportedByBackendError) as caught:
        NarrowBackend().check(make_request(channels=[s3_channel("train"), s3_channel("eval", "Pipe")]))
    assert caught.value.field == "inputs['eval'].input_mode"
    assert str(caught.value) == (
        "inputs['eval'].input_mode='Pipe': input mode not supported on the narrow backend. "
        "Fix: use one of ['File']"
    )


def test_supported_modes_pass(tmp_path: Path) -> None:
    NarrowBackend().check(make_request(channels=[s3_channel("train"), s3_channel("eval", "File")]))
    LocalBackend(LocalSession(tmp_path)).check(make_request(input_mode="Pipe"))


def _with_local_path(field: str, local_path: str | None) -> JobRequest:
    if field == "checkpoint_local_path":
        return plain_request(CheckpointConfig=CheckpointConfig(S3Uri="s3://out/ckpt", LocalPath=local_path))
    return plain_request(
        TensorBoardOutputConfig=TensorBoardOutputConfig(S3OutputPath="s3://out/tb", LocalPath=local_path)
    )


CONTAINER_DIR_FIELDS = ["checkpoint_local_path", "tensorboard_output_config.container_local_output_path"]


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
@pytest.mark.parametrize(
    ("local_path", "problem"),
    [
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


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
def test_local_processes_accept_a_new_container_path_outside_opt_ml(tmp_path: Path, field: str) -> None:
    """Each host's namespace binds its own directory there; checking creates nothing."""
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")
    (tmp_path / "exists").mkdir()
    for local_path in (tmp_path / "new" / "ckpt", tmp_path / "exists", f"/opt/ml/..{tmp_path}/tb"):
        LocalBackend(LocalSession(tmp_path / "jobs")).check(_with_local_path(field, str(local_path)))
    assert not (tmp_path / "new").exists() and not (tmp_path / "tb").exists()


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
def test_local_processes_refuse_a_container_path_covering_what_hosts_need(tmp_path: Path, field: str) -> None:
    store = tmp_path / "jobs"
    for local_path, covered in (
        ("/usr", "/usr"),
        ("/tmp", "/tmp"),
        ("/proc/", "/proc"),
        (str(tmp_path), str(store)),
        (sys.prefix, sys.prefix),
    ):
        with pytest.raises(ConfigurationError) as caught:
            LocalBackend(LocalSession(store)).check(_with_local_path(field, local_path))
        assert caught.value.field == field and caught.value.value == local_path
        assert "which every host needs" in str(caught.value) and covered in str(caught.value)
    with pytest.raises(ConfigurationError, match="inside the job store"):
        LocalBackend(LocalSession(store)).check(_with_local_path(field, str(store / "ckpt")))


@pytest.mark.parametrize("field", CONTAINER_DIR_FIELDS)
def test_local_processes_refuse_a_container_path_they_cannot_mount(
    tmp_path: Path, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current refusal, with why: not a directory, not creatable, no private namespace."""
    (tmp_path / "file").write_text("")
    backend = LocalBackend(LocalSession(tmp_path / "jobs"))
    for local_path, why in (
        (tmp_path / "file", "exists and is not a directory"),
        (tmp_path / "file" / "ckpt", "is not a writable directory"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            backend.check(_with_local_path(field, str(local_path)))
        assert "outside /opt/ml" in str(caught.value) and why in str(caught.value)
        assert "executor='docker'" in caught.value.fix
    monkeypatch.setattr(PrivateOptMl, "unavailable", lambda self, tree: "no user namespaces")
    with pytest.raises(ConfigurationError) as caught:
        backend.check(_with_local_path(field, str(tmp_path / "ckpt")))
    assert "one directory shared by every host" in str(caught.value) and "no user namespaces" in str(
        caught.value
    )
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
    request = make_request(input_mode=job_mode, channels=[channel])
    for backend in (LocalBackend(LocalSession(tmp_path)), SageMakerBackend.__new__(SageMakerBackend)):
        with pytest.raises(ConfigurationError) as caught:
            backend.check(request)
        assert not isinstance(caught.value, UnsupportedByBackendError)  # SageMaker's rule, not a gap
        assert caught.value.field == "inputs['train'].compression" and caught.value.value == "Gzip"
        assert f"in {channel_mode or job_mode} mode" in str(caught.value)
        assert "input_mode='Pipe'" in caught.value.fix


def test_gzip_channels_in_pipe_mode_pass(tmp_path: Path) -> None:
    gzipped = {**s3_channel("train", "Pipe"), "CompressionType": "Gzip"}
    plain = {**s3_channel("val"), "CompressionType": "None"}
    LocalBackend(LocalSession(tmp_path)).check(make_request(channels=[gzipped, plain]))


def test_a_backend_without_retries_names_max_retry_attempts() -> None:
    request = plain_request(RetryStrategy=RetryStrategy(MaximumRetryAttempts=2))
    with pytest.raises(
        UnsupportedByBackendError, match=r"^max_retry_attempts=2: .*Fix: drop max_retry_attempts"
    ):
        NarrowBackend().check(request)


def test_the_local_backend_accepts_max_retry_attempts(tmp_path: Path) -> None:
    request = plain_request(RetryStrategy=RetryStrategy(MaximumRetryAttempts=2))
    LocalBackend(LocalSession(tmp_path)).check(request)


def test_the_strategy_is_the_requests_not_decoded_from_the_wire() -> None:
    """The backend reads the strategy the estimator handed it beside the spec."""
    with pytest.raises(UnsupportedByBackendError, match=r"^distribution='mpi': "):
        NarrowBackend().check(JobRequest(make_request().spec, Strategy.MPI))
