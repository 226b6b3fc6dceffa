"""Where ``smlaunch serve`` runs its jobs: the platform flags, and a session per platform.

``local`` and ``docker`` are the emulated platform on the server's job store; ``slurm`` a
:class:`~smlaunch.sdk.sessions.slurm.SlurmSession` whose shared directory holds that store;
``kubernetes`` a :class:`~smlaunch.sdk.sessions.kubernetes.KubernetesSession` (the job's record is
its root ConfigMap on the cluster; the server keeps its own records on the store). Each flag's bad
value is refused, naming the flag, before the server listens.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from smlaunch.sdk.errors import ConfigurationError

PLATFORMS = ("local", "docker", "slurm", "kubernetes")
STORE = "store"
"""The key of the session on the server's job store, which every server has (the emulated
platform's, or Slurm's): it holds the server's records and answers for the store's jobs."""


def add_platform_flags(serve: argparse.ArgumentParser) -> None:
    """The Slurm and Kubernetes platforms' settings."""
    serve.add_argument(
        "--slurm-shared-dir",
        metavar="DIR",
        help="the Slurm platform's shared directory (SlurmSession(shared_dir=DIR)); the job store is "
        "then DIR/jobs",
    )
    serve.add_argument("--slurm-partition", metavar="NAME", help="the Slurm partition jobs are submitted to")
    k8s = serve.add_argument_group(
        "kubernetes platform", "KubernetesSession's arguments (docs/kubernetes.md)"
    )
    k8s.add_argument("--kubernetes-namespace", metavar="NAME", default="default", help="(default: default)")
    k8s.add_argument("--kubernetes-image", metavar="IMAGE", help="every pod's image (smlaunch's runtime)")
    k8s.add_argument(
        "--kubernetes-image-pull-policy",
        choices=("Always", "IfNotPresent", "Never"),
        default="IfNotPresent",
    )
    k8s.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, ~/.kube/config")
    k8s.add_argument("--kubernetes-context", metavar="NAME", help="a context of the kubeconfig")
    k8s.add_argument("--kubernetes-service-account", metavar="NAME")
    k8s.add_argument(
        "--kubernetes-node-selector", metavar="KEY=VALUE", action="append", default=[], help="(repeatable)"
    )
    k8s.add_argument(
        "--kubernetes-resources",
        choices=("catalog", "off"),
        default="catalog",
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
        help="pods on the node's network (single-node clusters without DNS)",
    )
    k8s.add_argument(
        "--kubernetes-fuse",
        action="store_true",
        help="FastFile as FUSE mounts: host pods run privileged (default: File semantics)",
    )


def sessions(args: argparse.Namespace, platforms: set[str]) -> dict[str, Any]:
    """A session per platform in ``platforms``, and :data:`STORE`'s, all on one job store (a Slurm
    cluster's: ``<shared dir>/jobs``)."""
    from smlaunch.sdk.sessions.local import LocalSession
    from smlaunch.sdk.sessions.slurm import SlurmSession

    store = args.store
    made: dict[str, Any] = {}
    if "slurm" in platforms or args.slurm_shared_dir:
        if not args.slurm_shared_dir:
            raise ConfigurationError(
                "slurm_shared_dir",
                None,
                "the Slurm platform needs its shared directory",
                "pass --slurm-shared-dir DIR",
            )
        slurm = SlurmSession(
            shared_dir=args.slurm_shared_dir,
            partition=args.slurm_partition,
            processes_per_host=args.processes_per_host,
        )
        if store is not None and Path(store).expanduser().resolve() != slurm.root:
            raise ConfigurationError(
                "store",
                store,
                f"the Slurm platform's job store is {slurm.root}; a server's platforms share one",
                "leave --store out with --slurm-shared-dir",
            )
        made["slurm"], store = slurm, slurm.root
    if "kubernetes" in platforms:
        made["kubernetes"] = kubernetes_session(args)
    for platform in platforms - {"slurm", "kubernetes"}:
        executor: Literal["process", "docker"] = "docker" if platform == "docker" else "process"
        made[platform] = LocalSession(
            root=store, executor=executor, processes_per_host=args.processes_per_host
        )
    # The store's session is the default platform's where it has the store (Slurm's describes a
    # pending job with Slurm's reason), else another's on it, else one of its own.
    on_store = [
        made[p] for p in (args.platform, "slurm", "local", "docker") if p in made and p != "kubernetes"
    ]
    made[STORE] = (
        on_store[0] if on_store else LocalSession(root=store, processes_per_host=args.processes_per_host)
    )
    return made


def kubernetes_session(args: argparse.Namespace) -> Any:
    """The ``--kubernetes-*`` flags as a ``KubernetesSession`` (its own checks name the argument;
    the flag is ``--kubernetes-<argument>``)."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession

    selector: dict[str, str] = {}
    for pair in args.kubernetes_node_selector:
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
    return KubernetesSession(
        namespace=args.kubernetes_namespace,
        image=args.kubernetes_image,
        image_pull_policy=args.kubernetes_image_pull_policy,
        kubeconfig=args.kubeconfig,
        context=args.kubernetes_context,
        service_account=args.kubernetes_service_account,
        node_selector=selector or None,
        resources=args.kubernetes_resources,
        storage=storage,
        host_network=args.kubernetes_host_network,
        fuse=args.kubernetes_fuse,
        processes_per_host=args.processes_per_host,
    )
