"""The Kubernetes objects of one training job, as plain manifests (dicts the API server accepts).

Pure: from the job's :class:`~smlaunch.sdk.request.spec.TrainingJobSpec` and the session's
:class:`ClusterOptions` to :class:`JobObjects`; no client, no I/O, so a dry run prints exactly what
would be created and the unit tests check it field by field.

One job is:

- the **root**, a ConfigMap named after the job, holding its request (``spec.json``) and, once the
  agent runs, its DescribeTrainingJob-shaped state (``state.json``): the record ``attach`` and
  ``describe`` read from any machine. Every other object has an ``ownerReference`` to it (the
  agent's account objects through the agent pod), so deleting it deletes the job;
- the **agent's account**: a ServiceAccount (unless ``service_account`` names one), a Role
  limited to the job's own objects (its pods by name, its ConfigMaps and Service by name; ``create``,
  ``list`` and ``watch`` of pods cannot be limited by name in Kubernetes RBAC) and the
  RoleBinding. The submitter re-points their owner to the agent pod once it exists
  (:data:`AGENT_OWNED`), so the account goes with the pod that used it;
- the **tree Secret** ``<job>-tree``: the random token with which the job's pods reach the
  agent's tree server (:mod:`.trees`), given to the agent and host pods through ``secretKeyRef``
  so that it never appears in a pod's spec; owned by the agent pod once it exists, like the account;
- the **agent pod**, running the job's agent (state machine, failure policy, logs, artifacts);
- a **headless Service** ``<job>`` (``clusterIP: None``, selecting the job's host pods) whose name is
  every host pod's ``subdomain``, so ``algo-N.<job>`` resolves where the cluster has DNS;
- per attempt, created by the agent: one **host pod** per host, ``hostname: algo-N``, the job's
  image running :data:`HOST_MODULE` (which fetches the host's ``/opt/ml`` tree from the agent,
  runs the runtime, and hands ``model/`` and ``output/`` back to the agent) with ``/opt/ml`` an
  ``emptyDir``.

Every object carries ``smlaunch.io/job=<object name>`` (and the job's own name in the
``smlaunch.io/job-name`` annotation: SageMaker names may hold upper case, Kubernetes names may
not). ``host_network`` (single-node clusters without DNS, such as the dev cluster of
``docs/kubernetes.md``) puts every pod on the node's network with ``algo-1..N`` aliased to
127.0.0.1; for an MPI job each host gets a loopback address of its own (``algo-i`` ->
``127.0.0.<i>``), so that ``mpirun`` reaches the other hosts over ssh instead of taking them for
itself (:func:`~smlaunch.sdk.backends.emulated.executors.ssh.host_address`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from smlaunch.sdk.backends.emulated.executors.ssh import host_addresses, uses_mpi
from smlaunch.sdk.backends.kubernetes.host import FUSE_ENV, TREE_TOKEN_ENV
from smlaunch.sdk.backends.kubernetes.options import ResourcesMode, S3Storage, Storage, Toleration
from smlaunch.sdk.request.spec import TrainingJobSpec

JOB_LABEL = "smlaunch.io/job"
ROLE_LABEL = "smlaunch.io/role"
HOST_LABEL = "smlaunch.io/host"
JOB_NAME_ANNOTATION = "smlaunch.io/job-name"
SPEC_KEY = "spec.json"
STATE_KEY = "state.json"
AGENT_MODULE = "smlaunch.sdk.backends.kubernetes.agent"
HOST_MODULE = "smlaunch.sdk.backends.kubernetes.host"
LOG_KEY = "job.log"
"""In the root ConfigMap once the job ended: the end of its log (pod logs go with the pods)."""
STOP_ANNOTATION = "smlaunch.io/stop"
"""Set on the root ConfigMap by ``stop()``; the agent stops the job when it sees it."""
PLACEHOLDER_UID = "<uid of the root ConfigMap>"
"""The root's uid in a dry run (the API server assigns it on create)."""
PLACEHOLDER_TOKEN = "<random per job>"
"""The tree token in a dry run (:meth:`KubernetesBackend.submit` draws one per job)."""
TREE_TOKEN_KEY = "token"
"""The tree Secret's key."""
AGENT_OWNED = ("ServiceAccount", "Role", "RoleBinding", "Secret")
"""Kinds the submitter re-points from the root to the agent pod once the pod exists."""
_NAME_LIMIT = 63 - len("-agent")


@dataclass(frozen=True)
class ClusterOptions:
    """What the plan takes from the session (:class:`~smlaunch.sdk.sessions.kubernetes.KubernetesSession`),
    resolved: ``image`` is the job's image (the spec's ``TrainingImage`` wins at plan time)."""

    namespace: str
    image: str
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Toleration] = ()
    image_pull_secrets: Sequence[str] = ()
    resources: Mapping[str, str] = field(default_factory=dict)
    """Each host's requests (and limits); empty for ``resources='off'``."""
    storage: Storage = field(default_factory=S3Storage)
    host_network: bool = False
    fuse: bool | str = False
    """FastFile's FUSE mounts in the host pods: ``True``, privileged pods; a device plugin's resource
    name (in :attr:`resources` too), ``CAP_SYS_ADMIN`` added and AppArmor's mount rules lifted."""
    api_server: tuple[str, int] | None = None
    """Where a host-network pod reaches the API server (``KUBERNETES_SERVICE_HOST``/``PORT``)."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Extra variables of every pod (the job's settings, never secrets)."""
    termination_grace_seconds: int = 30
    run_as: tuple[int, int] | None = None
    """The uid and gid every pod runs as (``securityContext``); None: the image's user. With PVC
    storage, the notebook's: the claim is a file system both sides write (the notebook the code and
    the data, the agent the artifacts next to them), as the Docker executor's containers run as the
    caller for the same reason."""


def object_name(job_name: str) -> str:
    """The job's objects' base name: ``job_name`` when it is already a DNS-1035 label short enough
    for ``<name>-agent``; else lower-cased, with a letter first, cut and suffixed by a hash of the
    original so that two SageMaker names never share one."""
    if re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job_name) and len(job_name) <= _NAME_LIMIT:
        return job_name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]", "-", job_name.lower()).strip("-")
    base = base if base[:1].isalpha() else f"j-{base}"
    return f"{base[: _NAME_LIMIT - 9].rstrip('-')}-{digest}"


def host_pod_name(base: str, host: int) -> str:
    """Host ``algo-<host>``'s pod (1-based)."""
    return f"{base}-algo-{host}"


def agent_name(base: str) -> str:
    return f"{base}-agent"


def tree_secret_name(base: str) -> str:
    return f"{base}-tree"


def tree_token_variable(base: str) -> dict[str, Any]:
    """``SMLAUNCH_K8S_TREE_TOKEN`` from the job's tree Secret (resolved by the kubelet)."""
    reference = {"name": tree_secret_name(base), "key": TREE_TOKEN_KEY}
    return {"name": TREE_TOKEN_ENV, "valueFrom": {"secretKeyRef": reference}}


def metadata(base: str, job_name: str, name: str, role: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """Labels, the job-name annotation and the owner reference every object of the job carries."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {JOB_LABEL: base, ROLE_LABEL: role},
        "annotations": {JOB_NAME_ANNOTATION: job_name},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def owner_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """An owner reference that makes the garbage collector delete the owned object with ``name``
    (``blockOwnerDeletion`` so a foreground delete of the root waits for its objects)."""
    api_version = "v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": kind == "ConfigMap",
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True)
class JobObjects:
    """What the submitter creates, in this order (:meth:`creation_order`); host pods come later,
    from the agent (:func:`host_pods`)."""

    namespace: str
    root: dict[str, Any]
    account: tuple[dict[str, Any], ...]
    agent: dict[str, Any]
    service: dict[str, Any]
    secret: dict[str, Any]

    def creation_order(self) -> list[dict[str, Any]]:
        return [self.root, *self.account, self.secret, self.service, self.agent]


def plan_job(
    spec: TrainingJobSpec,
    options: ClusterOptions,
    root_uid: str = PLACEHOLDER_UID,
    tree_token: str = PLACEHOLDER_TOKEN,
) -> JobObjects:
    """Every object the submitter creates for ``spec`` (see the module docstring)."""
    job_name = spec.TrainingJobName
    base = object_name(job_name)
    owner = owner_reference("ConfigMap", base, root_uid)
    count = spec.ResourceConfig.InstanceCount
    root = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(base, job_name, base, "job", None),
        "data": {SPEC_KEY: json.dumps(spec.to_request(), sort_keys=True)},
    }
    account_name = options.service_account or agent_name(base)
    hosts = [host_pod_name(base, host) for host in range(1, count + 1)]
    account: list[dict[str, Any]] = []
    if options.service_account is None:
        account.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": metadata(base, job_name, account_name, "agent", owner),
            }
        )
    account.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(base, job_name, agent_name(base), "agent", owner),
            "rules": role_rules(base, hosts),
        }
    )
    account.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(base, job_name, agent_name(base), "agent", owner),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": agent_name(base)},
            "subjects": [{"kind": "ServiceAccount", "name": account_name, "namespace": options.namespace}],
        }
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(base, job_name, tree_secret_name(base), "agent", owner),
        "type": "Opaque",
        "stringData": {TREE_TOKEN_KEY: tree_token},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(base, job_name, base, "hosts", owner),
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: base, ROLE_LABEL: "host"},
            "publishNotReadyAddresses": True,  # hosts resolve while they start, as rendezvous needs
        },
    }
    agent_env = {"SMLAUNCH_K8S_JOB": base, **_api_server_env(options)}
    agent_pod = _pod(
        options,
        metadata(base, job_name, agent_name(base), "agent", owner),
        command=["python3", "-m", AGENT_MODULE, base],
        env=agent_env,
        service_account=account_name,
        resources={},
        extra={},
    )
    agent_pod["spec"]["containers"][0]["env"] += [
        {"name": "SMLAUNCH_K8S_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        # Where the host pods fetch their trees (executor.ADDRESS_ENV); 127.0.0.1 on a host network.
        {"name": "SMLAUNCH_K8S_AGENT_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        tree_token_variable(base),
    ]
    return JobObjects(options.namespace, root, tuple(account), agent_pod, service, secret)


def role_rules(base: str, hosts: Sequence[str]) -> list[dict[str, Any]]:
    """The agent's Role: only the job's own objects, by name wherever RBAC allows it."""
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/log"],
            "verbs": ["get", "delete"],
            "resourceNames": [*hosts, agent_name(base)],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "update", "patch"],
            "resourceNames": [base],
        },
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "delete"], "resourceNames": [base]},
    ]


def host_pods(spec: TrainingJobSpec, options: ClusterOptions, root_uid: str) -> list[dict[str, Any]]:
    """One attempt's host pods (``algo-1..N``); the agent adds each host's variables (where its
    tree is, the runtime's environment) when it starts them."""
    job_name = spec.TrainingJobName
    base = object_name(job_name)
    owner = owner_reference("ConfigMap", base, root_uid)
    count = spec.ResourceConfig.InstanceCount
    pods = []
    for host in range(1, count + 1):
        meta = metadata(base, job_name, host_pod_name(base, host), "host", owner)
        meta["labels"][HOST_LABEL] = f"algo-{host}"
        extra: dict[str, Any] = {"hostname": f"algo-{host}", "subdomain": base}
        if options.host_network:
            names = [f"algo-{other}" for other in range(1, count + 1)]
            extra["hostAliases"] = [{"ip": "127.0.0.1", "hostnames": names}]
            if uses_mpi(spec):  # mpirun takes every host at 127.0.0.1 for itself: one address each
                extra["hostAliases"] = [
                    {"ip": address, "hostnames": [name]} for name, address in host_addresses(names).items()
                ]
        else:  # so that the bare "algo-2" resolves, as on SageMaker, not only "algo-2.<job>"
            extra["dnsConfig"] = {"searches": [f"{base}.{options.namespace}.svc.cluster.local"]}
        pod = _pod(
            options,
            meta,
            command=["python3", "-m", HOST_MODULE],
            env={"GLOO_SOCKET_IFNAME": "lo"} if options.host_network else {},
            service_account=options.service_account,
            resources=dict(options.resources),
            extra=extra,
        )
        pod["spec"]["automountServiceAccountToken"] = False
        pod["spec"]["containers"][0]["env"].append(tree_token_variable(base))
        if options.fuse:
            container = pod["spec"]["containers"][0]
            if options.fuse is True:  # core Kubernetes gives /dev/fuse to privileged containers only
                container["securityContext"] = {"privileged": True}
            else:  # the device plugin gives /dev/fuse; mounting takes CAP_SYS_ADMIN, and AppArmor's
                # default Docker profile denies mount() even then
                container["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
                annotations = pod["metadata"].setdefault("annotations", {})
                annotations["container.apparmor.security.beta.kubernetes.io/main"] = "unconfined"
            container["env"].append({"name": FUSE_ENV, "value": "1"})
        pod["spec"]["volumes"].append({"name": "opt-ml", "emptyDir": {}})
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": "opt-ml", "mountPath": "/opt/ml"})
        pods.append(pod)
    return pods


def _api_server_env(options: ClusterOptions) -> dict[str, str]:
    if not options.host_network or options.api_server is None:
        return {}
    host, port = options.api_server
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)}


def _pod(
    options: ClusterOptions,
    meta: dict[str, Any],
    command: list[str],
    env: Mapping[str, str],
    service_account: str | None,
    resources: dict[str, str],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """A pod of the job: the options every pod shares, then ``extra`` spec fields."""
    variables = {**options.environment, **env}
    storage = options.storage
    if isinstance(storage, S3Storage) and storage.endpoint_url:
        variables["AWS_ENDPOINT_URL_S3"] = storage.endpoint_url
    container: dict[str, Any] = {
        "name": "main",
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": command,
        "env": [{"name": key, "value": value} for key, value in sorted(variables.items())],
        "volumeMounts": [],
    }
    if isinstance(storage, S3Storage) and storage.credentials_secret:
        container["envFrom"] = [{"secretRef": {"name": storage.credentials_secret}}]
    if resources:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": options.termination_grace_seconds,
        "containers": [container],
        "volumes": [],
        **extra,
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    if options.node_selector:
        spec["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        spec["tolerations"] = [toleration.manifest() for toleration in options.tolerations]
    if options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    if options.run_as is not None:
        spec["securityContext"] = {"runAsUser": options.run_as[0], "runAsGroup": options.run_as[1]}
    if options.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if not isinstance(storage, S3Storage):
        spec["volumes"].append(
            {"name": "storage", "persistentVolumeClaim": {"claimName": storage.claim_name}}
        )
        container["volumeMounts"].append({"name": "storage", "mountPath": storage.mount_path})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def resources_for(
    mode: ResourcesMode | Mapping[str, str], catalog_values: Mapping[str, str]
) -> dict[str, str]:
    """A host's resources: the catalog's for ``"catalog"``, none for ``"off"``, else as given."""
    if mode == "catalog":
        return dict(catalog_values)
    if mode == "off":
        return {}
    return dict(mode)
