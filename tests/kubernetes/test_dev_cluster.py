"""The dev cluster itself, through the official client: the node is Ready; two host-network pods of our
CPU image run a torch gloo all-reduce together and both Succeed, their logs readable through the API
server; the default service account is refused (403) until a Role grants it. Every test runs in its
own namespace, gone at its end with everything in it (see conftest.py). Traffic stays on 127.0.0.1."""

from __future__ import annotations

import socket
import textwrap
import time

import pytest
from kubernetes import client

from tests.kubernetes.conftest import DevCluster

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

POD_SECONDS = 180

ALL_REDUCE = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # MASTER_ADDR=algo-1, a host alias of 127.0.0.1
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()}: all_reduce {value.item()} world {dist.get_world_size()}", flush=True)
    dist.destroy_process_group()
    """
)

# Lists the pods of its namespace with the service account's mounted token, verified by its ca.crt,
# and prints the HTTP status. A Role binding reaches the authorizer through a watch: retry a 403 briefly.
LIST_PODS = textwrap.dedent(
    """
    import os, ssl, sys, time, urllib.error, urllib.request

    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    token = open(f"{account}/token").read()
    namespace = open(f"{account}/namespace").read()
    url = (f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
           f"/api/v1/namespaces/{namespace}/pods")
    context = ssl.create_default_context(cafile=f"{account}/ca.crt")
    deadline = time.monotonic() + float(sys.argv[1])
    while True:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            status = urllib.request.urlopen(request, context=context, timeout=10).status
        except urllib.error.HTTPError as error:
            status = error.code
        if status != 403 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"list pods as {namespace}:default -> {status}", flush=True)
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def host_pod(name: str, image: str, command: list[str], env: dict[str, str]) -> client.V1Pod:
    """A pod on the host network running ``command`` once in ``image`` (already in Docker), with
    algo-1 and algo-2 resolving to 127.0.0.1 as SageMaker's host names do."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "smlaunch-dev-cluster-test"}),
        spec=client.V1PodSpec(
            host_network=True,
            restart_policy="Never",
            termination_grace_period_seconds=5,
            host_aliases=[client.V1HostAlias(ip="127.0.0.1", hostnames=["algo-1", "algo-2"])],
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    image_pull_policy="Never",
                    command=command,
                    env=[client.V1EnvVar(name=key, value=value) for key, value in env.items()],
                )
            ],
        ),
    )


def wait_finished(core: client.CoreV1Api, namespace: str, names: list[str]) -> dict[str, str]:
    """Each pod's final phase (Succeeded or Failed), waiting at most POD_SECONDS for all of them."""
    deadline = time.monotonic() + POD_SECONDS
    while True:
        phases = {name: core.read_namespaced_pod(name, namespace).status.phase for name in names}
        if all(phase in ("Succeeded", "Failed") for phase in phases.values()):
            return phases
        if time.monotonic() > deadline:
            events = core.list_namespaced_event(namespace).items
            pytest.fail(
                f"pods not finished in {POD_SECONDS}s: {phases}; events: {[e.message for e in events]}"
            )
        time.sleep(0.5)


def run_to_end(core: client.CoreV1Api, namespace: str, pod: client.V1Pod) -> tuple[str, str]:
    """Create ``pod``, wait until it ends, and return its phase and log."""
    core.create_namespaced_pod(namespace, pod)
    name = pod.metadata.name
    phase = wait_finished(core, namespace, [name])[name]
    return phase, core.read_namespaced_pod_log(name, namespace)


def test_node_is_ready(core: client.CoreV1Api) -> None:
    node = core.read_node("localhost")
    conditions = {condition.type: condition.status for condition in node.status.conditions}
    assert conditions["Ready"] == "True", conditions
    assert node.status.node_info.kubelet_version == "v1.20.2"
    assert node.status.node_info.container_runtime_version.startswith("docker://")


def test_two_host_network_pods_all_reduce(core: client.CoreV1Api, namespace: str, image: str) -> None:
    port = str(free_port())
    names = ["algo-1", "algo-2"]
    for rank, name in enumerate(names):
        env = {"MASTER_ADDR": "algo-1", "MASTER_PORT": port, "WORLD_SIZE": "2", "RANK": str(rank)}
        env["GLOO_SOCKET_IFNAME"] = "lo"
        core.create_namespaced_pod(namespace, host_pod(name, image, ["python3", "-c", ALL_REDUCE], env))

    phases = wait_finished(core, namespace, names)

    logs = {name: core.read_namespaced_pod_log(name, namespace) for name in names}
    assert phases == {"algo-1": "Succeeded", "algo-2": "Succeeded"}, logs
    for rank, name in enumerate(names):
        assert f"rank {rank}: all_reduce 3.0 world 2" in logs[name], logs


def test_default_service_account_is_refused_until_a_role_grants_it(
    k8s_cluster: DevCluster, api: client.ApiClient, core: client.CoreV1Api, namespace: str, image: str
) -> None:
    # No kube-proxy here: a host-network pod reaches the API server on 127.0.0.1, not the Service IP.
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(k8s_cluster.api_port)}

    def probe(name: str, retry_seconds: str) -> str:
        pod = host_pod(name, image, ["python3", "-c", LIST_PODS, retry_seconds], env)
        phase, log = run_to_end(core, namespace, pod)
        assert phase == "Succeeded", log
        return log

    assert f"list pods as {namespace}:default -> 403" in probe("before-grant", "0")

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="default-reads-pods"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="default", namespace=namespace)],
        ),
    )
    assert f"list pods as {namespace}:default -> 200" in probe("after-grant", "20")
