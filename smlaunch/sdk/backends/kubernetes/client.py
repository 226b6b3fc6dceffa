"""The official ``kubernetes`` client for a session, and the API server's errors as ours.

:func:`api_client` resolves the connection as ``kubectl`` does: an explicit ``kubeconfig`` file
(and ``context``), else ``$KUBECONFIG`` / ``~/.kube/config``, else the in-cluster configuration
of a pod (its service account's token and the ``KUBERNETES_SERVICE_*`` variables).
:func:`api_error` turns an ``ApiException`` into a :class:`KubernetesApiError` naming the session
or estimator argument the API server's field belongs to. The ``kubernetes`` package is optional
(``pip install 'smlaunch[kubernetes]'``) and imported only here, on first use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError, MissingExtraError

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER = "in-cluster"
"""The context name of the in-cluster configuration (a pod's service account), which has none."""

# The API server's field paths (``spec.containers[0].resources.limits``) -> the argument that set them.
FIELD_ARGUMENTS = (
    ("spec.nodeSelector", "node_selector"),
    ("spec.tolerations", "tolerations"),
    ("spec.imagePullSecrets", "image_pull_secrets"),
    ("spec.serviceAccountName", "service_account"),
    ("spec.serviceAccount", "service_account"),
    ("spec.containers[0].resources", "resources"),
    ("spec.containers[0].image", "image"),
    ("spec.volumes", "storage"),
    ("spec.securityContext", "storage"),  # PVC storage runs the pods as the caller
    ("metadata.namespace", "namespace"),
    ("metadata.name", "job_name"),
)


class KubernetesApiError(ConfigurationError):
    """The API server refused a request; ``field`` is the argument its message is about,
    ``api_field`` the API's own path (``spec.nodeSelector``) when it named one."""

    def __init__(
        self, field: str, value: object, problem: str, fix: str, api_field: str | None = None
    ) -> None:
        self.api_field = api_field
        super().__init__(field, value, problem, fix)


def kubernetes_module() -> Any:
    """``kubernetes``, or :class:`MissingExtraError` naming the extra to install."""
    try:
        import kubernetes
    except ImportError as exc:
        raise MissingExtraError("KubernetesSession", "kubernetes", "kubernetes") from exc
    return kubernetes


def kubeconfig_contexts(path: str | None) -> list[str]:
    """The contexts of the kubeconfig at ``path`` (``None``: ``$KUBECONFIG`` / ``~/.kube/config``)."""
    config = kubernetes_module().config
    contexts, _active = config.list_kube_config_contexts(config_file=path)
    return [context["name"] for context in contexts]


def context_name(kubeconfig: str | None, context: str | None) -> str:
    """The name of the cluster context a session with ``kubeconfig`` and ``context`` talks to:
    ``context``, else the kubeconfig's current context, else ``in-cluster`` inside a pod (where
    :func:`api_client` would use the in-cluster configuration)."""
    if context is not None:
        return context
    path = kubeconfig or default_kubeconfig()
    if path is None:
        if not in_cluster():
            raise _no_configuration()
        return IN_CLUSTER
    config = kubernetes_module().config
    try:
        _contexts, active = config.list_kube_config_contexts(config_file=path)
    except Exception as exc:  # the loader's own errors: an unreadable or malformed kubeconfig
        raise ConfigurationError(
            "kubeconfig", path, f"cannot be read ({exc})", "pass a valid kubeconfig file"
        ) from None
    if not active:
        raise ConfigurationError(
            "context",
            None,
            f"the kubeconfig {path} has no current context",
            "pass KubernetesSession(context=...) (`kubectl config get-contexts`)",
        )
    return str(active["name"])


def default_kubeconfig() -> str | None:
    """The kubeconfig ``kubectl`` would read (its first file), or ``None`` when there is none."""
    env = os.environ.get("KUBECONFIG")
    candidate = env.split(os.pathsep)[0] if env else str(Path("~/.kube/config").expanduser())
    return candidate if Path(candidate).is_file() else None


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """An ``ApiClient`` for the cluster (see the module docstring); a missing configuration is a
    :class:`ConfigurationError` naming ``kubeconfig``."""
    kubernetes = kubernetes_module()
    path = kubeconfig or default_kubeconfig()
    if path is not None:
        return kubernetes.config.new_client_from_config(config_file=path, context=context)
    if in_cluster():
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_incluster_config(client_configuration=configuration)
        return kubernetes.client.ApiClient(configuration)
    raise _no_configuration()


def in_cluster() -> bool:
    """Whether this process runs in a pod with a service account token (the in-cluster
    configuration)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.is_file()


def _no_configuration() -> ConfigurationError:
    return ConfigurationError(
        "kubeconfig",
        None,
        "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not inside a pod",
        "pass KubernetesSession(kubeconfig='/path/to/kubeconfig'), or set KUBECONFIG",
    )


def api_error(exc: Any, action: str, value: object = None) -> KubernetesApiError:
    """``exc`` (an ``ApiException`` from ``action``, e.g. "create pod algo-1") as our error: the
    argument behind the first field the API server names, its message, and a fix."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or exc.reason or "refused"
    causes = (body.get("details") or {}).get("causes") or []
    api_field = next((cause.get("field") for cause in causes if cause.get("field")), None)
    status = getattr(exc, "status", None)
    field = "namespace" if status in (401, 403) else "KubernetesSession"
    for prefix, argument in FIELD_ARGUMENTS:
        if api_field and api_field.startswith(prefix):
            field = argument
            break
    if status == 404 and "namespaces" in message:
        field = "namespace"
    fixes = {
        401: "check the kubeconfig's credentials (they were refused)",
        403: "ask the cluster's admin for a Role in this namespace that grants it, or use another namespace",
        404: "create it first, or pass another name",
        409: "pass another job_name (an object of this name exists)",
        422: f"fix {field}: the API server says what it accepts",
    }
    problem = f"the API server refused to {action}: {message}"
    return KubernetesApiError(field, value, problem, fixes.get(status or 0, "see the message"), api_field)
