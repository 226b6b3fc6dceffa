"""The Docker executor without a Docker engine: bad input and faults against a fake Docker client.

The fake implements the few calls of the Docker SDK the backend uses (``ping``, ``images.get``,
``containers.run/get/list``, a container's ``wait/logs/kill/remove/reload``), so every decision the
backend takes (what it refuses, how it starts a host, how it reports a container that died from
outside) is checked here; tests/integration runs the same code against a real engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.executors import ssh as container_ssh
from smlaunch.sdk.backends.emulated.executors.docker import containers
from smlaunch.sdk.backends.emulated.executors.docker import executor as docker_backend
from smlaunch.sdk.backends.emulated.executors.docker import images as docker_images
from smlaunch.sdk.backends.emulated.executors.docker.containers import (
    LABEL_JOB,
    ContainerProcess,
    FailedStart,
    _LineReader,
    sweep,
)
from smlaunch.sdk.backends.emulated.executors.docker.executor import CONTAINER_BASE_DIR, DockerExecutor
from smlaunch.sdk.backends.emulated.executors.ssh import (
    CONTAINER_SSH_DIR,
    ssh_environment,
    uses_mpi,
    write_ssh_material,
)
from smlaunch.sdk.backends.emulated.job_settings import DockerSettings, JobSettings
from smlaunch.sdk.backends.emulated.layout import read_only_sources
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.spec import CheckpointConfig, TensorBoardOutputConfig
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import job_request, make_spec

# --- a fake Docker client -------------------------------------------------------------------------


class FakeImage:
    def __init__(self, image_id: str, labels: dict[str, str] | None = None) -> None:
        self.id = image_id
        self.labels = labels or {}


class FakeContainer:
    def __init__(self, name: str, labels: dict[str, str], output: list[bytes], exit_code: int | None) -> None:
        self.name = name
        self.id = f"id-{name}"
        self.labels = labels
        self.output = output
        self.status = "running"
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 0, "OOMKilled": False}}
        self.signals: list[int] = []
        self.removed = False
        self._done = threading.Event()
        self._code = 0
        if exit_code is not None:
            self.finish(exit_code)

    def finish(self, code: int) -> None:
        self._code = code
        self.status = "exited"
        self.attrs["State"]["ExitCode"] = code
        self._done.set()

    def wait(self) -> dict[str, int]:
        assert self._done.wait(10), "fake container never finished"
        return {"StatusCode": self._code}

    def logs(self, **kwargs: Any) -> Iterator[bytes]:
        yield from self.output
        self._done.wait(10)

    def kill(self, signal: int | str = "SIGKILL") -> None:
        self.signals.append(int(signal) if not isinstance(signal, str) else 9)
        self.finish(143 if self.signals[-1] == 15 else 137)

    def reload(self) -> None:
        return None

    def remove(self, force: bool = False) -> None:
        self.removed = True


class FakeContainers:
    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.created: list[dict[str, Any]] = []
        self.all: list[FakeContainer] = []

    def run(self, image: str, command: Any = None, **kwargs: Any) -> Any:
        kwargs = dict(kwargs, image=image, command=command)
        self.created.append(kwargs)
        if kwargs.get("entrypoint") == ["/bin/sh", "-c"]:  # the `train` probe
            if not self.client.has_train:
                raise docker.errors.ContainerError(None, 1, command, image, b"")
            return b"/usr/local/bin/train\n"
        if self.client.start_error is not None:
            raise self.client.start_error
        container = FakeContainer(
            kwargs["name"], kwargs["labels"], list(self.client.output), self.client.exit_code
        )
        self.all.append(container)
        return container

    def get(self, container_id: str) -> FakeContainer:
        return next(c for c in self.all if c.id == container_id)

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[FakeContainer]:
        key, _, value = (filters or {}).get("label", "=").partition("=")
        return [c for c in self.all if c.labels.get(key) == value and not c.removed]


class FakeImages:
    def __init__(self, images: dict[str, FakeImage]) -> None:
        self.images = images

    def get(self, name: str) -> FakeImage:
        if name not in self.images:
            raise docker.errors.ImageNotFound(f"No such image: {name}")
        return self.images[name]


class FakeClient:
    def __init__(
        self, images: dict[str, FakeImage] | None = None, *, alive: bool = True, has_train: bool = True
    ) -> None:
        self.alive = alive
        self.has_train = has_train
        default = {"smlaunch-cpu:test": FakeImage("sha256:a")}
        self.images = FakeImages(images if images is not None else default)
        self.containers = FakeContainers(self)
        self.output: list[bytes] = [b"hello from ", b"the container\nsecond line\n"]
        self.exit_code: int | None = 0
        self.start_error: Exception | None = None

    def ping(self) -> bool:
        if not self.alive:
            raise docker.errors.DockerException("Error while fetching server API version: connection refused")
        return True


@pytest.fixture(autouse=True)
def _forget_probed_images() -> Iterator[None]:
    docker_images.TRAIN_CHECKED.clear()
    docker_images.RUNTIME_CHECKED.clear()
    yield
    docker_images.TRAIN_CHECKED.clear()
    docker_images.RUNTIME_CHECKED.clear()


def _backend(tmp_path: Path, client: FakeClient) -> LocalBackend:
    session = LocalSession(root=tmp_path / "jobs", executor="docker", docker_client=client)
    backend = session.backend()
    assert isinstance(backend, LocalBackend) and isinstance(backend.executor, DockerExecutor)
    return backend


def _spec(tmp_path: Path, name: str = "job-1", image: str = "smlaunch-cpu:test", **kwargs: Any) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = make_spec(tmp_path, name, "print('hi')\n", **kwargs)
    spec.AlgorithmSpecification.TrainingImage = image
    return spec


# --- bad input, refused before anything starts ---------------------------------------------------


def test_no_engine_says_how_to_start_one_or_to_use_processes(tmp_path: Path) -> None:
    backend = _backend(tmp_path, FakeClient(alive=False))
    output = tmp_path / "not-yet" / "out"
    with pytest.raises(ConfigurationError) as err:
        backend.check(job_request(_spec(tmp_path, output_path=output.as_uri())))
    message = str(err.value)
    assert "no Docker engine answers" in message or "does not answer" in message
    assert "dockerd" in message and "executor='process'" in message
    # The engine is checked first: the local checks (which create the output path and the job
    # root, and read manifests) never ran.
    assert not (tmp_path / "not-yet").exists() and not (tmp_path / "jobs").exists()


def test_no_engine_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    with pytest.raises(ConfigurationError) as err:
        containers.docker_client()
    assert err.value.field == "executor"
    assert "dockerd" in str(err.value) and "executor='process'" in str(err.value)


def test_image_missing_locally_is_refused_without_pulling(tmp_path: Path) -> None:
    client = FakeClient()
    backend = _backend(tmp_path, client)
    with pytest.raises(ConfigurationError) as err:
        backend.check(
            job_request(_spec(tmp_path, image="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch:2.1"))
        )
    assert err.value.field == "image_uri"
    assert "never pulls" in str(err.value) and "container/build.sh" in str(err.value)
    assert client.containers.created == []


def test_no_image_at_all_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(docker_backend.DOCKER_IMAGE_ENV, raising=False)
    backend = _backend(tmp_path, FakeClient())
    spec = _spec(tmp_path)
    spec.AlgorithmSpecification.TrainingImage = None
    with pytest.raises(ConfigurationError) as err:
        backend.check(job_request(spec))
    assert err.value.field == "image_uri" and docker_backend.DOCKER_IMAGE_ENV in str(err.value)
    monkeypatch.setenv(docker_backend.DOCKER_IMAGE_ENV, "smlaunch-cpu:test")
    backend.check(job_request(spec))  # the environment variable supplies the image


def test_image_without_train_is_refused(tmp_path: Path) -> None:
    client = FakeClient({"debian:plain": FakeImage("sha256:plain")}, has_train=False)
    backend = _backend(tmp_path, client)
    with pytest.raises(ConfigurationError) as err:
        backend.check(job_request(_spec(tmp_path, image="debian:plain")))
    assert err.value.field == "image_uri" and "no `train` command" in str(err.value)
    probe = client.containers.created[-1]
    assert probe["command"] == ["command -v train"] and probe["remove"] is True
    assert probe["network_mode"] == "none"


def test_foreign_image_with_train_passes_and_is_probed_once(tmp_path: Path) -> None:
    client = FakeClient({"dlc:2.1": FakeImage("sha256:dlc")})
    backend = _backend(tmp_path, client)
    backend.check(job_request(_spec(tmp_path, image="dlc:2.1")))
    backend.check(job_request(_spec(tmp_path, name="job-2", image="dlc:2.1")))
    assert len(client.containers.created) == 1


def test_our_labelled_image_is_not_probed(tmp_path: Path) -> None:
    client = FakeClient({"ours": FakeImage("sha256:o", {docker_images.LABEL_OURS: "abc"})})
    _backend(tmp_path, client).check(job_request(_spec(tmp_path, image="ours")))
    assert client.containers.created == []


def test_mount_path_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    backend = _backend(tmp_path, FakeClient())
    missing = tmp_path / "no-such-data"
    with pytest.raises(ConfigurationError) as err:
        backend.check(job_request(_spec(tmp_path, inputs={"train": missing.as_uri()})))
    assert err.value.field == "inputs['train']" and f"{missing} does not exist" in str(err.value)


def test_read_only_sources_are_code_channels_and_the_s3_cache(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    spec = _spec(tmp_path, inputs={"train": data.as_uri(), "remote": "s3://bucket/prefix"})
    job = JobDir(tmp_path / "jobs" / "job-1")
    sources = read_only_sources(spec, job)
    assert sources == [tmp_path / "code" / "job-1" / "source", data, job.s3_cache_dir]


# --- starting hosts -------------------------------------------------------------------------------


def _agent(tmp_path: Path, client: FakeClient, spec: Any, **settings: Any) -> Any:
    """The job's agent, its ``settings.json`` the backend's with ``settings`` changed (the Docker
    executor's own fields among them: ``uid``, ``gid``)."""
    backend = _backend(tmp_path, client)
    job = backend.job_dir(spec.TrainingJobName)
    job.logs_dir.mkdir(parents=True)
    job.job_log.touch()
    write_json_atomic(job.spec_file, spec.to_request())
    values = backend.settings(spec).model_dump(mode="json")
    for name, value in settings.items():
        (values["executor"] if name in DockerSettings.model_fields else values)[name] = value
    write_json_atomic(job.settings_file, JobSettings.model_validate(values).model_dump(mode="json"))
    job.write_state({"TrainingJobStatus": contract.STATUS_IN_PROGRESS, "SecondaryStatusTransitions": []})
    return Agent(job, DockerExecutor(client=client, stream_client=client))


def test_container_arguments_per_host(tmp_path: Path) -> None:
    client = FakeClient()
    agent = _agent(tmp_path, client, _spec(tmp_path), gpu_devices=True, uid=1234, gid=5678)
    kwargs = agent.executor.container_kwargs(
        agent.context(), "algo-2", {"A": "1"}, {"/x": {"bind": "/x", "mode": "ro"}}, ["algo-1", "algo-2"]
    )
    assert kwargs["name"] == "job-1-algo-2" and kwargs["hostname"] == "algo-2"
    assert kwargs["command"] == ["train"] and kwargs["image"] == "smlaunch-cpu:test"
    assert kwargs["network_mode"] == "host"
    assert kwargs["extra_hosts"] == {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}
    assert kwargs["user"] == "1234:5678" and kwargs["group_add"] == ["0"]
    assert kwargs["labels"] == {LABEL_JOB: "job-1", containers.LABEL_HOST: "algo-2"}
    [request] = kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    root = _agent(tmp_path / "r", FakeClient(), _spec(tmp_path / "r"), gpu_devices=False, uid=0, gid=0)
    kwargs = root.executor.container_kwargs(root.context(), "algo-1", {}, {}, ["algo-1"])
    assert "device_requests" not in kwargs and "group_add" not in kwargs and kwargs["user"] == "0:0"


def _entrypoint_spec(tmp_path: Path, image: str) -> Any:
    spec = _spec(tmp_path, image=image)
    spec.AlgorithmSpecification.ContainerEntrypoint = ["/bin/bash"]
    spec.AlgorithmSpecification.ContainerArguments = ["-c", "run.sh"]
    return spec


def test_an_entry_point_runs_where_the_image_has_no_smlaunch(tmp_path: Path) -> None:
    """A ModelTrainer job's request (``ContainerEntrypoint``) in an image without smlaunch: no
    ``train`` needed, the containers run the entry point as SageMaker does."""
    client = FakeClient({"debian:plain": FakeImage("sha256:plain")}, has_train=False)
    spec = _entrypoint_spec(tmp_path, "debian:plain")
    _backend(tmp_path, client).check(job_request(spec))
    assert [c["command"] for c in client.containers.created] == [["command -v smlaunch-train"]]
    agent = _agent(tmp_path, client, spec)
    kwargs = agent.executor.container_kwargs(agent.context(), "algo-1", {}, {}, ["algo-1"])
    assert kwargs["entrypoint"] == ["/bin/bash"] and kwargs["command"] == ["-c", "run.sh"]


def test_smlaunch_images_run_the_runtime_for_an_entry_point(tmp_path: Path) -> None:
    client = FakeClient({"ours": FakeImage("sha256:o", {docker_images.LABEL_OURS: "cpu"})})
    spec = _entrypoint_spec(tmp_path, "ours")
    _backend(tmp_path, client).check(job_request(spec))
    assert client.containers.created == []  # ours by its label: nothing probed
    agent = _agent(tmp_path, client, spec)
    kwargs = agent.executor.container_kwargs(agent.context(), "algo-1", {}, {}, ["algo-1"])
    assert kwargs["command"] == ["train"] and "entrypoint" not in kwargs


def _launch_all(agent: Any, client: FakeClient) -> list[dict[str, Any]]:
    """Prepare and launch every host, wait for each; the kwargs of every named container created."""
    agent._prepare()
    agent._launch()
    for host in agent.hosts:
        assert host.proc.wait(10) == 0
        host.pump.join(10)
    return [c for c in client.containers.created if c.get("name")]


def test_launch_mounts_each_host_tree_at_opt_ml_and_streams_prefixed_logs(tmp_path: Path) -> None:
    client = FakeClient()
    agent = _agent(tmp_path, client, _spec(tmp_path))
    created = _launch_all(agent, client)
    assert [c["name"] for c in created] == ["job-1-algo-1", "job-1-algo-2"]
    for kwargs, host in zip(created, agent.hosts, strict=True):
        assert kwargs["volumes"][str(host.base.resolve())] == {"bind": CONTAINER_BASE_DIR, "mode": "rw"}
        code_dir = str(tmp_path / "code" / "job-1" / "source")
        assert kwargs["volumes"][code_dir] == {"bind": code_dir, "mode": "ro"}
        env = kwargs["environment"]
        assert env[contract.BASE_DIR_ENV] == CONTAINER_BASE_DIR
        assert contract.SMLAUNCH_HOST_ADDRESSES not in env  # names resolve via /etc/hosts
        assert env[contract.TRAINING_JOB_NAME_ENV] == "job-1"
        config = json.loads(host.paths.resource_config_file.read_text())
        assert config["network_interface_name"] == "lo" and config["current_host"] == host.name
    log = agent.job.job_log.read_text()
    assert "[algo-1] hello from the container" in log and "[algo-2] second line" in log


PLANTED = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTEDKEYID0001",
    "AWS_SECRET_ACCESS_KEY": "planted/secret/access/key",
    "AWS_SESSION_TOKEN": "planted-session-token",
}


def test_inherited_environment_is_aws_configuration_and_smlaunch_knobs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_PROFILE", "host-profile")
    monkeypatch.setenv("SMLAUNCH_FAULTS", "[]")
    monkeypatch.setenv("SOME_HOST_SECRET", "x")
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    agent = _agent(tmp_path, FakeClient(), _spec(tmp_path))
    env = agent.executor._inherited_env()
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5000" and env["SMLAUNCH_FAULTS"] == "[]"
    assert env["AWS_REGION"] == "eu-west-1"
    assert "SOME_HOST_SECRET" not in env and "PATH" not in env and "AWS_PROFILE" not in env
    assert not set(PLANTED) & set(env)


def test_containers_get_credentials_from_an_endpoint_never_in_their_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted credentials appear in no container's arguments and no file of the job; a
    container's boto3 gets them from the agent's endpoint with the job's token, and no one without it."""
    import urllib.error
    import urllib.request

    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    client = FakeClient()
    agent = _agent(tmp_path, client, _spec(tmp_path))
    try:
        created = _launch_all(agent, client)
        assert len(created) == 2
        definitions = json.dumps(created, default=str)
        written = [p.read_bytes() for p in agent.job.path.rglob("*") if p.is_file()]
        for value in PLANTED.values():
            assert value not in definitions
            assert not any(value.encode() in data for data in written)
        env = created[0]["environment"]
        uri, token = env["AWS_CONTAINER_CREDENTIALS_FULL_URI"], env["AWS_CONTAINER_AUTHORIZATION_TOKEN"]
        assert uri.startswith("http://127.0.0.1:")
        guess = urllib.request.Request(uri, headers={"Authorization": "guess"})
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(guess, timeout=10)
        from botocore.credentials import ContainerProvider

        served = ContainerProvider(
            environ={"AWS_CONTAINER_CREDENTIALS_FULL_URI": uri, "AWS_CONTAINER_AUTHORIZATION_TOKEN": token}
        ).load()
        frozen = served.get_frozen_credentials()
        assert (frozen.access_key, frozen.secret_key, frozen.token) == tuple(PLANTED.values())
    finally:
        agent.executor.credentials.stop()


def test_container_that_cannot_start_fails_the_job_with_a_client_error(tmp_path: Path) -> None:
    client = FakeClient()
    client.start_error = docker.errors.APIError("500 Server Error", explanation="invalid mount config")
    agent = _agent(tmp_path, client, _spec(tmp_path))
    agent.run()
    state = agent.job.read_state()
    assert state["TrainingJobStatus"] == contract.STATUS_FAILED
    assert state["FailureReason"].startswith("ClientError: cannot start algo-1")
    assert "invalid mount config" in state["FailureReason"]
    assert state["ExitCode"] == containers.START_FAILED_EXIT_CODE


def test_mount_source_deleted_before_launch_fails_the_job_naming_it(tmp_path: Path) -> None:
    client = FakeClient()
    agent = _agent(tmp_path, client, _spec(tmp_path))
    source = tmp_path / "code" / "job-1" / "source"
    for path in source.iterdir():
        path.unlink()
    source.rmdir()
    agent.run()
    state = agent.job.read_state()
    assert state["TrainingJobStatus"] == contract.STATUS_FAILED
    assert f"mount source {source} does not exist" in state["FailureReason"]
    assert [c for c in client.containers.created if c.get("name")] == []


def test_container_killed_from_outside_is_the_root_cause(tmp_path: Path) -> None:
    container = FakeContainer("job-algo-2", {}, [b"working\n"], exit_code=137)
    proc = ContainerProcess(container, container, "algo-2")
    assert proc.wait(10) == 137
    lines = [proc.stdout.readline() for _ in range(4)]
    assert lines[0] == b"working\n"
    assert any(b"killed from outside smlaunch" in line for line in lines)
    assert proc.note is not None and "job-algo-2" in proc.note


def test_container_stopped_by_us_is_not_reported_as_killed_from_outside(tmp_path: Path) -> None:
    container = FakeContainer("job-algo-1", {}, [], exit_code=None)
    proc = ContainerProcess(container, container, "algo-1")
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 143 and container.signals == [signal.SIGTERM]
    assert proc.note is None
    proc.kill()  # already ended: nothing is sent
    assert container.signals == [signal.SIGTERM]


def test_wait_times_out_like_popen() -> None:
    container = FakeContainer("c", {}, [], exit_code=None)
    proc = ContainerProcess(container, container, "algo-1")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.05)
    container.finish(0)
    assert proc.wait(10) == 0


def test_failed_start_reads_like_an_exited_process() -> None:
    failed = FailedStart("algo-1", "cannot start algo-1: boom")
    assert failed.poll() == 125 and failed.wait() == 125
    assert failed.stdout.readline() == b"[smlaunch] cannot start algo-1: boom\n"
    assert failed.stdout.readline() == b""


def test_line_reader_joins_and_splits_chunks() -> None:
    reader = _LineReader(iter([b"a", b"b\nc", b"\n", b"tail"]))
    assert [reader.readline() for _ in range(4)] == [b"ab\n", b"c\n", b"tail", b""]


def test_sweep_removes_only_the_jobs_containers() -> None:
    client = FakeClient()
    mine = FakeContainer("a", {LABEL_JOB: "job-1"}, [], 0)
    other = FakeContainer("b", {LABEL_JOB: "job-2"}, [], 0)
    client.containers.all += [mine, other]
    assert sweep(client, "job-1") == ["a"]
    assert mine.removed and not other.removed


# --- MPI over sshd on loopback ports --------------------------------------------------------------


def _fake_keygen(directory: Path) -> None:
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        (directory / name).write_text(f"PRIVATE {name}\n")
        (directory / f"{name}.pub").write_text(f"ssh-ed25519 AAAA {name}\n")


def test_ssh_material_gives_each_host_its_own_sshd_port(tmp_path: Path) -> None:
    directory = tmp_path / "ssh"
    addresses = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}
    ports = {"algo-1": 40001, "algo-2": 40002}
    write_ssh_material(directory, ports, keygen=_fake_keygen, addresses=addresses)
    config = (directory / "ssh_config").read_text()
    assert "Host algo-2\n    HostName 127.0.0.2\n    Port 40002\n" in config
    assert f"IdentityFile {CONTAINER_SSH_DIR}/id_ed25519" in config
    sshd = (directory / "sshd_config-algo-2").read_text()
    assert "Port 40002" in sshd and "ListenAddress 127.0.0.2" in sshd
    assert "ListenAddress 127.0.0.1" in (directory / "sshd_config-algo-1").read_text()
    assert f"AuthorizedKeysFile {CONTAINER_SSH_DIR}/authorized_keys" in sshd
    assert (directory / "authorized_keys").read_text() == "ssh-ed25519 AAAA id_ed25519\n"
    assert all((p.stat().st_mode & 0o077) == 0 for p in directory.iterdir())
    assert (directory.stat().st_mode & 0o077) == 0


def test_mpi_jobs_get_ssh_ports_and_sshd_config_per_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(container_ssh, "_ssh_keygen", _fake_keygen)
    spec = _spec(tmp_path, hyperparameters={})
    spec.HyperParameters[contract.HP_MPI_ENABLED] = "true"
    assert uses_mpi(spec)
    client = FakeClient()
    agent = _agent(tmp_path, client, spec)
    agent._prepare()
    agent._launch()
    for host in agent.hosts:
        host.proc.wait(10)
    created = [c for c in client.containers.created if c.get("name")]
    ports = json.loads(created[0]["environment"][contract.SMLAUNCH_SSH_PORTS])
    assert sorted(ports) == ["algo-1", "algo-2"] and len(set(ports.values())) == 2
    for kwargs, host in zip(created, ("algo-1", "algo-2"), strict=True):
        config = kwargs["environment"][contract.SMLAUNCH_SSHD_CONFIG]
        assert config == f"{CONTAINER_SSH_DIR}/sshd_config-{host}"
        assert kwargs["volumes"][str((agent.job.path / "ssh").resolve())]["bind"] == CONTAINER_SSH_DIR
    assert not uses_mpi(_spec(tmp_path / "plain"))


def test_smp_model_parallel_runs_no_mpirun_so_it_gets_no_ssh(tmp_path: Path) -> None:
    spec = _spec(tmp_path, hyperparameters={})
    spec.HyperParameters[contract.HP_MPI_ENABLED] = "true"
    spec.HyperParameters[contract.HP_MP_PARAMETERS] = '{"partitions": 2}'
    assert not uses_mpi(spec)
    spec.HyperParameters[contract.HP_MP_PARAMETERS] = '""'  # empty: MPI, as the runtime reads it
    assert uses_mpi(spec)


def test_the_runtime_is_told_where_the_sshd_config_and_the_client_config_are() -> None:
    env = ssh_environment("algo-2", {"algo-1": 2222, "algo-2": 2222}, "/etc/x", client_config=True)
    assert env == {
        contract.SMLAUNCH_SSHD_CONFIG: "/etc/x/sshd_config-algo-2",
        contract.SMLAUNCH_SSH_PORTS: '{"algo-1": 2222, "algo-2": 2222}',
        contract.SMLAUNCH_SSH_CONFIG: "/etc/x/ssh_config",
    }
    assert contract.SMLAUNCH_SSH_CONFIG not in ssh_environment("algo-1", {}, "/etc/x", client_config=False)


@pytest.mark.parametrize(
    ("wire", "expected"), [("true", True), ('"True"', True), ("1", True), ("false", False)]
)
def test_uses_mpi_reads_the_flag_as_the_host_runtime_does(tmp_path: Path, wire: str, expected: bool) -> None:
    """ssh is set up exactly when the runtime will run mpirun: the same reading of the wire flag."""
    spec = _spec(tmp_path, hyperparameters={})
    spec.HyperParameters[contract.HP_MPI_ENABLED] = wire
    assert uses_mpi(spec) is expected
    assert hp.truthy(hp.decode(spec.HyperParameters)[contract.HP_MPI_ENABLED]) is expected


def test_reaper_removes_the_containers_of_a_dead_agent(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job-9")
    job.path.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait(10)
    write_json_atomic(job.agent_file, {"pid": dead.pid, "create_time": 0.0})
    client = FakeClient()
    left = FakeContainer("job-9-algo-1", {LABEL_JOB: "job-9"}, [], None)
    client.containers.all.append(left)
    assert containers.reap(job, client, poll_seconds=0.01) == ["job-9-algo-1"]
    assert left.removed


def test_docker_is_chosen_explicitly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMLAUNCH_EXECUTOR", raising=False)
    assert not isinstance(LocalSession(root=tmp_path).backend().executor, DockerExecutor)
    monkeypatch.setenv("SMLAUNCH_EXECUTOR", "docker")
    backend = LocalSession(root=tmp_path, docker_client=FakeClient()).backend()
    assert isinstance(backend.executor, DockerExecutor) and backend.capabilities.name == "docker"
    assert LocalSession(root=tmp_path / "p", executor="process").backend().capabilities.name == "local"
    assert os.environ["SMLAUNCH_EXECUTOR"] == "docker"


# --- the image recipes (built and run for real in tests/integration) ------------------------------

CONTAINER = Path(__file__).resolve().parents[2] / "container"


@pytest.mark.parametrize("script", ["build_base.sh", "build.sh", "setup_image.sh", "entrypoint.sh"])
def test_container_scripts_parse(script: str) -> None:
    shell = "bash" if script.startswith("build") else "sh"
    result = subprocess.run(
        [shell, "-n", str(CONTAINER / script)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_dockerfiles_share_the_sagemaker_contract(kind: str) -> None:
    text = (CONTAINER / f"Dockerfile.{kind}").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE="), "the base image is a build argument"
    assert 'ENTRYPOINT ["tini", "--", "smlaunch-entrypoint"]' in lines
    assert 'CMD ["train"]' in lines
    assert "USER ${IMAGE_USER}" in lines and "ARG IMAGE_USER=smlaunch" in lines
    assert f'LABEL smlaunch.image="{kind}" smlaunch.base="${{BASE_IMAGE}}"' in lines
    assert lines[-2:] == ["COPY --from=install /staging/ /", "COPY --from=install /staging-app/ /"]
    if kind == "cuda":
        assert any("libnccl2=${NCCL_VERSION}" in line for line in lines)


# --- the local backend's policy, applied to containers --------------------------------------------


def test_max_run_sigterms_every_container_and_removes_them(tmp_path: Path) -> None:
    client = FakeClient()
    client.exit_code = None  # the containers run until signalled
    spec = _spec(tmp_path, max_run=1)
    agent = _agent(tmp_path, client, spec, stop_grace_seconds=5)
    agent.run()
    state = agent.job.read_state()
    assert state["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert state["SecondaryStatus"] == contract.SECONDARY_MAX_RUNTIME_EXCEEDED
    containers = client.containers.all
    assert len(containers) == 2
    assert all(c.signals[0] == signal.SIGTERM and c.removed for c in containers)


def test_stop_request_ends_the_job_stopped_with_containers_removed(tmp_path: Path) -> None:
    client = FakeClient()
    client.exit_code = None
    agent = _agent(tmp_path, client, _spec(tmp_path), stop_grace_seconds=5)

    def stop_once_running() -> None:
        while len(client.containers.all) < 2:
            threading.Event().wait(0.01)
        agent.job.stop_file.touch()

    stopper = threading.Thread(target=stop_once_running, daemon=True)
    stopper.start()
    agent.run()
    stopper.join(10)
    state = agent.job.read_state()
    assert state["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert len(client.containers.all) == 2
    assert all(c.signals[0] == signal.SIGTERM and c.removed for c in client.containers.all)
    assert sweep(client, "job-1") == []


def test_container_paths_outside_opt_ml_are_mounted_from_each_host_tree(tmp_path: Path) -> None:
    client = FakeClient()
    spec = _spec(tmp_path)
    spec.TensorBoardOutputConfig = TensorBoardOutputConfig(S3OutputPath="s3://out/tb", LocalPath="/logs/tb")
    spec.CheckpointConfig = CheckpointConfig(S3Uri=(tmp_path / "ckpt-store").as_uri(), LocalPath="/ckpt")
    _backend(tmp_path, client).check(job_request(spec))  # refused by the process executor, mounted here
    agent = _agent(tmp_path, client, spec)
    created = _launch_all(agent, client)
    for kwargs, host in zip(created, agent.hosts, strict=True):
        mount = kwargs["volumes"][str(host.paths.tensorboard_dir.resolve())]
        assert mount == {"bind": "/logs/tb", "mode": "rw"}
        config = json.loads(host.paths.tensorboard_config_file.read_text())
        assert config == {"LocalPath": "/logs/tb", "S3OutputPath": "s3://out/tb"}  # the container's path
        assert kwargs["volumes"][str(host.paths.checkpoints_dir.resolve())] == {"bind": "/ckpt", "mode": "rw"}
        assert json.loads(host.paths.checkpoint_config_file.read_text())["LocalPath"] == "/ckpt"


def test_container_paths_under_opt_ml_need_no_mount_of_their_own(tmp_path: Path) -> None:
    client = FakeClient()
    spec = _spec(tmp_path)
    spec.TensorBoardOutputConfig = TensorBoardOutputConfig(S3OutputPath="s3://out/tb")
    spec.CheckpointConfig = CheckpointConfig(S3Uri=(tmp_path / "store").as_uri(), LocalPath="/opt/ml/ck/1")
    agent = _agent(tmp_path, client, spec)
    agent._prepare()
    host = agent.hosts[0]
    assert agent.executor._container_dir_mounts(agent.context(), host.paths) == {}
    config = json.loads(host.paths.tensorboard_config_file.read_text())
    assert config["LocalPath"] == "/opt/ml/output/tensorboard"
    assert host.paths.tensorboard_dir.is_dir()
    assert json.loads(host.paths.checkpoint_config_file.read_text())["LocalPath"] == "/opt/ml/ck/1"
    assert (host.paths.base / "ck" / "1").is_dir()


def test_overlapping_checkpoint_and_tensorboard_paths_are_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    spec.TensorBoardOutputConfig = TensorBoardOutputConfig(S3OutputPath="s3://out/tb", LocalPath="/data/tb")
    spec.CheckpointConfig = CheckpointConfig(S3Uri="s3://out/ckpt", LocalPath="/data")
    with pytest.raises(ConfigurationError, match="overlaps the TensorBoard LocalPath '/data/tb'") as caught:
        _backend(tmp_path, FakeClient()).check(job_request(spec))
    assert caught.value.field == "checkpoint_local_path"
