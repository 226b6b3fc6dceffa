"""``smlaunch serve``'s tracker with a recording backend: the queue behind ``max_concurrent_jobs``,
the reason a queued job shows, a stop in the queue, the instance-type mapping, and a restart that
finds the queue again (the real platform is in tests/functional/test_serve.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from smlaunch.sdk.backends.emulated.backend import JobNotFoundError
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.request.spec import JobRequest
from smlaunch.serve.training import TrainingService
from smlaunch.serve.wire import ServiceError


class RecordingBackend:
    """What the service uses of ``LocalBackend``, recording submits; jobs run until ``end``."""

    def __init__(self, root: Path) -> None:
        self.session = type("S", (), {"root": root})()
        self.submitted: list[str] = []
        self.status: dict[str, str] = {}

    def job_dir(self, name: str) -> JobDir:
        return JobDir(self.session.root / name)

    def check(self, request: JobRequest) -> None:
        if request.spec.ResourceConfig.InstanceCount > 4:
            from smlaunch.sdk.errors import ConfigurationError

            raise ConfigurationError(
                "instance_count", 5, "more hosts than this machine runs", "use 4 or fewer"
            )

    def submit(self, request: JobRequest) -> None:
        name = request.spec.TrainingJobName
        self.job_dir(name).path.mkdir(parents=True)
        self.job_dir(name).state_file.write_text("{}")
        self.submitted.append(name)
        self.status[name] = "InProgress"

    def describe(self, name: str) -> dict[str, Any]:
        if name not in self.status:
            raise JobNotFoundError(name)
        return {
            "TrainingJobName": name,
            "TrainingJobStatus": self.status[name],
            "CreationTime": datetime.now(timezone.utc),
        }

    def stop(self, name: str) -> None:
        self.status[name] = "Stopped"


def _request(name: str, instance_type: str = "ml.c5.xlarge", count: int = 1) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/R",
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": count, "VolumeSizeInGB": 1},
        "HyperParameters": {"sagemaker_submit_directory": '"s3://bucket/code.tar.gz"'},
        "Tags": [{"Key": "k", "Value": "v"}],
    }


def _service(root: Path, backend: RecordingBackend, **platforms: RecordingBackend) -> TrainingService:
    service = TrainingService(backend, max_concurrent_jobs=1, platforms=platforms)  # type: ignore[arg-type]
    return service


def test_the_queue_its_reason_a_stop_in_it_and_a_restart(tmp_path: Path) -> None:
    backend = RecordingBackend(tmp_path)
    service = _service(tmp_path, backend)
    service._recover()
    for name in ("first", "second", "third"):
        service.create_training_job(_request(name))
    service._tick()
    assert backend.submitted == ["first"]
    waiting = service.describe("third")
    assert (waiting["TrainingJobStatus"], waiting["SecondaryStatus"]) == ("InProgress", "Starting")
    assert waiting["SecondaryStatusTransitions"][0]["StatusMessage"] == (
        "Queued: the server runs at most 1 job(s) at a time (max_concurrent_jobs); 1 running, "
        "1 queued ahead of this one"
    )
    assert "Tags" not in waiting and waiting["ResourceConfig"]["InstanceType"] == "ml.c5.xlarge"
    service.stop_training_job({"TrainingJobName": "second"})
    stopped = service.describe("second")
    assert (stopped["TrainingJobStatus"], stopped["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert [t["Status"] for t in stopped["SecondaryStatusTransitions"]] == ["Starting", "Stopped"]
    with pytest.raises(ServiceError, match="in status Stopped"):
        service.stop_training_job({"TrainingJobName": "second"})

    restarted = _service(tmp_path, backend)  # the first one's process is gone: its records remain
    restarted._recover()
    assert restarted.describe("third")["SecondaryStatus"] == "Starting"
    backend.status["first"] = "Completed"
    restarted._tick()
    assert backend.submitted == ["first", "third"]
    listed = restarted.list_training_jobs({"SortBy": "Name"})["TrainingJobSummaries"]
    assert [(j["TrainingJobName"], j["TrainingJobStatus"]) for j in listed] == [
        ("first", "Completed"),
        ("second", "Stopped"),
        ("third", "InProgress"),
    ]


def test_a_job_runs_on_its_instance_types_platform(tmp_path: Path) -> None:
    default, docker = RecordingBackend(tmp_path), RecordingBackend(tmp_path)
    service = _service(tmp_path, default, **{"ml.p3.2xlarge": docker})
    service.max_concurrent_jobs = 2
    service.create_training_job(_request("gpu", "ml.p3.2xlarge"))
    service.create_training_job(_request("cpu"))
    service._tick()
    assert (docker.submitted, default.submitted) == (["gpu"], ["cpu"])


class OffStoreBackend(RecordingBackend):
    """A platform that keeps its jobs' records elsewhere (Kubernetes: on the cluster)."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent"))
        self.session = object()  # no job store
        self.stopped: list[str] = []

    def submit(self, request: JobRequest) -> None:
        self.submitted.append(request.spec.TrainingJobName)
        self.status[request.spec.TrainingJobName] = "InProgress"

    def stop(self, name: str) -> None:
        self.stopped.append(name)
        super().stop(name)


def test_a_job_off_the_store_is_described_listed_stopped_and_found_again_there(tmp_path: Path) -> None:
    store, cluster = RecordingBackend(tmp_path), OffStoreBackend()
    service = _service(tmp_path, store, **{"ml.p3.2xlarge": cluster})
    service.create_training_job(_request("on-k8s", "ml.p3.2xlarge"))
    service._tick()
    assert cluster.submitted == ["on-k8s"] and not (tmp_path / "on-k8s").exists()
    assert service.describe("on-k8s")["TrainingJobStatus"] == "InProgress"  # the cluster's answer
    listed = service.list_training_jobs({})["TrainingJobSummaries"]
    assert [(j["TrainingJobName"], j["TrainingJobStatus"]) for j in listed] == [("on-k8s", "InProgress")]
    service.stop_training_job({"TrainingJobName": "on-k8s"})
    assert cluster.stopped == ["on-k8s"] and service.describe("on-k8s")["TrainingJobStatus"] == "Stopped"

    # a server stopped between the submit and its record: the restarted one finds the job there
    service.create_training_job(_request("again", "ml.p3.2xlarge"))
    cluster.status["again"] = "InProgress"
    restarted = _service(tmp_path, store, **{"ml.p3.2xlarge": cluster})
    restarted._recover()
    restarted._tick()
    assert (
        cluster.submitted == ["on-k8s"] and restarted.describe("again")["TrainingJobStatus"] == "InProgress"
    )


def test_what_the_platform_refuses_is_refused_at_create(tmp_path: Path) -> None:
    service = _service(tmp_path, RecordingBackend(tmp_path))
    with pytest.raises(ServiceError) as caught:
        service.create_training_job(_request("big", count=5))
    assert caught.value.code == "ValidationException"
    assert "instance_count=5: more hosts than this machine runs" in caught.value.message
    with pytest.raises(ServiceError, match="Requested resource not found"):
        service.describe("big")
    service.create_training_job(_request("ok"))
    with pytest.raises(ServiceError) as taken:
        service.create_training_job(_request("ok"))
    assert taken.value.code == "ResourceInUse"


def test_one_server_per_store(tmp_path: Path) -> None:
    from smlaunch.sdk.errors import ConfigurationError
    from smlaunch.serve.records import Records

    Records(tmp_path).lock()
    with pytest.raises(ConfigurationError, match="another smlaunch serve is running on this job store"):
        Records(tmp_path).lock()
