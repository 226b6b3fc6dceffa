"""Each host's private ``/opt/ml`` (``estimator/backends/local/executors/process.py``), tried in
real children.

The target is a directory of the test (``<tmp>/opt/ml``), so the machine's ``/opt`` is never touched;
the mount namespace, the tmpfs over the parent and the bind mounts are the real ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from estimator.backends.local.executors.base import Host, LaunchContext
from estimator.backends.local.executors.process import PrivateOptMl, ProcessExecutor


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
        settings={},
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
