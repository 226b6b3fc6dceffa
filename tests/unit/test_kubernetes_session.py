"""KubernetesSession's arguments and the backend's checks against a cluster (a fake CoreV1Api with
the official client's models: no cluster needed; tests/kubernetes runs a real one)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from smlaunch import KubernetesSession
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.kubernetes.backend import KubernetesBackend
from smlaunch.sdk.backends.kubernetes.client import KubernetesApiError, api_error
from smlaunch.sdk.backends.kubernetes.options import PvcStorage, S3Storage, Toleration
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "dev", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "admin", "user": {"token": "not-a-secret"}}],
    "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "admin"}}],
    "current-context": "dev",
}


def spec(
    instance_type: str = "ml.c5.xlarge", count: int = 2, output: str = "s3://bucket/out"
) -> TrainingJobSpec:
    return TrainingJobSpec(
        TrainingJobName="k8s-job",
        AlgorithmSpecification={"TrainingImage": "", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": output},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": count},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )


def node(
    name: str = "node-1",
    cpu: str = "8",
    memory: str = "32Gi",
    labels: dict[str, str] | None = None,
    taints: list[client.V1Taint] | None = None,
    **extended: str,
) -> client.V1Node:
    allocatable = {"cpu": cpu, "memory": memory, **{k.replace("_", "/"): v for k, v in extended.items()}}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1NodeSpec(taints=taints),
        status=client.V1NodeStatus(allocatable=allocatable),
    )


class FakeCore:
    """The CoreV1Api calls the backend's check makes."""

    def __init__(self, nodes: list[client.V1Node], namespaces: tuple[str, ...] = ("default",)) -> None:
        self.nodes = nodes
        self.namespaces = namespaces
        self.forbidden = False

    def read_namespace(self, name: str) -> client.V1Namespace:
        if self.forbidden:
            raise ApiException(status=403, reason="Forbidden")
        if name not in self.namespaces:
            raise ApiException(status=404, reason="Not Found")
        return client.V1Namespace(metadata=client.V1ObjectMeta(name=name))

    def list_node(self) -> client.V1NodeList:
        if self.forbidden:
            raise ApiException(status=403, reason="Forbidden")
        return client.V1NodeList(items=self.nodes)


def backend(core: FakeCore, **session: Any) -> KubernetesBackend:
    return KubernetesBackend(KubernetesSession(api_client=object(), **session), core_api=core)


# --- the session's arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"namespace": "ML_Jobs"}, "namespace"),
        ({"namespace": 3}, "namespace"),
        ({"image": "my image"}, "image"),
        ({"image_pull_policy": "Sometimes"}, "image_pull_policy"),
        ({"service_account": "Trainer!"}, "service_account"),
        ({"node_selector": ["gpu"]}, "node_selector"),
        ({"node_selector": {"gpu": "yes please"}}, "node_selector['gpu']"),
        ({"tolerations": {"key": "gpu"}}, "tolerations"),
        ({"tolerations": [{"key": "gpu", "operator": "In"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"key": "gpu", "effect": "NoRun"}]}, "tolerations[0].effect"),
        ({"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]}, "tolerations[0].value"),
        ({"tolerations": [{"key": "gpu", "colour": "red"}]}, "tolerations[0]"),
        ({"image_pull_secrets": "regcred"}, "image_pull_secrets"),
        ({"resources": "auto"}, "resources"),
        ({"resources": {}}, "resources"),
        ({"resources": {"cpu": "four"}}, "resources['cpu']"),
        ({"resources": {"bad name!": "1"}}, "resources"),
        ({"storage": "gcs"}, "storage"),
        ({"storage": {"s3": {"endpoint_url": "minio:9000"}}}, "storage.s3.endpoint_url"),
        ({"storage": {"s3": {"region": "x"}}}, "storage"),
        ({"storage": {"pvc": "Data_Claim"}}, "storage.pvc"),
        ({"storage": {"pvc": "data", "mount_path": "/opt/ml"}}, "storage.mount_path"),
        ({"storage": {"pvc": "data", "mount_path": "relative"}}, "storage.mount_path"),
        ({"host_network": "yes"}, "host_network"),
        ({"default_bucket": "bucket/prefix"}, "default_bucket"),
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig"),
    ],
)
def test_bad_arguments_name_the_field_and_the_fix(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        KubernetesSession(api_client=object(), **kwargs)
    assert raised.value.field == field, raised.value
    assert "Fix:" in str(raised.value)


def test_good_arguments_are_kept_as_plain_values() -> None:
    session = KubernetesSession(
        namespace="ml-jobs",
        image="registry.example.com/smlaunch-cpu:1",
        node_selector={"nvidia.com/gpu.present": "true"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        image_pull_secrets=["regcred"],
        resources={"cpu": 4, "memory": "16Gi"},
        storage={"s3": {"endpoint_url": "http://127.0.0.1:9000", "credentials_secret": "aws"}},
        api_client=object(),
    )
    assert session.tolerations == (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    assert session.resources == {"cpu": "4", "memory": "16Gi"}
    assert session.storage == S3Storage(endpoint_url="http://127.0.0.1:9000", credentials_secret="aws")
    assert session.image_pull_secrets == ("regcred",)
    assert KubernetesSession(api_client=object()).resources == "catalog"
    pvc = KubernetesSession(storage={"pvc": "data"}, api_client=object())
    assert pvc.storage == PvcStorage(claim_name="data")
    assert pvc.default_output_path() == "file:///mnt/smlaunch/jobs/"


def test_default_output_needs_a_bucket_with_s3_storage() -> None:
    with pytest.raises(ConfigurationError, match="output_path=None") as raised:
        KubernetesSession(api_client=object()).default_output_path()
    assert "default_bucket" in str(raised.value)
    assert KubernetesSession(api_client=object(), default_bucket="b").default_output_path() == "s3://b/"


def test_a_local_input_cannot_reach_the_pods_with_s3_storage(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"inputs\['train'\]"):
        KubernetesSession(api_client=object()).stage_local_input(tmp_path, "job", "train")


def test_context_must_be_one_of_the_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(KUBECONFIG))
    assert KubernetesSession(kubeconfig=str(path), context="dev").context == "dev"
    with pytest.raises(ConfigurationError, match=r"context='prod'.*one of \['dev'\]"):
        KubernetesSession(kubeconfig=str(path), context="prod")


def test_the_api_client_comes_from_the_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(KUBECONFIG))
    api = KubernetesSession(kubeconfig=str(path)).api_client()
    assert api.configuration.host == "https://127.0.0.1:6443"


def test_api_errors_name_the_argument_behind_the_field() -> None:
    body = {
        "kind": "Status",
        "message": 'Pod "j-algo-1" is invalid: spec.nodeSelector: Invalid value: "a b"',
        "reason": "Invalid",
        "details": {"causes": [{"reason": "FieldValueInvalid", "field": "spec.nodeSelector"}]},
    }
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = json.dumps(body)
    error = api_error(exc, "create pod j-algo-1")
    assert isinstance(error, KubernetesApiError)
    assert (error.field, error.api_field) == ("node_selector", "spec.nodeSelector")
    assert "spec.nodeSelector: Invalid value" in str(error) and "Fix: fix node_selector" in str(error)
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = json.dumps({"message": 'pods is forbidden: User "x" cannot create resource "pods"'})
    assert api_error(forbidden, "create pod").field == "namespace"


# --- the backend's checks ---------------------------------------------------------------------


def test_a_job_that_fits_a_node_passes() -> None:
    backend(FakeCore([node()])).check(JobRequest(spec(), Strategy.TORCH_DISTRIBUTED))


def test_capabilities_take_mpi_and_model_parallel_and_refuse_file_uris() -> None:
    checked = backend(FakeCore([node()]))
    checked.check(JobRequest(spec(), Strategy.MPI))  # mpirun over ssh between the host pods
    checked.check(JobRequest(spec(), Strategy.MODELPARALLEL))
    with pytest.raises(UnsupportedByBackendError, match="output_path='file:///tmp/out'"):
        checked.check(JobRequest(spec(output="file:///tmp/out"), Strategy.NONE))


def test_spot_and_checkpoints_pass_with_a_checkpoint_path_under_opt_ml_only() -> None:
    checked = backend(FakeCore([node()]))
    spot = spec().model_dump() | {
        "EnableManagedSpotTraining": True,
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/opt/ml/checkpoints/run"},
    }
    checked.check(JobRequest(TrainingJobSpec.model_validate(spot), Strategy.NONE))
    outside = spot | {"CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/ckpt"}}
    with pytest.raises(UnsupportedByBackendError, match=r"checkpoint_local_path='/ckpt'.*under /opt/ml"):
        checked.check(JobRequest(TrainingJobSpec.model_validate(outside), Strategy.NONE))


def test_pvc_storage_takes_file_uris_under_its_mount_path_only() -> None:
    checked = backend(FakeCore([node()]), storage={"pvc": "data", "mount_path": "/data"})
    checked.check(JobRequest(spec(output="file:///data/out"), Strategy.NONE))
    with pytest.raises(UnsupportedByBackendError, match="put it under file:///data/"):
        checked.check(JobRequest(spec(output="file:///elsewhere/out"), Strategy.NONE))
    with pytest.raises(UnsupportedByBackendError, match="s3://"):
        checked.check(JobRequest(spec(output="s3://bucket/out"), Strategy.NONE))


def test_pods_run_as_the_caller_on_a_pvc_and_as_the_image_user_with_s3() -> None:
    """A claim is a file system the notebook and the pods both write (code and data, artifacts
    beside them): the pods take this process's uid and gid, as the Docker executor's containers do."""
    on_claim = backend(FakeCore([node()]), storage={"pvc": "data", "mount_path": "/data"})
    assert on_claim.cluster_options(spec(output="file:///data/out")).run_as == (os.getuid(), os.getgid())
    assert backend(FakeCore([node()])).cluster_options(spec()).run_as is None


def test_an_instance_type_no_node_can_hold_is_refused_before_anything_is_created() -> None:
    with pytest.raises(UnsupportedByBackendError) as raised:
        backend(FakeCore([node()])).check(JobRequest(spec("ml.p3.16xlarge"), Strategy.NONE))
    assert raised.value.field == "instance_type"
    assert "cpu=64" in str(raised.value) and "the most is 8" in str(raised.value)
    gpus = node(cpu="96", memory="1000Gi", nvidia_com_gpu="4")
    with pytest.raises(UnsupportedByBackendError, match=r"nvidia\.com/gpu=8"):
        backend(FakeCore([gpus])).check(JobRequest(spec("ml.p3.16xlarge"), Strategy.NONE))
    # resources='off' asks for nothing; explicit resources are checked the same way.
    backend(FakeCore([node()]), resources="off").check(JobRequest(spec("ml.p3.16xlarge"), Strategy.NONE))
    with pytest.raises(UnsupportedByBackendError, match="resources="):
        backend(FakeCore([node()]), resources={"memory": "64Gi"}).check(JobRequest(spec(), Strategy.NONE))


def test_a_type_the_catalog_cannot_size_needs_explicit_resources() -> None:
    with pytest.raises(ConfigurationError, match="resources='off'"):
        backend(FakeCore([node()])).check(JobRequest(spec("ml.zz9.xlarge"), Strategy.NONE))


def test_node_selector_and_taints_decide_which_nodes_count() -> None:
    tainted = node(taints=[client.V1Taint(key="nvidia.com/gpu", effect="NoSchedule", value="true")])
    with pytest.raises(UnsupportedByBackendError) as raised:
        backend(FakeCore([tainted])).check(JobRequest(spec(), Strategy.NONE))
    assert raised.value.field == "node_selector" and "taints" in str(raised.value)
    tolerated = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    backend(FakeCore([tainted]), tolerations=tolerated).check(JobRequest(spec(), Strategy.NONE))
    with pytest.raises(UnsupportedByBackendError, match="node_selector="):
        backend(FakeCore([node()]), node_selector={"pool": "gpu"}).check(JobRequest(spec(), Strategy.NONE))
    labelled = node(labels={"pool": "gpu"})
    backend(FakeCore([labelled]), node_selector={"pool": "gpu"}).check(JobRequest(spec(), Strategy.NONE))


def test_host_network_needs_one_node() -> None:
    two = FakeCore([node("a"), node("b")])
    with pytest.raises(UnsupportedByBackendError, match="host_network=True"):
        backend(two, host_network=True).check(JobRequest(spec(), Strategy.NONE))
    backend(two, host_network=True).check(JobRequest(spec(count=1), Strategy.NONE))


def test_namespace_must_exist_and_forbidden_reads_are_skipped() -> None:
    with pytest.raises(ConfigurationError, match=r"namespace='ml'.*kubectl create namespace ml"):
        backend(FakeCore([node()]), namespace="ml").check(JobRequest(spec(), Strategy.NONE))
    core = FakeCore([])
    core.forbidden = True  # a user who may not read namespaces or nodes: the scheduler decides
    backend(core, namespace="ml").check(JobRequest(spec("ml.p3.16xlarge"), Strategy.NONE))


def test_a_job_reference_names_the_namespace() -> None:
    from smlaunch.sdk.jobs import jobref

    ref = jobref.parse("kubernetes:ml-jobs:my-job")
    assert (ref.scheme, ref.store, ref.name) == ("kubernetes", "ml-jobs", "my-job")
    with pytest.raises(ConfigurationError, match="needs the job's namespace"):
        jobref.parse("kubernetes:my-job")
    session = KubernetesSession(namespace="ml-jobs", api_client=object())
    assert jobref.resolve("kubernetes:ml-jobs:my-job", session) == (session, "my-job")
    with pytest.raises(ConfigurationError, match="names a job of kubernetes:other"):
        jobref.resolve("kubernetes:other:my-job", session)


def test_a_pending_agent_pod_shows_starting_with_the_schedulers_reason() -> None:
    """The agent pod cannot record that it waits; host pods are the agent's to record
    (``tests/unit/test_agent_placement.py``): describe shows the recorded state as it is."""
    from smlaunch.sdk.backends.kubernetes.jobs import description

    state = {
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "SecondaryStatusTransitions": [{"Status": "Training", "StartTime": 1.0, "StatusMessage": "x"}],
        "CreationTime": 1.0,
    }
    root = client.V1ConfigMap(data={"spec.json": spec().model_dump_json(), "state.json": json.dumps(state)})
    running = client.V1Pod(status=client.V1PodStatus(phase="Running"))
    reason = "0/1 nodes are available: 1 Insufficient cpu."
    pending = client.V1Pod(
        status=client.V1PodStatus(
            phase="Pending",
            conditions=[client.V1PodCondition(type="PodScheduled", status="False", message=reason)],
        ),
    )
    shown = description(root, pending, agent_checked=True)
    assert shown["SecondaryStatus"] == "Starting"
    assert shown["SecondaryStatusTransitions"][-1]["StatusMessage"] == f"Pending: {reason}"
    assert description(root, running, agent_checked=True)["SecondaryStatus"] == "Training"
    lost = description(root, None, agent_checked=True)
    assert lost["TrainingJobStatus"] == "Failed" and "agent pod was deleted" in lost["FailureReason"]


def test_following_goes_on_in_the_kept_log_after_the_last_lines_read() -> None:
    from smlaunch.sdk.backends.kubernetes.jobs import resume_index

    kept = ["a", "b", "c", "d", "e"]
    assert resume_index(kept, [], 0) == 0
    assert resume_index(kept, ["b", "c"], 3) == 3
    assert resume_index(kept, ["b", "c"], 5) == 3  # two extra lines in the pod's log (a warning)
    assert resume_index(["c", "d", "e"], ["b", "c"], 3) == 3  # not kept: the tail starts later
    assert resume_index(["x", "y", "x", "y", "z"], ["x", "y"], 2) == 2  # where expected first
