"""``smlaunch serve``'s platform flags made into sessions (:mod:`smlaunch.serve.platforms`): the
``--kubernetes-*`` flags as ``KubernetesSession``'s arguments, each bad value refused naming its
flag, and the store's session every server has."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch.sdk.backends.kubernetes.options import PvcStorage, S3Storage
from smlaunch.sdk.cli.main import build_parser
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.sessions.kubernetes import KubernetesSession
from smlaunch.sdk.sessions.local import LocalSession
from smlaunch.serve.platforms import STORE, sessions


def made(tmp_path: Path, *flags: str) -> dict[str, object]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = build_parser().parse_args(
        ["serve", "--store", str(tmp_path / "store"), "--kubeconfig", str(kubeconfig), *flags]
    )
    mapped = {pair.partition("=")[2] for pair in args.instance_type_platform}
    return sessions(args, {args.platform, *mapped})


def test_the_kubernetes_flags_are_the_sessions_arguments(tmp_path: Path) -> None:
    found = made(
        tmp_path,
        "--platform",
        "kubernetes",
        "--kubernetes-namespace",
        "ml-jobs",
        "--kubernetes-image",
        "registry.example.com/smlaunch-cpu:1.0",
        "--kubernetes-image-pull-policy",
        "Always",
        "--kubernetes-node-selector",
        "pool=gpu",
        "--kubernetes-resources",
        "off",
        "--kubernetes-s3-endpoint",
        "http://minio:9000",
        "--kubernetes-credentials-secret",
        "aws",
        "--kubernetes-host-network",
        "--processes-per-host",
        "2",
    )
    session = found["kubernetes"]
    assert isinstance(session, KubernetesSession) and isinstance(found[STORE], LocalSession)
    assert found[STORE].root == tmp_path / "store"  # type: ignore[attr-defined]
    assert (session.namespace, session.image, session.image_pull_policy) == (
        "ml-jobs",
        "registry.example.com/smlaunch-cpu:1.0",
        "Always",
    )
    assert session.node_selector == {"pool": "gpu"} and session.resources == "off" and session.host_network
    assert session.storage == S3Storage(endpoint_url="http://minio:9000", credentials_secret="aws")
    assert session.processes_per_host == 2


def test_a_claim_replaces_s3(tmp_path: Path) -> None:
    session = made(
        tmp_path, "--platform", "kubernetes", "--kubernetes-pvc", "data", "--kubernetes-mount-path", "/mnt/d"
    )
    assert session["kubernetes"].storage == PvcStorage(claim_name="data", mount_path="/mnt/d")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--kubernetes-node-selector", "pool"], "kubernetes_node_selector='pool'"),
        (["--kubernetes-pvc", "data", "--kubernetes-s3-endpoint", "http://minio:9000"], "kubernetes_pvc"),
        (["--kubernetes-mount-path", "/mnt/d"], "kubernetes_mount_path"),
        (["--kubernetes-namespace", "Not_A_Name"], "namespace"),
        (["--kubernetes-s3-endpoint", "minio:9000"], "storage.s3.endpoint_url"),
    ],
)
def test_bad_kubernetes_flags_are_named(tmp_path: Path, flags: list[str], names: str) -> None:
    with pytest.raises(ConfigurationError, match=names):
        made(tmp_path, "--platform", "kubernetes", *flags)


def test_no_kubernetes_session_unless_a_platform_asks(tmp_path: Path) -> None:
    found = made(tmp_path, "--instance-type-platform", "ml.p4d.24xlarge=docker")
    assert sorted(found) == ["docker", "local", STORE] and found[STORE] is found["local"]
