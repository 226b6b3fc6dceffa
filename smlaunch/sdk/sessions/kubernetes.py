"""``KubernetesSession``: run jobs on a Kubernetes cluster, with the same contract as a local run.

This module holds the session's arguments and their checks (each error names the argument, the
value and the fix); the options' data is :mod:`smlaunch.sdk.backends.kubernetes.options`, the
objects a job creates :mod:`smlaunch.sdk.backends.kubernetes.plan` and the checks against the
cluster :mod:`smlaunch.sdk.backends.kubernetes.backend`. The ``kubernetes`` package (the extra
``smlaunch[kubernetes]``) is imported only when the cluster is first asked something.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from smlaunch.sdk.backends.kubernetes import client as k8s_client
from smlaunch.sdk.backends.kubernetes.options import (
    PvcStorage,
    ResourcesMode,
    S3Storage,
    Storage,
    Toleration,
    dns_name,
    parse_fuse,
    parse_node_selector,
    parse_resources,
    parse_storage,
    parse_tolerations,
)
from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.sessions import settings
from smlaunch.sdk.sessions.local import PLACEHOLDER_ROLE_ARN

if TYPE_CHECKING:
    from smlaunch.sdk.backends.base import Backend

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
KUBERNETES_DIR = ".kubernetes"
"""Under the local job store's root: one directory per context and namespace holding their tuning
jobs (a name no training job can have, so ``smlaunch list`` and ``gc`` never take it for one)."""


class KubernetesSession:
    """Run jobs on a Kubernetes cluster (EKS, GKE, on-premises; Kubernetes >= 1.20, core objects
    only): one pod per host (``hostname: algo-N`` under a headless Service of the job), the job's
    agent as a pod, the same ``/opt/ml`` contract, ``SM_*`` variables, launchers and statuses as a
    local run (``docs/kubernetes.md``).

    ``namespace``: where the job's objects go (default ``"default"``). ``image``: the container of
    every pod, with smlaunch installed and ``train`` its command (default: the estimator's
    ``image_uri``, else our image for the instance type, ``smlaunch-cpu:latest`` or
    ``smlaunch-cuda:latest``: build and push it with ``container/build.sh``).
    ``image_pull_policy``: ``Always``, ``IfNotPresent`` (default) or ``Never`` (an image already on
    the nodes). ``kubeconfig``, ``context``: the cluster (default: ``$KUBECONFIG`` or
    ``~/.kube/config`` and its current context, else the in-cluster configuration inside a pod).
    ``service_account``: the account the job's pods run as, and which the job's agent Role is
    bound to (default: one the job creates for its agent; hosts then run as the namespace's
    ``default``, without an API token). ``node_selector``, ``tolerations``,
    ``image_pull_secrets``: as in a pod spec. ``resources``: each host's requests and limits:
    ``"catalog"`` (default: the instance type's vCPUs, memory, ``nvidia.com/gpu``,
    ``aws.amazon.com/neuron`` and one ``vpc.amazonaws.com/efa`` where it has EFA), ``"off"``
    (nothing: small test clusters) or an explicit mapping. ``storage``: where code, data and
    artifacts live: ``"s3"`` (default) or ``{"s3": {"endpoint_url": ..., "credentials_secret":
    ...}}`` (another S3 endpoint such as MinIO; a Secret whose keys become the pods' AWS
    variables), or ``{"pvc": "claim", "mount_path": "/mnt/smlaunch"}`` (a PersistentVolumeClaim
    every pod mounts; ``file://`` URIs under ``mount_path``, which this machine must see at the
    same path; the pods then run as this process's uid and gid, so that both sides own the
    claim's files). ``host_network``: every pod on its
    node's network with ``algo-1..N`` aliased to 127.0.0.1, for single-node clusters without
    cluster DNS (the dev cluster of ``docs/kubernetes.md``). ``fuse``: FastFile channels as FUSE
    mounts in the host pods, which need ``/dev/fuse`` and ``CAP_SYS_ADMIN``: ``True`` runs them
    privileged (the cluster must allow it), a resource name (``"smarter-devices/fuse"``) asks a
    device plugin for ``/dev/fuse`` and adds ``CAP_SYS_ADMIN`` only; the image needs ``fuse3``,
    ``mfusepy`` and a user that may open ``/dev/fuse``. Without it (default), FastFile is
    delivered with File semantics and the job log says so. ``default_bucket``: the bucket of jobs
    without ``output_path``. ``processes_per_host``, ``stop_grace_seconds``,
    ``instance_count_quota``: as :class:`~smlaunch.sdk.sessions.local.LocalSession`'s.
    ``tuning_root``: the directory on this machine that keeps the session's tuning jobs
    (``<tuning_root>/.tuning/<name>``, ``docs/tuning.md``; default: see :attr:`tuning_root`).
    ``api_client`` (a ``kubernetes.client.ApiClient``) and ``s3_client``: injected clients (tests).
    The job's image needs smlaunch with the ``kubernetes`` extra: its agent pod uses the client.
    """

    is_local = True
    """Local semantics (the emulated platform's contract): ``local`` instance types with
    ``resources='off'``, ``file://`` paths on a PVC, no IAM role needed."""
    region_name = "local"

    def __init__(
        self,
        namespace: str = "default",
        image: str | None = None,
        image_pull_policy: ImagePullPolicy = "IfNotPresent",
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        service_account: str | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: list[dict[str, Any] | Toleration] | None = None,
        image_pull_secrets: list[str] | None = None,
        resources: ResourcesMode | dict[str, str | int] | None = None,
        storage: str | dict[str, Any] | Storage | None = None,
        host_network: bool = False,
        fuse: bool | str = False,
        default_bucket: str | None = None,
        processes_per_host: int | None = None,
        stop_grace_seconds: float | None = None,
        instance_count_quota: int | None = None,
        tuning_root: str | os.PathLike[str] | None = None,
        api_client: Any | None = None,
        s3_client: Any | None = None,
    ) -> None:
        self.namespace = dns_name("namespace", namespace, "ml-jobs")
        image_fix = "pass an image the nodes can run, e.g. 'registry.example.com/smlaunch-cpu:1.0'"
        require_type("image", image, (str, type(None)), image_fix)
        if image is not None and (not image or any(c.isspace() for c in image)):
            raise ConfigurationError("image", image, "must be an image name without spaces", image_fix)
        self.image = image
        if image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ConfigurationError(
                "image_pull_policy",
                image_pull_policy,
                "unknown pull policy",
                "pass 'Always', 'IfNotPresent' or 'Never'",
            )
        self.image_pull_policy: ImagePullPolicy = image_pull_policy
        self.kubeconfig = _check_kubeconfig(kubeconfig)
        require_type(
            "context", context, (str, type(None)), "pass a context name from `kubectl config get-contexts`"
        )
        self.context = context
        self.service_account = (
            None
            if service_account is None
            else dns_name("service_account", service_account, "trainer", label=False)
        )
        self.node_selector = parse_node_selector(node_selector)
        self.tolerations = parse_tolerations(tolerations)
        self.image_pull_secrets = _check_pull_secrets(image_pull_secrets)
        self.resources = parse_resources(resources)
        self.storage = parse_storage(storage)
        require_type("host_network", host_network, bool, "pass host_network=True or False")
        self.host_network = host_network
        self.fuse = parse_fuse(fuse)
        bucket_fix = "pass a bucket name, e.g. default_bucket='my-training-bucket'"
        require_type("default_bucket", default_bucket, (str, type(None)), bucket_fix)
        if default_bucket is not None and (not default_bucket or "/" in default_bucket):
            raise ConfigurationError("default_bucket", default_bucket, "not a bucket name", bucket_fix)
        self.default_bucket = default_bucket
        self.settings = settings.resolve(
            {
                "processes_per_host": processes_per_host,
                "stop_grace_seconds": stop_grace_seconds,
                "instance_count_quota": instance_count_quota,
            }
        )
        self.processes_per_host = self.settings.processes_per_host
        self.stop_grace_seconds = self.settings.stop_grace_seconds
        self.instance_count_quota = self.settings.instance_count_quota
        self.sagemaker_config: dict[str, Any] = {}
        require_type("tuning_root", tuning_root, (str, os.PathLike, type(None)), "pass a directory path")
        self._tuning_root = None if tuning_root is None else Path(tuning_root).expanduser().resolve()
        self._api_client = api_client
        self._s3_client = s3_client
        self._backend: Backend | None = None
        if context is not None and api_client is None:
            self._check_context(context)

    def __repr__(self) -> str:
        return f"KubernetesSession(namespace={self.namespace!r}, context={self.context!r})"

    def _check_context(self, context: str) -> None:
        try:
            contexts = k8s_client.kubeconfig_contexts(self.kubeconfig)
        except Exception as exc:  # the loader's own errors: unreadable or malformed kubeconfig
            if isinstance(exc, ImportError):
                raise
            raise ConfigurationError(
                "kubeconfig", self.kubeconfig, f"cannot be read ({exc})", "pass a valid kubeconfig file"
            ) from None
        if context not in contexts:
            raise ConfigurationError(
                "context", context, "not a context of the kubeconfig", f"pass one of {sorted(contexts)}"
            )

    @property
    def tuning_root(self) -> Path:
        """Where this session's tuning jobs are kept on this machine (their agents run here too):
        the ``tuning_root`` given, else ``<root setting>/.kubernetes/<context>/<namespace>`` (the
        root is ``LocalSession``'s, ``~/.smlaunch/jobs`` by default; the context is the
        kubeconfig's current one unless ``context`` names one, ``in-cluster`` inside a pod), so
        every session of the same cluster and namespace on this machine sees the same tuning jobs.
        Resolved on first use (it reads the kubeconfig)."""
        if self._tuning_root is None:
            context = k8s_client.context_name(self.kubeconfig, self.context)
            place = Path(self.settings.root, KUBERNETES_DIR, quote(context, safe=""), self.namespace)
            self._tuning_root = place
        return self._tuning_root

    def arguments(self) -> dict[str, Any]:
        """The session's arguments as plain JSON data, which ``KubernetesSession(**arguments)``
        turns back into the same session on this machine (a tuning job's detached agent does):
        the kubeconfig and context resolved to the ones in use now, the injected clients left
        out."""
        storage = self.storage
        stored: dict[str, Any] = (
            {"pvc": storage.claim_name, "mount_path": storage.mount_path}
            if isinstance(storage, PvcStorage)
            else {"s3": storage.model_dump(mode="json")}
        )
        kubeconfig = self.kubeconfig or k8s_client.default_kubeconfig()
        return {
            "namespace": self.namespace,
            "image": self.image,
            "image_pull_policy": self.image_pull_policy,
            "kubeconfig": None if kubeconfig is None else str(Path(kubeconfig).resolve()),
            "context": None if kubeconfig is None else k8s_client.context_name(kubeconfig, self.context),
            "service_account": self.service_account,
            "node_selector": dict(self.node_selector),
            "tolerations": [toleration.manifest() for toleration in self.tolerations],
            "image_pull_secrets": list(self.image_pull_secrets),
            "resources": self.resources if isinstance(self.resources, str) else dict(self.resources),
            "storage": stored,
            "host_network": self.host_network,
            "fuse": self.fuse,
            "default_bucket": self.default_bucket,
            "processes_per_host": self.processes_per_host,
            "stop_grace_seconds": self.stop_grace_seconds,
            "instance_count_quota": self.instance_count_quota,
            "tuning_root": str(self.tuning_root),
        }

    # --- the clients ----------------------------------------------------------------------------

    def api_client(self) -> Any:
        """The ``kubernetes.client.ApiClient`` of the cluster (created on first use)."""
        if self._api_client is None:
            self._api_client = k8s_client.api_client(self.kubeconfig, self.context)
        return self._api_client

    def s3_client(self) -> Any:
        """A boto3 S3 client for ``s3://`` code, inputs and outputs, at the storage's endpoint
        (created on first use)."""
        if self._s3_client is None:
            import boto3

            endpoint = self.storage.endpoint_url if isinstance(self.storage, S3Storage) else None
            self._s3_client = boto3.client("s3", endpoint_url=endpoint)
        return self._s3_client

    # --- TrainingSession ------------------------------------------------------------------------

    def expand_role(self, role: str | None) -> str:
        """The role as given (pods take their identity from ``service_account``), else a placeholder."""
        return role or PLACEHOLDER_ROLE_ARN

    def default_output_path(self) -> str:
        """``s3://<default_bucket>/``, or ``file://<mount_path>/jobs/`` on a PVC."""
        if isinstance(self.storage, PvcStorage):
            return Path(self.storage.mount_path, "jobs").as_uri() + "/"
        if self.default_bucket is None:
            raise ConfigurationError(
                "output_path",
                None,
                "a KubernetesSession with S3 storage has no default output location",
                "pass output_path='s3://bucket/prefix' to the estimator, or "
                "KubernetesSession(default_bucket=...)",
            )
        return f"s3://{self.default_bucket}/"

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        """``{}``: the session does not check who owns the buckets it stages code to."""
        return {}

    def stage_local_input(self, path: str | Path, job_name: str, channel: str) -> str:
        """On a PVC: the path's ``file://`` URI when it is under ``mount_path``. With S3 storage a
        local path cannot reach the pods: refused, naming the channel."""
        resolved = Path(path).expanduser().resolve()
        if isinstance(self.storage, PvcStorage) and resolved.is_relative_to(self.storage.mount_path):
            return resolved.as_uri()
        where = (
            f"outside the claim's mount_path {self.storage.mount_path}"
            if isinstance(self.storage, PvcStorage)
            else "on this machine, which the cluster's pods cannot read"
        )
        raise ConfigurationError(
            f"inputs[{channel!r}]",
            str(path),
            where,
            "upload it first (e.g. `aws s3 cp --recursive`) and pass its s3:// URI",
        )

    def backend(self) -> Backend:
        """The Kubernetes backend of this session (created once)."""
        if self._backend is None:
            from smlaunch.sdk.backends.kubernetes.backend import KubernetesBackend

            self._backend = KubernetesBackend(session=self)
        return self._backend


def _check_kubeconfig(value: object) -> str | None:
    fix = "pass the path of an existing kubeconfig file, or leave it unset ($KUBECONFIG, ~/.kube/config)"
    require_type("kubeconfig", value, (str, os.PathLike, type(None)), fix)
    if value is None:
        return None
    path = Path(value).expanduser()  # type: ignore[arg-type]
    if not path.is_file():
        raise ConfigurationError("kubeconfig", str(value), "no such file", fix)
    return str(path)


def _check_pull_secrets(value: object) -> tuple[str, ...]:
    fix = "pass a list of Secret names, e.g. ['registry-credentials']"
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigurationError("image_pull_secrets", value, "must be a list of Secret names", fix)
    return tuple(dns_name("image_pull_secrets", name, "registry-credentials", label=False) for name in value)
