"""``KubernetesSession``'s options as plain data, each parsed with a field/value/fix error.

Pure: no client, no I/O. :func:`parse_resources`, :func:`parse_tolerations`,
:func:`parse_node_selector`, :func:`parse_storage` and :func:`dns_name` take what the user passed
and return frozen values (or raise :class:`~smlaunch.sdk.errors.ConfigurationError` naming the
argument); :func:`catalog_resources` is what an instance type asks of a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.request.catalog import InstanceType

ResourcesMode = Literal["catalog", "off"]
GPU_RESOURCE = "nvidia.com/gpu"
NEURON_RESOURCE = "aws.amazon.com/neuron"
EFA_RESOURCE = "vpc.amazonaws.com/efa"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[mkMGTPE])?")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def dns_name(field: str, value: object, example: str, label: bool = True) -> str:
    """``value`` when it is a DNS-1123 label (namespaces, Services) or, with ``label=False``, a
    subdomain (most object names); else a :class:`ConfigurationError` naming ``field``."""
    fix = f"pass a lower-case name of letters, digits and '-', e.g. {example!r}"
    require_type(field, value, str, fix)
    pattern, limit = (_DNS_LABEL, 63) if label else (_DNS_SUBDOMAIN, 253)
    if not pattern.fullmatch(str(value)) or len(str(value)) > limit:
        kind = "DNS-1123 label" if label else "DNS-1123 subdomain"
        raise ConfigurationError(
            field, value, f"not a Kubernetes name (a {kind}, at most {limit} characters)", fix
        )
    return str(value)


def check_quantity(field: str, value: object) -> str:
    """A Kubernetes quantity (``"2"``, ``"500m"``, ``"16Gi"``); an int is taken as its string."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _QUANTITY.fullmatch(text):
        raise ConfigurationError(
            field, value, "not a Kubernetes quantity", "pass e.g. 2, '500m', '16Gi' or '1.5'"
        )
    return text


def parse_resources(value: object) -> ResourcesMode | dict[str, str]:
    """``"catalog"`` (default: each host asks for its instance type's CPUs, memory, GPUs, Neuron
    devices and EFA), ``"off"`` (asks for nothing: small test clusters) or an explicit mapping of
    resource name to quantity (``{"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}``)."""
    fix = "pass resources='catalog', resources='off' or a mapping such as {'cpu': '4', 'memory': '16Gi'}"
    if value is None:
        return "catalog"
    if isinstance(value, str):
        if value not in ("catalog", "off"):
            raise ConfigurationError("resources", value, "unknown mode", fix)
        return value  # type: ignore[return-value]
    if not isinstance(value, Mapping) or not value:
        raise ConfigurationError("resources", value, "must be 'catalog', 'off' or a non-empty mapping", fix)
    explicit = {}
    for name, quantity in value.items():
        if not isinstance(name, str) or not _QUALIFIED_NAME.fullmatch(name):
            raise ConfigurationError("resources", value, f"{name!r} is not a resource name", fix)
        explicit[name] = check_quantity(f"resources[{name!r}]", quantity)
    return explicit


def catalog_resources(instance: InstanceType) -> dict[str, str]:
    """What one host of ``instance`` asks of its node (requests equal limits): its vCPUs, memory,
    NVIDIA GPUs, Neuron devices and one EFA device where it has EFA. A fact the catalog lacks is
    a :class:`ConfigurationError` (the fix: ``resources='off'`` or explicit ones)."""
    if not instance.known or instance.vcpus is None or instance.memory_gib is None:
        raise ConfigurationError(
            "instance_type",
            instance.name,
            "smlaunch's instance catalog does not know its CPUs and memory, so resources='catalog' "
            "cannot size its pods",
            "pass KubernetesSession(resources={'cpu': ..., 'memory': ...}) or resources='off'",
        )
    found = {"cpu": str(instance.vcpus), "memory": f"{int(instance.memory_gib * 1024)}Mi"}
    if instance.is_gpu and instance.gpus:
        found[GPU_RESOURCE] = str(instance.gpus)
    if instance.is_neuron and instance.accelerator_count:
        found[NEURON_RESOURCE] = str(instance.accelerator_count)
    if instance.efa:
        found[EFA_RESOURCE] = "1"
    return found


class Toleration(BaseModel):
    """One pod toleration, as Kubernetes spells it (``key``, ``operator``, ``value``, ``effect``,
    ``toleration_seconds``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def manifest(self) -> dict[str, object]:
        """The toleration in a pod's ``spec.tolerations``."""
        names = {"key": "key", "operator": "operator", "value": "value", "effect": "effect"}
        body: dict[str, object] = {wire: getattr(self, attr) for attr, wire in names.items()}
        body["tolerationSeconds"] = self.toleration_seconds
        return {k: v for k, v in body.items() if v is not None}


_TOLERATION_KEYS = {"tolerationSeconds": "toleration_seconds"}


def parse_tolerations(value: object) -> tuple[Toleration, ...]:
    """A list of tolerations, each a :class:`Toleration` or a dict in Kubernetes' own spelling."""
    fix = "pass a list such as [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]"
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise ConfigurationError("tolerations", value, "must be a list of tolerations", fix)
    parsed = []
    for index, item in enumerate(value):
        field = f"tolerations[{index}]"
        if isinstance(item, Toleration):
            parsed.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ConfigurationError(field, item, "must be a dict or a Toleration", fix)
        unknown = sorted(set(item) - {"key", "operator", "value", "effect", "tolerationSeconds"})
        if unknown:
            raise ConfigurationError(field, item, f"unknown key(s) {unknown}", fix)
        operator, effect = item.get("operator", "Equal"), item.get("effect")
        if operator not in ("Equal", "Exists"):
            raise ConfigurationError(f"{field}.operator", operator, "must be 'Equal' or 'Exists'", fix)
        if effect is not None and effect not in _EFFECTS:
            raise ConfigurationError(f"{field}.effect", effect, f"must be one of {list(_EFFECTS)}", fix)
        if operator == "Exists" and item.get("value"):
            raise ConfigurationError(f"{field}.value", item["value"], "must be empty with 'Exists'", fix)
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            raise ConfigurationError(f"{field}.tolerationSeconds", seconds, "must be an integer", fix)
        parsed.append(Toleration(**{_TOLERATION_KEYS.get(str(k), str(k)): v for k, v in item.items()}))
    return tuple(parsed)


def parse_node_selector(value: object) -> dict[str, str]:
    """Node labels every pod of the job requires (``{"node.kubernetes.io/instance-type": "p4d"}``)."""
    fix = "pass a dict of node label to value, e.g. {'nvidia.com/gpu.present': 'true'}"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError("node_selector", value, "must be a dict", fix)
    for key, label in value.items():
        if not isinstance(key, str) or not _QUALIFIED_NAME.fullmatch(key):
            raise ConfigurationError("node_selector", value, f"{key!r} is not a label name", fix)
        if not isinstance(label, str) or not _LABEL_VALUE.fullmatch(label) or len(label) > 63:
            raise ConfigurationError(f"node_selector[{key!r}]", label, "not a label value", fix)
    return dict(value)


def parse_fuse(value: object) -> bool | str:
    """``False`` (FastFile with File semantics), ``True`` (privileged host pods, which get
    ``/dev/fuse`` and ``CAP_SYS_ADMIN``) or the extended resource a ``/dev/fuse`` device plugin
    offers (``"smarter-devices/fuse"``): each host pod asks for one and gets ``CAP_SYS_ADMIN`` only."""
    fix = (
        "pass fuse=True (privileged host pods), fuse=False, or the resource name of a /dev/fuse device "
        "plugin, e.g. fuse='smarter-devices/fuse'"
    )
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ConfigurationError("fuse", value, "must be True, False or a resource name", fix)
    if "/" not in value or not _QUALIFIED_NAME.fullmatch(value) or value.startswith("kubernetes.io/"):
        raise ConfigurationError("fuse", value, "not an extended resource name (a domain, '/', a name)", fix)
    return value


class S3Storage(BaseModel):
    """Code, data and artifacts in S3 (the default). ``endpoint_url``: another S3 endpoint (MinIO,
    a moto server) the pods use; ``credentials_secret``: a Secret in the job's namespace whose keys
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ...) become every pod's environment (else the
    pods use their own: IRSA, an instance profile). Secrets are referenced, never copied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint_url: str | None = None
    credentials_secret: str | None = None


class PvcStorage(BaseModel):
    """Code, data and artifacts on a PersistentVolumeClaim every pod mounts at ``mount_path``:
    ``file://`` URIs under ``mount_path`` (which the notebook must see at the same path)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    claim_name: str
    mount_path: str = "/mnt/smlaunch"


Storage = S3Storage | PvcStorage


def parse_storage(value: object) -> Storage:
    """``None`` or ``"s3"``: :class:`S3Storage`; ``{"s3": {...}}``, ``{"pvc": "claim",
    "mount_path": ...}`` or either model."""
    fix = "pass storage='s3', {'s3': {'endpoint_url': 'http://minio:9000'}} or {'pvc': 'claim-name'}"
    if value is None or value == "s3":
        return S3Storage()
    if isinstance(value, (S3Storage, PvcStorage)):
        storage: Storage = value
    elif isinstance(value, Mapping) and set(value) == {"s3"}:
        options = value["s3"] or {}
        if not isinstance(options, Mapping) or set(options) - {"endpoint_url", "credentials_secret"}:
            raise ConfigurationError("storage", value, "s3 takes endpoint_url and credentials_secret", fix)
        storage = S3Storage(**options)
    elif isinstance(value, Mapping) and "pvc" in value and set(value) <= {"pvc", "mount_path"}:
        claim = dns_name("storage.pvc", value["pvc"], "training-data", label=False)
        mount_path = value.get("mount_path", "/mnt/smlaunch")
        require_type("storage.mount_path", mount_path, str, "pass an absolute path, e.g. '/mnt/smlaunch'")
        storage = PvcStorage(claim_name=claim, mount_path=mount_path)
    else:
        raise ConfigurationError("storage", value, "unknown storage", fix)
    if isinstance(storage, PvcStorage):
        dns_name("storage.pvc", storage.claim_name, "training-data", label=False)
        if not storage.mount_path.startswith("/") or storage.mount_path.rstrip("/") in ("", "/opt/ml"):
            raise ConfigurationError(
                "storage.mount_path", storage.mount_path, "must be an absolute path outside /opt/ml", fix
            )
    else:
        if storage.endpoint_url is not None and not re.fullmatch(
            r"https?://[^\s/]+(/\S*)?", storage.endpoint_url
        ):
            raise ConfigurationError(
                "storage.s3.endpoint_url",
                storage.endpoint_url,
                "not an http(s) URL",
                "pass e.g. 'http://minio:9000'",
            )
        if storage.credentials_secret is not None:
            dns_name(
                "storage.s3.credentials_secret", storage.credentials_secret, "aws-credentials", label=False
            )
    return storage
