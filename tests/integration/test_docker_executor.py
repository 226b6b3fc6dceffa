"""The Docker executor against a real Docker engine: images built here, jobs in real containers.

Marker ``docker``; every test is skipped, with the reason, when no engine answers (``.ci/run``
starts ``dockerd --storage-driver=overlay2 --iptables=false --bridge=none``, else vfs, when none
answers). No registry is needed: the session fixture builds (or reuses, from the cache) the
debootstrapped base image and our CPU image on top of it with ``container/build.sh``
(``SMLAUNCH_TEST_IMAGE`` names a prebuilt image instead). Containers use host networking and talk
over 127.0.0.1 only.

Covered: the image's contract (``train``, tini as PID 1, non-root default user, arbitrary uids);
the quickstart on 2 containers, with the same statuses and artifacts as the process executor
(parity, also for the smddp example and an MPI job across 2 containers); a crash in one container
ends the other; stop and max_run remove both; a container killed from outside fails the job naming it; a
non-root caller owns every file its containers write; a container's boto3 gets the caller's AWS
credentials while its definition (``docker inspect``) and the job's files hold none. Refused at
``fit()`` before any code is staged: an image missing locally, an image without ``train``, a
``file://`` channel that does not exist; a mount source gone by launch fails the job before any
container starts. After every test no container of the job exists and no process of the job remains.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.executors.docker.containers import LABEL_JOB, docker_client
from smlaunch.sdk.backends.emulated.executors.docker.executor import DockerExecutor
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.spec import CheckpointConfig
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests._images import cpu_test_image
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    wait_for_line,
    wait_terminal,
)

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT = 600

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3000)]


@pytest.fixture(scope="session")
def engine() -> Any:
    try:
        return docker_client()
    except ConfigurationError as exc:
        pytest.skip(f"no Docker engine answers: {exc}")


@pytest.fixture(scope="session")
def image(engine: Any) -> str:
    """Our CPU image (with scikit-learn for the examples), built or reused from the cache."""
    return cpu_test_image()


@pytest.fixture
def root(tmp_path: Path, engine: Any) -> Iterator[Path]:
    """A job root; afterwards no job under it has a container or a process left."""
    jobs = tmp_path / "jobs"
    yield jobs
    kill_leftover_jobs(jobs)
    names = [p.name for p in jobs.iterdir()] if jobs.exists() else []
    left = []
    deadline = time.monotonic() + 30  # the agent removes its containers as it ends
    for name in names:
        while True:
            found = engine.containers.list(all=True, filters={"label": f"{LABEL_JOB}={name}"})
            if not found or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for container in found:
            left.append(container.name)
            container.remove(force=True)
    assert not left, f"containers left behind: {left}"
    for name in names:
        assert_no_job_processes(name, jobs / name)


def _backend(root: Path, engine: Any, **kwargs: Any) -> LocalBackend:
    backend = LocalSession(root=root, executor="docker", docker_client=engine, **kwargs).backend()
    assert isinstance(backend, LocalBackend) and isinstance(backend.executor, DockerExecutor)
    return backend


RUN_ID = uuid.uuid4().hex[:6]
"""Job names carry it: containers of an earlier, interrupted test run can never collide."""


def _spec(tmp_path: Path, image: str, name: str, script: str, **kwargs: Any) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = make_spec(tmp_path, name, script, **kwargs)
    spec.AlgorithmSpecification.TrainingImage = image
    return spec


def _containers(engine: Any, job: str) -> list[Any]:
    return engine.containers.list(all=True, filters={"label": f"{LABEL_JOB}={job}"})


def _wait_containers_gone(engine: Any, job: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _containers(engine, job):
        assert time.monotonic() < deadline, [c.name for c in _containers(engine, job)]
        time.sleep(0.5)


def _members(uri: str) -> dict[str, bytes]:
    path = Path(uri.removeprefix("file://"))
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


# --- the image ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_image_runs_train_under_tini_as_a_non_root_user(engine: Any, image: str) -> None:
    config = engine.images.get(image).attrs["Config"]
    assert config["Cmd"] == ["train"]
    assert config["Entrypoint"][0] == "tini" and config["User"] == "smlaunch"
    out = engine.containers.run(
        image,
        ["sh", "-c", "ps -o comm= -p 1; id -un; command -v train sshd mpirun; echo HOME=$HOME"],
        user="4321:4321",
        group_add=["0"],
        network_mode="none",
        remove=True,
    ).decode()
    lines = out.split()
    assert lines[0] == "tini", out  # PID 1 forwards SIGTERM
    assert lines[1] == "u4321", out  # an arbitrary uid gets a passwd entry (ssh needs one)
    assert any(line.endswith("/train") for line in lines), out
    assert "HOME=/home/smlaunch" in out


CUDA_PROBE = (
    "import shutil, torch; from torch.cuda import nccl; "
    "print(torch.version.cuda, nccl.version(), torch.cuda.is_available(), shutil.which('train'), sep='|')"
)


def test_cuda_image_has_torch_cuda_nccl_and_train(engine: Any) -> None:
    """The CUDA image's contract, without a GPU: torch's CUDA build with NCCL, ``train`` under tini,
    a non-root user. Built by hand (about 5 GB; not in CI), e.g. ``container/build.sh cuda --base
    <debootstrapped base> --nccl-version none --wheels-here --torch-version 2.14.1``; named by
    ``SMLAUNCH_TEST_CUDA_IMAGE``."""
    image = os.environ.get("SMLAUNCH_TEST_CUDA_IMAGE")
    if not image:
        pytest.skip("SMLAUNCH_TEST_CUDA_IMAGE names no CUDA image (build one: container/README.md)")
    config = engine.images.get(image).attrs["Config"]
    assert config["Cmd"] == ["train"] and config["Entrypoint"][0] == "tini" and config["User"] == "smlaunch"
    assert "NVIDIA_VISIBLE_DEVICES=all" in config["Env"]
    out = engine.containers.run(image, ["python3", "-c", CUDA_PROBE], network_mode="none", remove=True)
    cuda, nccl_version, available, train = out.decode().strip().split("|")
    assert cuda != "None" and nccl_version.startswith("(2, ") and available == "False", out  # no GPU here
    assert train.endswith("/train"), out


# --- parity with the process executor -------------------------------------------------------------


def _fit(example: str, root: Path, executor: str, image: str, engine: Any, **kwargs: Any) -> Any:
    from smlaunch import PyTorch

    session = LocalSession(
        root=root / executor,
        executor=executor,  # type: ignore[arg-type]
        processes_per_host=2,
        docker_client=engine if executor == "docker" else None,
    )
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(REPO / "examples" / example),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
        image_uri=image if executor == "docker" else None,
        **kwargs,
    )
    estimator.fit(logs=False)
    return estimator


def _compare_runs(runs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Same status, same artifact members, same metrics (but timings) under both executors."""
    described = {ex: est.latest_training_job.describe() for ex, est in runs.items()}
    statuses = {ex: (d["TrainingJobStatus"], d["SecondaryStatus"]) for ex, d in described.items()}
    assert set(statuses.values()) == {(contract.STATUS_COMPLETED, contract.SECONDARY_COMPLETED)}, statuses
    models = {ex: _members(est.model_data) for ex, est in runs.items()}
    outputs = {
        ex: _members(est.model_data.replace("model.tar.gz", "output.tar.gz")) for ex, est in runs.items()
    }
    assert sorted(models["docker"]) == sorted(models["process"]) and models["docker"]
    assert sorted(outputs["docker"]) == sorted(outputs["process"])
    metrics = {ex: json.loads(out["metrics.json"]) for ex, out in outputs.items() if "metrics.json" in out}
    for values in metrics.values():
        values.pop("seconds", None)
    if metrics:
        assert metrics["docker"] == metrics["process"], metrics
    return {"models": models, "metrics": metrics}


def _same_weights(models: dict[str, dict[str, bytes]]) -> None:
    import torch

    docker_state = torch.load(io.BytesIO(models["docker"]["model.pt"]), weights_only=True)
    process_state = torch.load(io.BytesIO(models["process"]["model.pt"]), weights_only=True)
    assert docker_state.keys() == process_state.keys()
    for key, value in docker_state.items():
        assert torch.allclose(value, process_state[key], atol=1e-5), key


@pytest.mark.slow
def test_quickstart_on_two_containers_matches_the_process_executor(
    root: Path, engine: Any, image: str, capfd: pytest.CaptureFixture[str]
) -> None:
    args = {
        "instance_type": "ml.c5.xlarge",
        "distribution": {"torch_distributed": {"enabled": True}},
        "hyperparameters": {"epochs": 30, "batch-size": 32, "lr": 3e-3},
        "base_job_name": "quickstart",
    }
    runs = {ex: _fit("quickstart", root, ex, image, engine, **args) for ex in ("docker", "process")}
    compared = _compare_runs(runs)
    assert compared["metrics"]["docker"]["world_size"] == 4
    assert compared["metrics"]["docker"]["test_accuracy"] >= 0.95
    _same_weights(compared["models"])
    job = runs["docker"].latest_training_job.name
    log = (root / "docker" / job / "logs" / "job.log").read_text()
    for prefix in ("[algo-1/rank 0]", "[algo-1] ", "[algo-2] "):  # only rank 0 prints
        assert prefix in log, log[-3000:]
    assert "container(s) ['algo-1', 'algo-2'] from image" in log
    for path in (root / "docker" / job).rglob("*"):  # the caller owns every file: cleanup never fails
        assert path.lstat().st_uid == os.getuid(), path
    _wait_containers_gone(engine, job)


@pytest.mark.slow
def test_smddp_example_matches_the_process_executor(root: Path, engine: Any, image: str) -> None:
    args = {
        "instance_type": "ml.p3.16xlarge",
        "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}},
        "hyperparameters": {"epochs": 5, "batch-size": 64, "lr": 3e-3},
        "base_job_name": "smddp-digits",
    }
    runs = {ex: _fit("smddp", root, ex, image, engine, **args) for ex in ("docker", "process")}
    compared = _compare_runs(runs)
    _same_weights(compared["models"])


MPI_SCRIPT = """
import json, os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank}/{world} gethostname={socket.gethostname()} current_host={os.environ['SM_CURRENT_HOST']}"
      f" sum={total.item():g}", flush=True)
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as handle:
        json.dump({"sum": total.item(), "world": world}, handle)
dist.destroy_process_group()
"""


def _mpi_spec(tmp_path: Path, image: str, name: str) -> Any:
    spec = _spec(tmp_path, image, name, MPI_SCRIPT, instance_count=2)
    spec.HyperParameters[contract.HP_MPI_ENABLED] = "true"
    spec.HyperParameters[contract.HP_MPI_PROCESSES_PER_HOST] = "1"
    spec.HyperParameters[contract.HP_MPI_CUSTOM_OPTIONS] = '""'
    return spec


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="the process executor's half needs OpenMPI's mpirun on this machine (apt-get install openmpi-bin)",
)
def test_mpi_job_across_two_containers_matches_the_process_executor(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    results = {}
    for executor in ("docker", "process"):
        session = LocalSession(root=root / executor, executor=executor, docker_client=engine)  # type: ignore[arg-type]
        backend = session.backend()
        name = f"mpi-{executor}-{RUN_ID}"
        backend.submit(job_request(_mpi_spec(tmp_path / executor, image, name)))
        described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
        log = "\n".join(backend.log_lines(name))
        status = described["TrainingJobStatus"]
        assert status == contract.STATUS_COMPLETED, (described.get("FailureReason"), log[-3000:])
        model = _members(described["ModelArtifacts"]["S3ModelArtifacts"])
        results[executor] = (described["SecondaryStatus"], model)
        if executor == "docker":
            # mpirun placed one rank in each container; each sees its own host name (= current_host).
            assert "rank 0/2 gethostname=algo-1 current_host=algo-1 sum=3" in log, log[-3000:]
            assert "rank 1/2 gethostname=algo-2 current_host=algo-2 sum=3" in log, log[-3000:]
            _wait_containers_gone(engine, name)
    assert results["docker"] == results["process"]
    assert json.loads(results["docker"][1]["result.json"]) == {"sum": 3.0, "world": 2}


# --- faults ---------------------------------------------------------------------------------------

CRASH_SCRIPT = """
import os, sys, time
host = os.environ["SM_CURRENT_HOST"]
print(f"{host} started", flush=True)
if host == "algo-2":
    time.sleep(1)
    print("algo-2 crashes now", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(600)
"""


def test_a_crash_in_one_container_ends_the_other(tmp_path: Path, root: Path, engine: Any, image: str) -> None:
    backend = _backend(root, engine)
    name = f"crash-{RUN_ID}"
    backend.submit(job_request(_spec(tmp_path, image, name, CRASH_SCRIPT)))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_FAILED
    assert described["ExitCode"] == 3
    assert "algo-2" in described["FailureReason"] and "crashes now" in described["FailureReason"]
    _wait_containers_gone(engine, name)


CHECKPOINT_SCRIPT = """
import json, os, pathlib
config = json.loads(pathlib.Path("/opt/ml/input/config/checkpointconfig.json").read_text())
local = pathlib.Path(config["LocalPath"])
seed = (local / "seed.txt").read_text()
(local / f"{os.environ['SM_CURRENT_HOST']}.txt").write_text(f"{seed} + {local}")
"""


def test_a_checkpoint_path_outside_opt_ml_is_mounted_restored_and_synced(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    store = tmp_path / "checkpoint-store"
    store.mkdir()
    (store / "seed.txt").write_text("seed")
    backend = _backend(root, engine)
    name = f"ckpt-{RUN_ID}"
    spec = _spec(tmp_path, image, name, CHECKPOINT_SCRIPT)
    spec.CheckpointConfig = CheckpointConfig(S3Uri=store.as_uri(), LocalPath="/checkpoints/run")
    backend.submit(job_request(spec))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    assert sorted(p.name for p in store.iterdir()) == ["algo-1.txt", "algo-2.txt", "seed.txt"]
    assert (store / "algo-2.txt").read_text() == "seed + /checkpoints/run"
    _wait_containers_gone(engine, name)


STOP_SCRIPT = """
import os, signal, sys, time
def on_term(signum, frame):
    print("got SIGTERM, saving", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(f"{os.environ['SM_CURRENT_HOST']} ready", flush=True)
time.sleep(600)
"""


def test_stop_reaches_the_script_and_removes_both_containers(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    backend = _backend(root, engine, stop_grace_seconds=20)
    name = f"stopme-{RUN_ID}"
    backend.submit(job_request(_spec(tmp_path, image, name, STOP_SCRIPT)))
    wait_for_line(backend, name, "algo-1 ready", timeout=JOB_TIMEOUT)
    wait_for_line(backend, name, "algo-2 ready", timeout=JOB_TIMEOUT)
    assert {c.name for c in _containers(engine, name)} == {f"{name}-algo-1", f"{name}-algo-2"}
    assert engine.containers.get(f"{name}-algo-2").attrs["Config"]["Hostname"] == "algo-2"
    backend.stop(name)
    described = wait_terminal(backend, name, timeout=120)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED
    log = "\n".join(backend.log_lines(name))
    assert log.count("got SIGTERM, saving") == 2, log[-3000:]  # tini -> runtime -> rank, on both hosts
    _wait_containers_gone(engine, name)


def test_max_run_stops_both_containers_as_sagemaker_reports_it(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    backend = _backend(root, engine, stop_grace_seconds=20)
    name = f"maxrun-{RUN_ID}"
    backend.submit(job_request(_spec(tmp_path, image, name, STOP_SCRIPT, max_run=3)))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert described["SecondaryStatus"] == contract.SECONDARY_MAX_RUNTIME_EXCEEDED
    assert described["FailureReason"].startswith("MaxRuntimeExceeded:")
    _wait_containers_gone(engine, name)  # (SIGTERM reaching the script: the stop test above)


def test_a_container_killed_from_outside_fails_the_job_naming_it(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    backend = _backend(root, engine)
    name = f"killed-{RUN_ID}"
    backend.submit(job_request(_spec(tmp_path, image, name, STOP_SCRIPT)))
    wait_for_line(backend, name, "algo-2 ready", timeout=JOB_TIMEOUT)
    engine.containers.get(f"{name}-algo-2").kill()
    described = wait_terminal(backend, name, timeout=120)
    assert described["TrainingJobStatus"] == contract.STATUS_FAILED
    assert f"{name}-algo-2 was killed from outside smlaunch" in described["FailureReason"]
    assert described["ExitCode"] == 137
    _wait_containers_gone(engine, name)


def _refused_fit(
    root: Path, tmp_path: Path, engine: Any, image: str, inputs: Any = None
) -> ConfigurationError:
    """``fit()`` of a tiny job that the check refuses; nothing is staged, no job or container exists."""
    from smlaunch import PyTorch

    source = tmp_path / "src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "train.py").write_text("print('never runs')\n")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        instance_type="ml.c5.xlarge",
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=LocalSession(root=root, executor="docker", docker_client=engine),
        image_uri=image,
    )
    name = f"refused-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigurationError) as caught:
        estimator.fit(inputs, logs=False, job_name=name)
    assert not (root / name).exists()
    assert not list(tmp_path.rglob(contract.SOURCEDIR_TARBALL)), "code was staged before the check"
    assert not _containers(engine, name)
    return caught.value


def test_an_image_missing_locally_is_refused_at_fit_before_staging(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    error = _refused_fit(root, tmp_path, engine, "smlaunch-no-such-image:latest")
    assert error.field == "image_uri" and error.value == "smlaunch-no-such-image:latest"
    assert "never pulls" in str(error) and "container/build.sh" in str(error)
    with pytest.raises(Exception, match="No such image"):  # and nothing was pulled
        engine.images.get("smlaunch-no-such-image:latest")


def test_an_image_without_train_is_refused_at_fit_before_staging(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    base = engine.images.get(image).labels.get("smlaunch.base")
    assert base, "our image records its base (debootstrapped Debian, no `train`)"
    error = _refused_fit(root, tmp_path, engine, base)
    assert error.field == "image_uri" and error.value == base
    assert "no `train` command" in str(error) and error.fix
    # The probe is removed. ("ancestor" also matches containers of images built on the base, such as
    # our own image's: only the probe ran the base image itself.)
    base_id = engine.images.get(base).id
    probes = engine.containers.list(all=True, filters={"ancestor": base})
    assert not [c for c in probes if c.attrs["Image"] == base_id]


def test_a_file_channel_that_does_not_exist_is_refused_at_fit_before_staging(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    missing = tmp_path / "no-such-data"
    error = _refused_fit(root, tmp_path, engine, image, {"train": missing.as_uri()})
    assert error.field == "inputs['train']" and error.value == missing.as_uri()
    assert "no such file or directory" in str(error) and error.fix
    assert not missing.exists()


def _in_process_agent(root: Path, engine: Any, spec: Any, agent_class: Any = None, **settings: Any) -> Any:
    """The job's agent in this process (as the backend's would run it), with ``settings`` changed
    (the Docker executor's own fields among them: ``uid``, ``gid``)."""
    from smlaunch.sdk.backends.emulated.job_settings import DockerSettings, JobSettings
    from smlaunch.sdk.backends.emulated.state import write_json_atomic

    backend = _backend(root, engine)
    backend.check(job_request(spec))
    job = backend.job_dir(spec.TrainingJobName)
    job.logs_dir.mkdir(parents=True)
    job.job_log.touch()
    write_json_atomic(job.spec_file, spec.to_request())
    values = backend.settings(spec).model_dump(mode="json")
    for name, value in settings.items():
        (values["executor"] if name in DockerSettings.model_fields else values)[name] = value
    write_json_atomic(job.settings_file, JobSettings.model_validate(values).model_dump(mode="json"))
    job.write_state({"TrainingJobStatus": contract.STATUS_IN_PROGRESS, "SecondaryStatusTransitions": []})
    return (agent_class or Agent)(job, DockerExecutor(client=engine, stream_client=engine))


def _run_agent(agent: Any) -> dict[str, Any]:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        agent.run()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return agent.job.read_state()


def test_a_mount_source_gone_at_launch_fails_the_job_before_any_container(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    """Code is staged after the check, so its directory can vanish before launch: the job fails
    naming it, and the engine never gets to create it (as root) as a bind mount's source."""
    name = f"nomount-{RUN_ID}"
    spec = _spec(tmp_path, image, name, "print('never runs')\n")
    agent = _in_process_agent(root, engine, spec)
    source = tmp_path / "code" / name / "source"
    shutil.rmtree(source)
    state = _run_agent(agent)
    assert state["TrainingJobStatus"] == contract.STATUS_FAILED
    assert state["FailureReason"].startswith("ClientError: cannot start algo-1: mount source")
    assert str(source) in state["FailureReason"]
    assert not source.exists()
    assert not _containers(engine, name)


OWNER_SCRIPT = """
import os, socket
assert socket.gethostname() == os.environ["SM_CURRENT_HOST"], socket.gethostname()
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as handle:
    handle.write(f"uid {os.getuid()}")
nested = os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "a", "b")
os.makedirs(nested)
open(os.path.join(nested, "c.txt"), "w").close()
print(f"wrote as uid {os.getuid()} gid {os.getgid()}", flush=True)
"""
CALLER = 4321


def test_a_non_root_caller_owns_every_file_its_containers_write(
    tmp_path: Path, root: Path, engine: Any, image: str
) -> None:
    """Tests run as root here, where ownership proves nothing: play a caller with uid 4321, whose
    host tree is its own, and check every path the containers left in it is the caller's."""

    class NonRootCallerAgent(Agent):
        def _prepare(self) -> None:
            super()._prepare()  # what a caller with uid 4321 would have written itself
            for path in [self.job.hosts_dir, *self.job.hosts_dir.rglob("*")]:
                os.lchown(path, CALLER, CALLER)

    name = f"owner-{RUN_ID}"
    spec = _spec(tmp_path, image, name, OWNER_SCRIPT, instance_count=1)
    agent = _in_process_agent(root, engine, spec, NonRootCallerAgent, uid=CALLER, gid=CALLER)
    state = _run_agent(agent)
    log = agent.job.job_log.read_text()
    assert state["TrainingJobStatus"] == contract.STATUS_COMPLETED, (state.get("FailureReason"), log[-3000:])
    assert f"wrote as uid {CALLER} gid {CALLER}" in log
    paths = list(agent.job.hosts_dir.rglob("*"))
    assert any(p.name == "c.txt" for p in paths) and any(p.name == "success" for p in paths)
    foreign = [(str(p), p.lstat().st_uid) for p in paths if p.lstat().st_uid != CALLER]
    assert not foreign, f"not the caller's, so its cleanup would fail: {foreign}"
    assert _members(state["ModelArtifacts"]["S3ModelArtifacts"])["model.txt"] == f"uid {CALLER}".encode()
    assert not _containers(engine, name)


def test_a_container_gets_aws_credentials_that_its_definition_never_holds(
    tmp_path: Path, root: Path, engine: Any, image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's boto3 finds the caller's credentials (from the agent's loopback endpoint), yet
    ``docker inspect`` of the running container and every file of the job hold none of them."""
    planted = {
        "AWS_ACCESS_KEY_ID": "AKIAPLANTEDDOCKER042",
        "AWS_SECRET_ACCESS_KEY": "planted/docker/secret042",
        "AWS_SESSION_TOKEN": "planted-docker-token-042",
    }
    for variable, value in planted.items():
        monkeypatch.setenv(variable, value)
    script = """
import hashlib, os, pathlib, time
import boto3
frozen = boto3.Session().get_credentials().get_frozen_credentials()
digest = hashlib.sha256("|".join((frozen.access_key, frozen.secret_key, frozen.token)).encode()).hexdigest()
print("credentials digest", digest, flush=True)
go = pathlib.Path(os.environ["SM_MODEL_DIR"]) / "go"
deadline = time.time() + 120
while not go.exists() and time.time() < deadline:
    time.sleep(0.1)
"""
    name = f"creds-{RUN_ID}"
    backend = _backend(root, engine)
    backend.submit(job_request(_spec(tmp_path, image, name, script, instance_count=1)))
    wait_for_line(backend, name, "credentials digest", timeout=JOB_TIMEOUT)
    definitions = json.dumps([c.attrs for c in _containers(engine, name)])
    (root / name / "hosts" / "algo-1" / "model" / "go").touch()
    assert wait_terminal(backend, name, timeout=JOB_TIMEOUT)["TrainingJobStatus"] == contract.STATUS_COMPLETED
    expected = hashlib.sha256("|".join(planted.values()).encode()).hexdigest()
    assert any(f"credentials digest {expected}" in line for line in backend.log_lines(name))
    assert "AWS_CONTAINER_CREDENTIALS_FULL_URI" in definitions
    written = [p.read_bytes() for p in (root / name).rglob("*") if p.is_file() and not p.is_symlink()]
    for variable, value in planted.items():
        assert value not in definitions, f"{variable} in the container's definition"
        assert not any(value.encode() in data for data in written), f"{variable} in a file of the job"
