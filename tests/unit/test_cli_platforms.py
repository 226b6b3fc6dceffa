"""``smlaunch run`` and ``plan`` on Slurm and Kubernetes: ``--slurm SHARED_DIR`` and ``--kubernetes
NAMESPACE`` name the platform as ``list`` does, with the platform flags ``serve`` spells the same
way (:mod:`smlaunch.sdk.cli.platforms`); each platform's flag without its platform is refused, naming
it, before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smlaunch.sdk.backends.kubernetes.options import S3Storage
from smlaunch.sdk.cli.main import build_parser, main
from smlaunch.sdk.cli.run import session
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.sessions.kubernetes import KubernetesSession
from smlaunch.sdk.sessions.slurm import SlurmSession


def _session(*flags: str) -> object:
    return session(build_parser().parse_args(["run", "train.py", *flags]), dry_run=False)


def test_kubernetes_names_the_namespace_and_its_flags_are_the_sessions_arguments(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    made = _session(
        "--kubernetes",
        "ml-jobs",
        "--kubeconfig",
        str(kubeconfig),
        "--kubernetes-image",
        "registry.example.com/smlaunch-cpu:1.0",
        "--kubernetes-node-selector",
        "pool=gpu",
        "--kubernetes-s3-endpoint",
        "http://127.0.0.1:9000",
        "--kubernetes-host-network",
        "--processes-per-host",
        "2",
    )
    assert isinstance(made, KubernetesSession)
    assert (made.namespace, made.image, made.image_pull_policy) == (
        "ml-jobs",
        "registry.example.com/smlaunch-cpu:1.0",
        "IfNotPresent",
    )
    assert made.node_selector == {"pool": "gpu"} and made.resources == "catalog" and made.host_network
    assert made.storage == S3Storage(endpoint_url="http://127.0.0.1:9000")
    assert made.processes_per_host == 2


def test_slurm_names_the_shared_directory_and_the_partition(tmp_path: Path) -> None:
    made = _session("--slurm", str(tmp_path), "--slurm-partition", "debug")
    assert isinstance(made, SlurmSession)
    assert (Path(made.shared_dir), made.partition) == (tmp_path, "debug")


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        (["--kubernetes-image", "img:1"], "--kubernetes-image='img:1': applies to --kubernetes only"),
        (["--kubernetes-host-network"], "--kubernetes-host-network=True: applies to --kubernetes only"),
        (
            ["--slurm", "/shared", "--kubernetes-pvc", "data"],
            "--kubernetes-pvc='data': applies to --kubernetes",
        ),
        (["--slurm-partition", "gpu"], "--slurm-partition='gpu': applies to --slurm only"),
        (["--kubernetes", "ml-jobs", "--slurm-partition", "gpu"], "--slurm-partition='gpu'"),
        (["--slurm", "/shared", "--store", "/jobs"], "--store='/jobs': names this machine's job store"),
        (["--kubernetes", "ml-jobs", "--store", "/jobs"], "the job goes to --kubernetes"),
    ],
)
def test_a_platforms_flag_without_that_platform_is_refused_by_name(flags: list[str], refused: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        _session(*flags)
    assert refused in str(raised.value)


def test_a_refusal_exits_2_before_anything_is_staged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert main(["run", "train.py", "--kubernetes-image", "img:1", "--store", str(tmp_path / "jobs")]) == 2
    assert "Fix: add --kubernetes NAMESPACE, or drop it" in capsys.readouterr().err
    assert not (tmp_path / "jobs").exists()


def test_a_kubernetes_plan_needs_no_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    flags = ["--source-dir", "src", "--instance-count", "2", "--output-path", "s3://bucket/out"]
    assert main(["plan", "train.py", "--kubernetes", "ml-jobs", *flags]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["OutputDataConfig"]["S3OutputPath"] == "s3://bucket/out"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--kubernetes", ""], "error: --kubernetes='': not a Kubernetes name"),
        (["--kubernetes", "Bad_NS"], "error: --kubernetes='Bad_NS': not a Kubernetes name"),
        (
            ["--kubernetes", "ml-jobs", "--kubernetes-image", "a b"],
            "error: --kubernetes-image='a b': must be",
        ),
        (["--slurm", ""], "error: --slurm='': must be an absolute path"),
        (["--slurm", "/no/such/dir"], "Fix: pass --slurm '/path/every/node/mounts'"),
    ],
)
def test_a_bad_platform_value_is_named_by_its_flag(
    flags: list[str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Never run here instead: an empty namespace or directory is refused, not taken as 'no platform'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert main(["plan", "train.py", *flags]) == 2
    assert said in capsys.readouterr().err
