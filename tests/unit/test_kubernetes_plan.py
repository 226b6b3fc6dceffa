"""The pure plan of a Kubernetes job: every object, its labels, its owner, and what each pod runs."""

from __future__ import annotations

from typing import Any

from smlaunch.sdk.backends.kubernetes.options import PvcStorage, S3Storage, Toleration
from smlaunch.sdk.backends.kubernetes.plan import (
    JOB_LABEL,
    ClusterOptions,
    host_pods,
    object_name,
    plan_job,
)
from smlaunch.sdk.request.spec import TrainingJobSpec


def spec(name: str = "k8s-job", count: int = 2) -> TrainingJobSpec:
    return TrainingJobSpec(
        TrainingJobName=name,
        AlgorithmSpecification={"TrainingImage": "", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": "s3://bucket/out"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": count},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )


OPTIONS = ClusterOptions(namespace="ml", image="smlaunch-cpu:1", resources={"cpu": "4", "memory": "8Gi"})


def everything(options: ClusterOptions = OPTIONS) -> list[dict[str, Any]]:
    objects = plan_job(spec(), options, root_uid="uid-1")
    return [*objects.creation_order(), *host_pods(spec(), options, root_uid="uid-1")]


def test_every_object_is_labelled_and_owned_by_the_root() -> None:
    objects = everything()
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("ConfigMap", "k8s-job"),
        ("ServiceAccount", "k8s-job-agent"),
        ("Role", "k8s-job-agent"),
        ("RoleBinding", "k8s-job-agent"),
        ("Secret", "k8s-job-tree"),
        ("Service", "k8s-job"),
        ("Pod", "k8s-job-agent"),
        ("Pod", "k8s-job-algo-1"),
        ("Pod", "k8s-job-algo-2"),
    ]
    for item in objects:
        assert item["metadata"]["labels"][JOB_LABEL] == "k8s-job", item["metadata"]
        assert item["metadata"]["annotations"]["smlaunch.io/job-name"] == "k8s-job"
    root, *owned = objects
    assert "ownerReferences" not in root["metadata"]
    for item in owned:
        (owner,) = item["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("ConfigMap", "k8s-job", "uid-1")
    assert '"TrainingJobName": "k8s-job"' in root["data"]["spec.json"]


def test_hosts_are_algo_n_under_the_headless_service() -> None:
    objects = everything()
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {JOB_LABEL: "k8s-job", "smlaunch.io/role": "host"}
    hosts = [
        o for o in objects if o["kind"] == "Pod" and o["metadata"]["labels"]["smlaunch.io/role"] == "host"
    ]
    for index, pod in enumerate(hosts, start=1):
        spec_ = pod["spec"]
        assert (spec_["hostname"], spec_["subdomain"]) == (f"algo-{index}", "k8s-job")
        assert spec_["restartPolicy"] == "Never" and spec_["automountServiceAccountToken"] is False
        (container,) = spec_["containers"]
        assert container["command"] == ["python3", "-m", "smlaunch.sdk.backends.kubernetes.host"]
        assert container["image"] == "smlaunch-cpu:1"
        assert container["resources"] == {
            "requests": {"cpu": "4", "memory": "8Gi"},
            "limits": {"cpu": "4", "memory": "8Gi"},
        }
        assert {"name": "opt-ml", "mountPath": "/opt/ml"} in container["volumeMounts"]
        assert "hostNetwork" not in spec_ and "hostAliases" not in spec_


def test_the_agent_role_names_only_the_jobs_objects() -> None:
    role = next(o for o in everything() if o["kind"] == "Role")
    named = [rule for rule in role["rules"] if "resourceNames" in rule]
    unnamed = [rule for rule in role["rules"] if "resourceNames" not in rule]
    # RBAC cannot limit create/list/watch by name; nothing else is unnamed, and nothing deletes by kind.
    assert {verb for rule in unnamed for verb in rule["verbs"]} == {"create", "list", "watch"}
    names = {name for rule in named for name in rule["resourceNames"]}
    assert names == {"k8s-job", "k8s-job-agent", "k8s-job-algo-1", "k8s-job-algo-2"}
    binding = next(o for o in everything() if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "k8s-job-agent", "namespace": "ml"}]


def test_the_agent_knows_its_namespace_and_address_from_the_downward_api() -> None:
    agent = plan_job(spec(), OPTIONS, root_uid="u").agent
    env = {e["name"]: e for e in agent["spec"]["containers"][0]["env"]}
    assert env["SMLAUNCH_K8S_JOB"]["value"] == "k8s-job"
    assert env["SMLAUNCH_K8S_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["SMLAUNCH_K8S_AGENT_ADDRESS"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    hosts = host_pods(spec(), OPTIONS, root_uid="u")
    assert hosts[0]["spec"]["dnsConfig"] == {"searches": ["k8s-job.ml.svc.cluster.local"]}


def test_the_tree_token_is_in_the_jobs_secret_and_in_no_pod_spec() -> None:
    objects = plan_job(spec(), OPTIONS, root_uid="u", tree_token="s3cret-token")
    assert objects.secret["stringData"] == {"token": "s3cret-token"}
    pods = [objects.agent, *host_pods(spec(), OPTIONS, root_uid="u")]
    for pod in pods:
        assert "s3cret-token" not in str(pod)
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        reference = env["SMLAUNCH_K8S_TREE_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert reference == {"name": "k8s-job-tree", "key": "token"}
    assert "<random per job>" in str(plan_job(spec(), OPTIONS).secret)  # a dry run draws none


def test_a_given_service_account_replaces_the_jobs_own() -> None:
    options = ClusterOptions(namespace="ml", image="i", service_account="trainer")
    objects = plan_job(spec(), options, root_uid="u")
    assert [o["kind"] for o in objects.account] == ["Role", "RoleBinding"]
    assert objects.account[1]["subjects"][0]["name"] == "trainer"
    assert objects.agent["spec"]["serviceAccountName"] == "trainer"


def test_host_network_aliases_every_host_to_loopback_and_points_the_agent_at_the_api_server() -> None:
    options = ClusterOptions(namespace="ml", image="i", host_network=True, api_server=("127.0.0.1", 6443))
    objects = everything(options)
    agent = next(o for o in objects if o["metadata"]["name"] == "k8s-job-agent" and o["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in agent["spec"]["containers"][0]["env"]}
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    hosts = [o for o in objects if o["kind"] == "Pod" and "algo" in o["metadata"]["name"]]
    for pod in hosts:
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["hostAliases"] == [{"ip": "127.0.0.1", "hostnames": ["algo-1", "algo-2"]}]
        assert "resources" not in pod["spec"]["containers"][0]  # resources='off'


def test_on_a_host_network_an_mpi_jobs_hosts_each_get_a_loopback_address_of_their_own() -> None:
    """mpirun would take every host at 127.0.0.1 for itself; smp starts each host's ranks itself."""
    options = ClusterOptions(namespace="ml", image="i", host_network=True)
    mpi = spec()
    mpi.HyperParameters = {"sagemaker_mpi_enabled": "true"}
    pods = host_pods(mpi, options, root_uid="uid-1")
    expected = [{"ip": "127.0.0.1", "hostnames": ["algo-1"]}, {"ip": "127.0.0.2", "hostnames": ["algo-2"]}]
    assert [pod["spec"]["hostAliases"] for pod in pods] == [expected, expected]
    smp = spec()
    smp.HyperParameters = {"sagemaker_mpi_enabled": "true", "mp_parameters": '{"partitions": 2}'}
    shared = [{"ip": "127.0.0.1", "hostnames": ["algo-1", "algo-2"]}]
    assert host_pods(smp, options, root_uid="uid-1")[0]["spec"]["hostAliases"] == shared
    assert "hostAliases" not in host_pods(mpi, OPTIONS, root_uid="uid-1")[0]["spec"]  # names by DNS


def test_scheduling_options_and_storage_reach_every_pod() -> None:
    options = ClusterOptions(
        namespace="ml",
        image="i",
        node_selector={"pool": "gpu"},
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        image_pull_secrets=("regcred",),
        storage=S3Storage(endpoint_url="http://127.0.0.1:9000", credentials_secret="aws"),
    )
    pods = [o for o in everything(options) if o["kind"] == "Pod"]
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
        assert pod["spec"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        (container,) = pod["spec"]["containers"]
        assert {"name": "AWS_ENDPOINT_URL_S3", "value": "http://127.0.0.1:9000"} in container["env"]
        assert container["envFrom"] == [{"secretRef": {"name": "aws"}}]  # referenced, never copied
    pvc = ClusterOptions(namespace="ml", image="i", storage=PvcStorage(claim_name="data", mount_path="/data"))
    for pod in (o for o in everything(pvc) if o["kind"] == "Pod"):
        assert {"name": "storage", "persistentVolumeClaim": {"claimName": "data"}} in pod["spec"]["volumes"]
        assert {"name": "storage", "mountPath": "/data"} in pod["spec"]["containers"][0]["volumeMounts"]
        assert "securityContext" not in pod["spec"]  # the image's user unless run_as says otherwise
    as_caller = ClusterOptions(namespace="ml", image="i", run_as=(1234, 567))
    for pod in (o for o in everything(as_caller) if o["kind"] == "Pod"):
        assert pod["spec"]["securityContext"] == {"runAsUser": 1234, "runAsGroup": 567}


def test_object_names_are_kubernetes_names_and_never_shared() -> None:
    assert object_name("k8s-job") == "k8s-job"
    upper, lower = object_name("My-Job"), object_name("my-job")
    assert upper != lower and upper.startswith("my-job-")
    assert object_name("2024-run").startswith("j-2024-run-")
    long = object_name("a" * 63)
    assert len(long) <= 57 and long != object_name("a" * 62)
