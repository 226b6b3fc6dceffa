"""Each host's private ``/opt/ml`` (``smlaunch/sdk/backends/emulated/executors/process/executor.py``), tried
in
real children.

The target is a directory of the test (``<tmp>/opt/ml``), so the machine's ``/opt`` is never touched;
the mount namespace, the tmpfs over the parent and the bind mounts are the real ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.executors.base import Host, LaunchContext
from smlaunch.sdk.backends.emulated.executors.docker.containers import FailedStart
from smlaunch.sdk.backends.emulated.executors.process.executor import PrivateOptMl, ProcessExecutor
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, ProcessSettings
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.request.spec import CheckpointConfig
from tests.functional._local_helpers import make_spec


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    opt = tmp_path / "opt"
    (opt / "conda").mkdir(parents=True)
    (opt / "conda" / "python").write_text("conda's\n")
    (opt / "notes.txt").write_text("a file\n")
    (opt / "latest").symlink_to("conda")
    tree = tmp_path / "hosts" / "algo-1"
    (tree / "input" / "data" / "train").mkdir(parents=True)
    (tree / "input" / "data" / "train" / "x.csv").write_text("1,2\n")
    (tree / "model").mkdir()
    return opt, tree


def _skip_without_namespaces(mounts: PrivateOptMl, tree: Path) -> None:
    why = mounts.unavailable(tree)
    if why is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")


def test_the_host_tree_is_at_the_target_and_the_parent_keeps_its_entries(tmp_path: Path) -> None:
    opt, tree = _tree(tmp_path)
    target = opt / "ml"
    mounts = PrivateOptMl(str(target))
    _skip_without_namespaces(mounts, tree)
    script = (
        f"id -u; ls {opt}; cat {target}/input/data/train/x.csv {opt}/conda/python {opt}/notes.txt "
        f"{opt}/latest/python; echo saved > {target}/model/model.pth"
    )
    done = subprocess.run(
        ["sh", "-c", script], preexec_fn=mounts.hook(tree), capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == str(os.getuid())  # the script keeps its own uid
    assert lines[1:5] == ["conda", "latest", "ml", "notes.txt"]
    assert lines[5:] == ["1,2", "conda's", "a file", "conda's"]
    assert (tree / "model" / "model.pth").read_text() == "saved\n"  # written through /opt/ml
    assert sorted(os.listdir(opt)) == ["conda", "latest", "notes.txt"]  # nothing reached the machine


def test_an_existing_target_is_covered_by_the_host_tree(tmp_path: Path) -> None:
    opt, tree = _tree(tmp_path)
    (opt / "ml" / "model").mkdir(parents=True)
    (opt / "ml" / "model" / "stale.pth").write_text("not this host's")
    mounts = PrivateOptMl(str(opt / "ml"))
    _skip_without_namespaces(mounts, tree)
    done = subprocess.run(
        ["ls", str(opt / "ml" / "model"), str(opt / "ml" / "input" / "data" / "train")],
        preexec_fn=mounts.hook(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [f"{opt}/ml/input/data/train:", "x.csv", f"{opt}/ml/model:"]
    assert (opt / "ml" / "model" / "stale.pth").exists()


def test_unavailable_names_the_reason(tmp_path: Path) -> None:
    _, tree = _tree(tmp_path)
    why = PrivateOptMl(str(tmp_path / "missing" / "ml")).unavailable(tree)
    assert why is not None and f"{tmp_path / 'missing'} does not exist" in why


def test_the_agent_says_once_when_hosts_cannot_have_their_own_opt_ml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PrivateOptMl, "unavailable", lambda self, tree: "user namespaces are disabled")
    said: list[str] = []
    context = LaunchContext(
        spec=None,
        settings=JobSettings(
            executor=ProcessSettings(python=sys.executable), processes_per_host=1, stop_grace_seconds=1
        ),
        job=None,
        hosts=[Host("algo-1", 0, tmp_path)],  # type: ignore[arg-type]
        grace=1.0,
        say=said.append,
    )
    executor = ProcessExecutor()
    assert executor._private_opt_ml(context, {}) is None and executor._private_opt_ml(context, {}) is None
    assert len(said) == 1 and "user namespaces are disabled" in said[0] and "SM_*" in said[0]


def test_the_job_store_shows_only_what_the_host_keeps(tmp_path: Path) -> None:
    opt, _ = _tree(tmp_path)
    store = tmp_path / "store"
    job, other = store / "job", store / "other"
    tree, code, scratch = job / "hosts" / "algo-1", job / "source", job / "scratch-x"
    for directory in (tree / "model", code, scratch, other / "hosts" / "algo-1" / "model"):
        directory.mkdir(parents=True)
    for record in (job / "state.json", other / "state.json", code / "sourcedir.tar.gz"):
        record.write_text("{}")
    mounts = PrivateOptMl(str(opt / "ml"), str(store), [str(job / "hosts"), str(scratch)], [str(code)])
    _skip_without_namespaces(mounts, tree)
    script = (
        f"ls -A {store} {job}; cat {code}/sourcedir.tar.gz; echo; echo saved > {opt}/ml/model/m.pth; "
        f"echo shared > {scratch}/s; for f in {job}/state.json {other}/state.json {job}/stop "
        f"{code}/x; do (echo x > $f) 2>/dev/null && echo wrote $f || echo refused $f; done"
    )
    done = subprocess.run(
        ["sh", "-c", script], preexec_fn=mounts.hook(tree), capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        f"{store}:",
        "job",
        "",
        f"{job}:",
        "hosts",
        "scratch-x",
        "source",
        "{}",
        f"refused {job}/state.json",
        f"refused {other}/state.json",
        f"refused {job}/stop",
        f"refused {code}/x",
    ]
    assert (tree / "model" / "m.pth").read_text() == "saved\n" and (scratch / "s").read_text() == "shared\n"
    assert (job / "state.json").read_text() == "{}" and not (job / "stop").exists()
    assert sorted(os.listdir(store)) == ["job", "other"]  # nothing changed on the machine


@pytest.mark.parametrize(
    ("local_path", "why"),
    [("fresh/ckpt", "user namespaces are disabled"), ("file/ckpt", "cannot create")],
)
def test_hosts_needing_a_checkpoint_path_outside_opt_ml_fail_at_start_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_path: str, why: str
) -> None:
    """Never started sharing the machine's directory: each host fails with the reason; a mount
    point the agent could make is made (and said)."""
    monkeypatch.setattr(PrivateOptMl, "unavailable", lambda self, tree: "user namespaces are disabled")
    (tmp_path / "file").write_text("")
    spec = make_spec(tmp_path, "outside", "print(1)").model_copy(
        update={
            "CheckpointConfig": CheckpointConfig(
                S3Uri=(tmp_path / "synced").as_uri(), LocalPath=str(tmp_path / local_path)
            )
        }
    )
    job = JobDir(tmp_path / "jobs" / "outside")
    hosts = [Host(name, i, job.host_base(name)) for i, name in enumerate(("algo-1", "algo-2"))]
    for host in hosts:
        layout.write_host_tree(spec, host.base, host.name, ["algo-1", "algo-2"])
    said: list[str] = []
    settings = JobSettings(
        executor=ProcessSettings(python=sys.executable), processes_per_host=1, stop_grace_seconds=1
    )
    context = LaunchContext(spec, settings, job, hosts, 1.0, said.append)
    ProcessExecutor().launch(context)
    for host in hosts:
        assert isinstance(host.proc, FailedStart) and why in (host.proc.note or "")
    created = [line for line in said if "as a mount point for checkpoint_local_path" in line]
    assert len(created) == (local_path == "fresh/ckpt")
    assert (tmp_path / "fresh" / "ckpt").is_dir() == (local_path == "fresh/ckpt")
