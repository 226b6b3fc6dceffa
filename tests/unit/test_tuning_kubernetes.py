"""Tuning jobs on a ``KubernetesSession``, without a cluster: where the session keeps its tuning
jobs (``tuning_root``), the session recorded in ``trial.json`` and reopened by the detached agent
as the same cluster platform, the tuner's plan and its refusals before anything starts, and a
trial's ``TuningJobArn``. ``tests/kubernetes/test_kubernetes_tuning.py`` runs one on the dev
cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from smlaunch import ConfigurationError, ContinuousParameter, HyperparameterTuner, KubernetesSession, PyTorch
from smlaunch.sdk.backends.emulated.state import write_json_atomic
from smlaunch.sdk.backends.kubernetes.backend import KubernetesBackend
from smlaunch.sdk.backends.kubernetes.options import PvcStorage, S3Storage, Toleration
from smlaunch.sdk.tuning import local, platform
from tests.unit.test_kubernetes_session import KUBECONFIG, FakeCore, node

METRICS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$SMLAUNCH_HOME`` in the test's directory; no kubeconfig and no pod around."""
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path / "home"


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of two contexts whose current one has characters a directory name must not."""
    config = dict(KUBECONFIG, contexts=[*KUBECONFIG["contexts"]])  # type: ignore[list-item]
    config["contexts"].append({"name": "admin@eks/prod", "context": {"cluster": "dev", "user": "admin"}})
    config["current-context"] = "admin@eks/prod"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _through_json(recorded: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(recorded)))  # as the agent reads trial.json


def test_the_tuning_root_is_per_context_and_namespace_under_the_root_setting(
    home: Path, kubeconfig: Path
) -> None:
    session = KubernetesSession(namespace="ml", kubeconfig=str(kubeconfig))
    assert session.tuning_root == home / "jobs" / ".kubernetes" / "admin%40eks%2Fprod" / "ml"
    named = KubernetesSession(namespace="ml", kubeconfig=str(kubeconfig), context="dev")
    assert named.tuning_root == home / "jobs" / ".kubernetes" / "dev" / "ml"
    assert platform.store_root(named) == named.tuning_root
    given = KubernetesSession(tuning_root=home / "elsewhere", api_client=object())
    assert given.tuning_root == home / "elsewhere"


def test_a_tuning_root_needs_a_cluster_to_name_or_is_given(home: Path) -> None:
    session = KubernetesSession(api_client=object())  # injected client, no kubeconfig, not in a pod
    with pytest.raises(ConfigurationError) as raised:
        print(session.tuning_root)
    assert raised.value.field == "kubeconfig" and "not inside a pod" in str(raised.value)
    with pytest.raises(ConfigurationError, match="tuning_root=3"):
        KubernetesSession(tuning_root=3, api_client=object())  # type: ignore[arg-type]


def test_a_kubernetes_session_is_reopened_with_its_arguments(home: Path, kubeconfig: Path) -> None:
    session = KubernetesSession(
        namespace="ml",
        image="registry.example.com/smlaunch-cpu:1.0",
        image_pull_policy="Never",
        kubeconfig=str(kubeconfig),
        service_account="trainer",
        node_selector={"nvidia.com/gpu.present": "true"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
        image_pull_secrets=["regcred"],
        resources={"cpu": "2", "memory": "4Gi"},
        storage={"s3": {"endpoint_url": "http://127.0.0.1:9000", "credentials_secret": "aws"}},
        host_network=True,
        default_bucket="bucket",
        processes_per_host=3,
        stop_grace_seconds=7,
        instance_count_quota=4,
        s3_client=object(),
    )
    recorded = _through_json(platform.record(session))
    assert recorded["kind"] == platform.KUBERNETES
    assert recorded["kubernetes"]["context"] == "admin@eks/prod"  # the one in use when fit() ran
    backend = platform.open_platform({"platform": recorded})
    assert isinstance(backend, KubernetesBackend)
    reopened = backend.session
    assert isinstance(reopened, KubernetesSession)
    for name in (
        "namespace",
        "image",
        "image_pull_policy",
        "kubeconfig",
        "service_account",
        "node_selector",
        "image_pull_secrets",
        "resources",
        "host_network",
        "default_bucket",
        "processes_per_host",
        "stop_grace_seconds",
        "instance_count_quota",
        "tuning_root",
    ):
        assert getattr(reopened, name) == getattr(session, name), name
    assert reopened.context == "admin@eks/prod"
    assert reopened.tolerations == (
        Toleration(key="gpu", operator="Exists", effect="NoSchedule", toleration_seconds=30),
    )
    assert reopened.storage == S3Storage(endpoint_url="http://127.0.0.1:9000", credentials_secret="aws")


def test_a_claim_and_the_default_kubeconfig_are_recorded_as_used(
    home: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    session = KubernetesSession(storage={"pvc": "data", "mount_path": "/mnt/data"}, resources="off")
    recorded = _through_json(platform.record(session))["kubernetes"]
    assert (recorded["kubeconfig"], recorded["context"]) == (str(kubeconfig.resolve()), "admin@eks/prod")
    monkeypatch.delenv("KUBECONFIG")  # the agent does not depend on the variable any more
    reopened = platform.open_platform({"platform": {"kind": "kubernetes", "kubernetes": recorded}})
    session_again = reopened.session  # type: ignore[attr-defined]
    assert session_again.storage == PvcStorage(claim_name="data", mount_path="/mnt/data")
    assert session_again.resources == "off" and session_again.tuning_root == session.tuning_root


def test_kubernetes_sessions_keep_tuning_jobs_in_a_store() -> None:
    assert platform.runs_in_store(KubernetesSession(api_client=object()))


def _estimator(src: Path, session: KubernetesSession) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role="arn:aws:iam::000000000000:role/test",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        output_path="s3://bucket/out",
        sagemaker_session=session,
    )


def test_the_tuner_plans_on_kubernetes_and_refuses_a_missing_namespace_before_anything_starts(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('loss=0.1')\n")
    session = KubernetesSession(namespace="ml", api_client=object(), tuning_root=tmp_path / "tuning")
    session._backend = KubernetesBackend(session, core_api=FakeCore([node()], namespaces=("default",)))
    ranges = {"lr": ContinuousParameter(0.01, 0.1)}
    tuner = HyperparameterTuner(_estimator(tmp_path, session), "loss", ranges, METRICS, max_jobs=2)
    planned = tuner.plan(job_name="on-k8s").to_request()
    assert planned["HyperParameterTuningJobName"] == "on-k8s"
    assert planned["TrainingJobDefinition"]["OutputDataConfig"]["S3OutputPath"] == "s3://bucket/out"
    with pytest.raises(ConfigurationError) as raised:
        tuner.fit(job_name="on-k8s")  # checked against the cluster before the code is staged
    assert raised.value.field == "namespace" and raised.value.value == "ml"
    assert not any((tmp_path / "tuning").glob(f"{local.TUNING_DIR}/*"))
    assert tuner.latest_tuning_job is None


def test_planning_reads_no_kubeconfig(home: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('loss=0.1')\n")
    session = KubernetesSession(api_client=object())  # where its tuning jobs are kept is unknown
    ranges = {"lr": ContinuousParameter(0.01, 0.1)}
    tuner = HyperparameterTuner(_estimator(tmp_path, session), "loss", ranges, METRICS)
    assert tuner.plan(job_name="planned").HyperParameterTuningJobName == "planned"


def test_a_trial_names_its_tuning_job(home: Path, tmp_path: Path) -> None:
    session = KubernetesSession(api_client=object(), tuning_root=tmp_path / "tuning")
    job = local.tuning_dir(session.tuning_root, "tj")
    job.path.mkdir(parents=True)
    trial = "tj-001-0123abcd"
    write_json_atomic(job.state_file, {local.SUMMARIES: [{"TrainingJobName": trial}]})
    backend = session.backend()
    assert isinstance(backend, KubernetesBackend)
    assert backend.tuning_job_of(trial) == "tj"
    assert backend.tuning_job_of("tj-002-0123abcd") is None  # named like one, not listed
    assert backend.tuning_job_of("my-job") is None
    nowhere = KubernetesSession(api_client=object()).backend()  # no kubeconfig: no tuning jobs
    assert isinstance(nowhere, KubernetesBackend) and nowhere.tuning_job_of(trial) is None
