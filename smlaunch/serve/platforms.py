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

from smlaunch.sdk.cli.platforms import add_kubernetes_flags, add_slurm_partition_flag, kubernetes_session
from smlaunch.sdk.errors import ConfigurationError

PLATFORMS = ("local", "docker", "slurm", "kubernetes")
STORE = "store"
"""The key of the session on the server's job store, which every server has (the emulated
platform's, or Slurm's): it holds the server's records and answers for the store's jobs."""


def add_platform_flags(serve: argparse.ArgumentParser) -> None:
    """The Slurm and Kubernetes platforms' settings (:mod:`smlaunch.sdk.cli.platforms`)."""
    serve.add_argument(
        "--slurm-shared-dir",
        metavar="DIR",
        help="the Slurm platform's shared directory (SlurmSession(shared_dir=DIR)); the job store is "
        "then DIR/jobs",
    )
    add_slurm_partition_flag(serve)
    add_kubernetes_flags(serve, namespace=True)


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
        made["kubernetes"] = kubernetes_session(args, args.kubernetes_namespace)
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
