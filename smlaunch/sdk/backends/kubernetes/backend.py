"""The Kubernetes backend: a job checked against the cluster, and planned as Kubernetes objects.

:meth:`KubernetesBackend.check` refuses, before anything is created or staged, what the cluster
cannot honour: the capabilities (``s3://`` with S3 storage, ``file://`` under the claim's mount path
with a PVC; every launcher: ``mpi`` runs ``mpirun`` over ssh between the host pods, with per-job
keys (:mod:`.executor`), and smp model parallelism starts each pod's ranks itself),
an instance type the catalog cannot size with ``resources='catalog'``, a namespace that does not
exist, no node that the ``node_selector`` and ``tolerations`` admit, no node whose allocatable
resources could ever hold one host (a node that is only *busy* is not refused: the job waits as
``Starting``, the scheduler's reason in its status), and ``host_network`` across several nodes.
The API server is asked only what the credentials may read: a 403 on nodes or namespaces skips
that check. :meth:`KubernetesBackend.plan_objects` is the exact set of objects
(:mod:`smlaunch.sdk.backends.kubernetes.plan`); :meth:`KubernetesBackend.submit` creates them
(:func:`.jobs.create_job`), and the job's agent pod (:mod:`.agent`) runs the job from there.
``describe``, ``log_lines`` and ``stop`` go through the job's root ConfigMap and agent pod
(:mod:`.jobs`), so any machine with the credentials sees the same job.

Every input mode is honoured: File channels reach the hosts in their trees, FastFile (``s3://``)
and Pipe channels are delivered by each host pod itself, its share decided by the agent
(:mod:`.host`); FastFile is a FUSE mount only with ``KubernetesSession(fuse=True)`` (privileged
host pods), else it has File semantics and the job log says so.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.base import Backend, Capabilities
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.backend import JobNotFoundError
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, KubernetesSettings
from smlaunch.sdk.backends.kubernetes import client as k8s_client
from smlaunch.sdk.backends.kubernetes import jobs, plan
from smlaunch.sdk.backends.kubernetes.options import (
    GPU_RESOURCE,
    PvcStorage,
    ResourcesMode,
    S3Storage,
    Storage,
    Toleration,
    catalog_resources,
)
from smlaunch.sdk.backends.kubernetes.plan import ClusterOptions, JobObjects, plan_job, resources_for
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request import catalog
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.tuning import trials

DEFAULT_IMAGES = {"cpu": "smlaunch-cpu:latest", "gpu": "smlaunch-cuda:latest"}
"""Jobs without ``image`` or ``image_uri`` run our image for the instance type (``container/``)."""
_DLC_IMAGE = re.compile(r"(^|/)(pytorch|tensorflow)-training(:|$)")
"""A framework's Deep Learning Container, which the estimator names by default: ours replaces it."""


class KubernetesJobStore(Protocol):
    """What the backend reads of its session (``KubernetesSession``), so it never imports it."""

    @property
    def namespace(self) -> str: ...
    @property
    def image(self) -> str | None: ...
    @property
    def image_pull_policy(self) -> str: ...
    @property
    def service_account(self) -> str | None: ...
    @property
    def node_selector(self) -> dict[str, str]: ...
    @property
    def tolerations(self) -> tuple[Toleration, ...]: ...
    @property
    def image_pull_secrets(self) -> tuple[str, ...]: ...
    @property
    def resources(self) -> ResourcesMode | dict[str, str]: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def host_network(self) -> bool: ...
    @property
    def fuse(self) -> bool | str: ...
    @property
    def stop_grace_seconds(self) -> float: ...
    @property
    def settings(self) -> Any: ...
    @property
    def tuning_root(self) -> Path: ...

    def s3_client(self) -> Any: ...

    def api_client(self) -> Any: ...


class KubernetesBackend(Backend):
    """Jobs on a Kubernetes cluster; see the module docstring."""

    capabilities = Capabilities(
        name="kubernetes",
        uri_schemes=frozenset({"s3"}),
        input_modes=frozenset({"File", "FastFile", "Pipe"}),  # the last two delivered in the host pods
        distributions=frozenset(Strategy),
        spot=True,  # a host pod deleted or evicted: the next attempt, from the checkpoints
        checkpoints=True,
    )

    def __init__(self, session: KubernetesJobStore, core_api: Any | None = None) -> None:
        self.session = session
        self._core = core_api
        if isinstance(session.storage, PvcStorage):
            self.capabilities = self.capabilities.model_copy(update={"uri_schemes": frozenset({"file"})})

    # --- what the job asks for ------------------------------------------------------------------

    def image(self, spec: TrainingJobSpec) -> str:
        """The session's ``image``, else the estimator's ``image_uri`` (a framework's default Deep
        Learning Container is replaced by our image for the instance type)."""
        if self.session.image:
            return self.session.image
        given = spec.AlgorithmSpecification.TrainingImage
        if given and not _DLC_IMAGE.search(given):
            return given
        processor = catalog.lookup(spec.ResourceConfig.InstanceType).processor
        return DEFAULT_IMAGES[processor]

    def host_resources(self, spec: TrainingJobSpec) -> dict[str, str]:
        """One host's requests (equal to its limits), per the session's ``resources``."""
        mode = self.session.resources
        if mode != "catalog":
            found = resources_for(mode, {})
        else:
            found = catalog_resources(catalog.lookup(spec.ResourceConfig.InstanceType))
        if isinstance(self.session.fuse, str):  # one /dev/fuse from the device plugin
            found[self.session.fuse] = "1"
        return found

    def cluster_options(self, spec: TrainingJobSpec) -> ClusterOptions:
        """The session's options, resolved for ``spec``."""
        api_server = None
        if self.session.host_network:
            parsed = urlparse(str(self.session.api_client().configuration.host))
            if parsed.hostname in ("127.0.0.1", "localhost", "::1"):
                api_server = (parsed.hostname, parsed.port or 443)
        return ClusterOptions(
            namespace=self.session.namespace,
            image=self.image(spec),
            image_pull_policy=self.session.image_pull_policy,
            service_account=self.session.service_account,
            node_selector=self.session.node_selector,
            tolerations=self.session.tolerations,
            image_pull_secrets=self.session.image_pull_secrets,
            resources=self.host_resources(spec),
            storage=self.session.storage,
            host_network=self.session.host_network,
            fuse=self.session.fuse,
            api_server=api_server,
            termination_grace_seconds=int(self.session.stop_grace_seconds) + 5,
            run_as=(os.getuid(), os.getgid()) if isinstance(self.session.storage, PvcStorage) else None,
        )

    def plan_objects(self, request: JobRequest) -> JobObjects:
        """Every object submitting ``request`` creates (pure once the options are resolved)."""
        return plan_job(request.spec, self.cluster_options(request.spec))

    def core(self) -> Any:
        """The ``CoreV1Api`` of the session's cluster (injected in tests; created on first use)."""
        if self._core is None:
            self._core = k8s_client.kubernetes_module().client.CoreV1Api(self.session.api_client())
        return self._core

    # --- check ----------------------------------------------------------------------------------

    def check(self, request: JobRequest) -> None:
        """The capabilities, then what the cluster can honour (see the module docstring)."""
        super().check(request)
        spec = request.spec
        storage = self.session.storage
        if isinstance(storage, PvcStorage):
            self._check_pvc_paths(spec, storage)
        local_path = layout.checkpoint_local_path(spec)
        if local_path is not None and layout.below_opt_ml(local_path) is None:
            raise UnsupportedByBackendError(
                "checkpoint_local_path",
                local_path,
                "a host pod hands back to the job's agent only what is under /opt/ml",
                f"use a path under /opt/ml (e.g. {contract.DEFAULT_CHECKPOINT_LOCAL_PATH!r})",
            )
        resources = self.host_resources(spec)
        self.image(spec)
        self._check_cluster(spec, resources)

    def _check_pvc_paths(self, spec: TrainingJobSpec, storage: PvcStorage) -> None:
        for field, uri in spec.data_uris():
            path = Path(urlparse(uri).path)
            if not path.is_relative_to(storage.mount_path):
                raise UnsupportedByBackendError(
                    field,
                    uri,
                    f"the pods see only the claim {storage.claim_name!r}, mounted at {storage.mount_path}",
                    f"put it under file://{storage.mount_path}/",
                )

    def _check_cluster(self, spec: TrainingJobSpec, resources: Mapping[str, str]) -> None:
        kubernetes = k8s_client.kubernetes_module()
        core = self.core()
        ApiException = kubernetes.client.rest.ApiException
        namespace = self.session.namespace
        try:
            core.read_namespace(namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise ConfigurationError(
                    "namespace",
                    namespace,
                    "the cluster has no such namespace",
                    f"create it (`kubectl create namespace {namespace}`) or pass another",
                ) from None
            if exc.status != 403:
                raise k8s_client.api_error(exc, f"read namespace {namespace}", namespace) from None
        try:
            nodes = core.list_node().items
        except ApiException as exc:
            if exc.status == 403:
                return  # the credentials may not list nodes: the scheduler will say what it sees
            raise k8s_client.api_error(exc, "list nodes") from None
        candidates = [node for node in nodes if self._admits(node)]
        if not candidates:
            raise UnsupportedByBackendError(
                "node_selector",
                self.session.node_selector,
                f"none of the cluster's {len(nodes)} node(s) matches it, tolerates their taints and "
                "is schedulable"
                + (
                    f" (tolerations={[t.manifest() for t in self.session.tolerations]})"
                    if self.session.tolerations
                    else ""
                ),
                "pass a node_selector and tolerations that admit a node (`kubectl get nodes --show-labels`)",
            )
        parse = kubernetes.utils.parse_quantity
        for name, quantity in resources.items():
            wanted = parse(quantity)
            offers = [parse((node.status.allocatable or {}).get(name, "0")) for node in candidates]
            if not any(offer >= wanted for offer in offers):
                field = "instance_type" if self.session.resources == "catalog" else "resources"
                if name == self.session.fuse:
                    raise UnsupportedByBackendError(
                        "fuse",
                        name,
                        "no admitted node offers that resource (no /dev/fuse device plugin there)",
                        "install the device plugin, pass fuse=True (privileged pods) or fuse=False",
                    )
                raise UnsupportedByBackendError(
                    field,
                    spec.ResourceConfig.InstanceType if field == "instance_type" else dict(resources),
                    f"one host asks for {name}={quantity} and no admitted node has that much allocatable "
                    f"(the most is {max(offers)})",
                    "pick an instance type that fits a node, or pass KubernetesSession(resources='off' or "
                    "{'cpu': ..., 'memory': ...})",
                )
        count = spec.ResourceConfig.InstanceCount
        if self.session.host_network and count > 1 and len(candidates) > 1:
            raise UnsupportedByBackendError(
                "host_network",
                True,
                f"the hosts find each other at 127.0.0.1, so all {count} must share one node, and "
                f"{len(candidates)} nodes are admitted",
                "pass a node_selector naming one node, or host_network=False on a cluster with DNS",
            )

    def _admits(self, node: Any) -> bool:
        """Whether a host pod could ever run on ``node``: labels, taints, schedulable."""
        if node.spec is not None and node.spec.unschedulable:
            return False
        labels = node.metadata.labels or {}
        if any(labels.get(key) != value for key, value in self.session.node_selector.items()):
            return False
        taints = (node.spec.taints if node.spec is not None else None) or []
        for taint in taints:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(_tolerates(toleration, taint) for toleration in self.session.tolerations):
                return False
        return True

    # --- the job --------------------------------------------------------------------------------

    def job_settings(self, spec: TrainingJobSpec, options: ClusterOptions, root_uid: str) -> JobSettings:
        """How the agent runs ``spec``: the session's knobs, and each host's pod as planned."""
        instance = catalog.lookup(spec.ResourceConfig.InstanceType)
        pods_have_gpus = bool(instance.gpus) and GPU_RESOURCE in options.resources
        fields = KubernetesSettings(
            namespace=options.namespace,
            host_pods=plan.host_pods(spec, options, root_uid),
            host_network=options.host_network,
        )
        given = spec.Environment or {}
        knobs = {k: v for k, v in self.session.settings.host_environment().items() if k not in given}
        storage = self.session.storage
        return JobSettings.resolve(
            spec,
            self.session.settings,
            fields,
            machine_gpus=(instance.gpus or 0) if pods_have_gpus else 0,
            host_gpus=None if pods_have_gpus else 0,
            knobs=knobs,
            s3_endpoint_url=storage.endpoint_url if isinstance(storage, S3Storage) else None,
            s3_region_name=getattr(getattr(self.session.s3_client(), "meta", None), "region_name", None)
            if isinstance(storage, S3Storage)
            else None,
        )

    def submit(self, request: JobRequest) -> None:
        """Create the job's objects (:mod:`.plan`, in :func:`.jobs.create_job`'s order); the agent
        pod takes it from there. Returns once they exist."""
        self.check(request)
        spec = request.spec
        options = self.cluster_options(spec)
        objects = plan_job(spec, options, tree_token=secrets.token_urlsafe(18))
        created = time.time()
        starting = {
            "Status": contract.SECONDARY_STARTING,
            "StartTime": created,
            "StatusMessage": "Launching the job's agent pod",
        }
        state = {
            "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
            "SecondaryStatus": contract.SECONDARY_STARTING,
            "SecondaryStatusTransitions": [starting],
            "CreationTime": created,
            "LastModifiedTime": created,
        }
        # The settings name the root's uid in every host pod's owner reference.
        jobs.create_job(
            self.session.api_client(),
            objects,
            lambda uid: self.job_settings(spec, options, uid).model_dump_json(),
            state,
        )

    def _base(self, job_name: str) -> str:
        return plan.object_name(job_name)

    def _root(self, job_name: str) -> Any:
        root = jobs.read_root(self.session.api_client(), self.session.namespace, self._base(job_name))
        if root is None:
            raise JobNotFoundError(f"no job named {job_name!r} in namespace {self.session.namespace}")
        return root

    def describe(self, job_name: str) -> dict[str, Any]:
        """DescribeTrainingJob from the job's root ConfigMap (any machine sees the same)."""
        root = self._root(job_name)
        api, namespace = self.session.api_client(), self.session.namespace
        base = self._base(job_name)
        agent = jobs.agent_pod(api, namespace, base)
        description = jobs.description(root, agent, agent_checked=True)
        tuning = self.tuning_job_of(job_name)
        if tuning is not None:  # a trial of a tuning job of this session, as SageMaker describes one
            description["TuningJobArn"] = trials.tuning_job_arn(tuning)
        return description

    def tuning_job_of(self, job_name: str) -> str | None:
        """The tuning job kept in the session's ``tuning_root`` whose trial ``job_name`` is, if any;
        a session that cannot say where its tuning jobs are kept (no kubeconfig context) has none."""
        if trials.TRIAL_NAME.match(job_name) is None:
            return None
        try:
            root = self.session.tuning_root
        except ConfigurationError:
            return None
        return trials.tuning_job_of(root, job_name)

    def list_jobs(self) -> list[dict[str, Any]]:
        """DescribeTrainingJob of every job in the namespace (its root ConfigMaps), newest first;
        a job not yet ended is described in full (its agent and pods looked at), an ended one from
        its record alone."""
        found = []
        for root in jobs.list_roots(self.session.api_client(), self.session.namespace):
            described = jobs.description(root, None, agent_checked=False)
            if described["TrainingJobStatus"] not in contract.TERMINAL_STATUSES:
                with contextlib.suppress(JobNotFoundError):  # removed meanwhile: not listed
                    found.append(self.describe(described["TrainingJobName"]))
                continue
            found.append(described)
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        return sorted(found, key=lambda d: d.get("CreationTime") or epoch, reverse=True)

    def remove(self, job_name: str) -> None:
        """Delete an ended job's record (the root ConfigMap, and with it anything it still owns);
        a job not ended is refused, as ``smlaunch rm`` refuses a running local job."""
        status = self.describe(job_name)["TrainingJobStatus"]
        if status not in contract.TERMINAL_STATUSES:
            raise ConfigurationError(
                "JOB",
                job_name,
                f"is still running ({status})",
                f"stop it first: smlaunch stop kubernetes:{self.session.namespace}:{job_name}",
            )
        jobs.delete_job(self.session.api_client(), self.session.namespace, self._base(job_name))

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """The job log (the hosts' lines with ``[algo-N/rank R]``, the status lines); see
        :func:`.jobs.log_lines`."""
        self._root(job_name)
        api, namespace = self.session.api_client(), self.session.namespace
        yield from jobs.log_lines(
            api, namespace, self._base(job_name), follow, lambda: self.describe(job_name)
        )

    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Ask the agent to stop the job: SIGTERM reaches the script, SIGKILL after the grace."""
        if reason is not None:
            raise ConfigurationError(
                "reason", reason, "the Kubernetes backend does not emulate spot interruptions", "call stop()"
            )
        self._root(job_name)
        jobs.request_stop(self.session.api_client(), self.session.namespace, self._base(job_name))


def _tolerates(toleration: Toleration, taint: Any) -> bool:
    """Kubernetes' matching rule: an empty effect matches every effect; ``Exists`` with no key
    tolerates everything; else keys equal and, for ``Equal``, values equal."""
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return toleration.key is None or toleration.key == taint.key
    return toleration.key == taint.key and (toleration.value or "") == (taint.value or "")
