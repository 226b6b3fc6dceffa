"""The Slurm and Kubernetes platforms' settings as flags, one spelling for every command that starts
jobs: ``smlaunch run`` and ``plan`` (the platform named by ``--slurm SHARED_DIR`` or ``--kubernetes
NAMESPACE``, as ``list`` names it) and ``smlaunch serve`` (``--slurm-shared-dir``,
``--kubernetes-namespace``).

Each ``--kubernetes-<argument>`` flag is ``KubernetesSession(<argument>=...)``, whose own checks name
the argument; a flag left out leaves the session's default. Nothing here talks to a cluster.
"""

from __future__ import annotations

import argparse
from typing import Any

from smlaunch.sdk.errors import ConfigurationError

KUBERNETES_FLAGS = {
    "kubernetes_image": "image",
    "kubernetes_image_pull_policy": "image_pull_policy",
    "kubeconfig": "kubeconfig",
    "kubernetes_context": "context",
    "kubernetes_service_account": "service_account",
    "kubernetes_resources": "resources",
}
"""Flags (their ``dest``) passed to ``KubernetesSession`` as they are, and the argument each is."""
KUBERNETES_STORAGE_FLAGS = (
    "kubernetes_node_selector",
    "kubernetes_s3_endpoint",
    "kubernetes_credentials_secret",
    "kubernetes_pvc",
    "kubernetes_mount_path",
    "kubernetes_host_network",
    "kubernetes_fuse",
)
"""The other ``--kubernetes-*`` flags (their ``dest``), which :func:`kubernetes_session` maps."""


def add_slurm_partition_flag(parser: argparse.ArgumentParser) -> None:
    """``--slurm-partition``: ``SlurmSession(partition=...)``."""
    parser.add_argument("--slurm-partition", metavar="NAME", help="the Slurm partition jobs are submitted to")


def add_kubernetes_flags(parser: argparse.ArgumentParser, namespace: bool) -> None:
    """The ``--kubernetes-*`` flags in a group of their own; ``--kubernetes-namespace`` too where the
    command names the namespace no other way (``serve``)."""
    k8s = parser.add_argument_group(
        "kubernetes platform", "KubernetesSession's arguments (docs/kubernetes.md)"
    )
    if namespace:
        k8s.add_argument(
            "--kubernetes-namespace", metavar="NAME", default="default", help="(default: default)"
        )
    k8s.add_argument("--kubernetes-image", metavar="IMAGE", help="every pod's image (smlaunch's runtime)")
    k8s.add_argument(
        "--kubernetes-image-pull-policy",
        choices=("Always", "IfNotPresent", "Never"),
        help="(default: IfNotPresent)",
    )
    k8s.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, ~/.kube/config")
    k8s.add_argument("--kubernetes-context", metavar="NAME", help="a context of the kubeconfig")
    k8s.add_argument("--kubernetes-service-account", metavar="NAME")
    k8s.add_argument("--kubernetes-node-selector", metavar="KEY=VALUE", action="append", help="(repeatable)")
    k8s.add_argument(
        "--kubernetes-resources",
        choices=("catalog", "off"),
        help="each host pod's requests: the instance type's (default) or none",
    )
    k8s.add_argument(
        "--kubernetes-s3-endpoint", metavar="URL", help="the S3 API the pods read and write (MinIO...)"
    )
    k8s.add_argument(
        "--kubernetes-credentials-secret", metavar="NAME", help="a Secret of AWS_* keys the pods read S3 with"
    )
    k8s.add_argument("--kubernetes-pvc", metavar="CLAIM", help="a claim every pod mounts instead of S3")
    k8s.add_argument("--kubernetes-mount-path", metavar="DIR", help="where (default /mnt/smlaunch)")
    k8s.add_argument(
        "--kubernetes-host-network",
        action="store_true",
        default=None,
        help="pods on the node's network (single-node clusters without DNS)",
    )
    k8s.add_argument(
        "--kubernetes-fuse",
        action="store_true",
        default=None,
        help="FastFile as FUSE mounts: host pods run privileged (default: File semantics)",
    )


def given_kubernetes_flags(args: argparse.Namespace) -> list[str]:
    """The ``--kubernetes-*`` flags given on the command line, spelled as typed."""
    dests = [*KUBERNETES_FLAGS, *KUBERNETES_STORAGE_FLAGS]
    return ["--" + dest.replace("_", "-") for dest in dests if getattr(args, dest, None) is not None]


def kubernetes_session(args: argparse.Namespace, namespace: str) -> Any:
    """The ``--kubernetes-*`` flags as a ``KubernetesSession`` on ``namespace``."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession

    selector: dict[str, str] = {}
    for pair in args.kubernetes_node_selector or []:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ConfigurationError(
                "kubernetes_node_selector",
                pair,
                "not KEY=VALUE",
                "pass --kubernetes-node-selector nvidia.com/gpu.present=true",
            )
        selector[key] = value
    storage: dict[str, Any] | None = None
    if args.kubernetes_pvc:
        if args.kubernetes_s3_endpoint or args.kubernetes_credentials_secret:
            raise ConfigurationError(
                "kubernetes_pvc",
                args.kubernetes_pvc,
                "a claim replaces S3: --kubernetes-s3-endpoint and --kubernetes-credentials-secret "
                "do not apply",
                "pass either --kubernetes-pvc or the S3 flags",
            )
        storage = {"pvc": args.kubernetes_pvc}
        if args.kubernetes_mount_path:
            storage["mount_path"] = args.kubernetes_mount_path
    elif args.kubernetes_mount_path:
        raise ConfigurationError(
            "kubernetes_mount_path",
            args.kubernetes_mount_path,
            "is the claim's mount path",
            "pass --kubernetes-pvc CLAIM with it, or leave it out",
        )
    elif args.kubernetes_s3_endpoint or args.kubernetes_credentials_secret:
        s3 = {
            "endpoint_url": args.kubernetes_s3_endpoint,
            "credentials_secret": args.kubernetes_credentials_secret,
        }
        storage = {"s3": {k: v for k, v in s3.items() if v is not None}}
    passed = {argument: getattr(args, dest) for dest, argument in KUBERNETES_FLAGS.items()}
    return KubernetesSession(
        namespace=namespace,
        node_selector=selector or None,
        storage=storage,
        host_network=bool(args.kubernetes_host_network),
        fuse=bool(args.kubernetes_fuse),
        processes_per_host=args.processes_per_host,
        **{argument: value for argument, value in passed.items() if value is not None},
    )
