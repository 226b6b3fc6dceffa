"""A host pod's tree and results through the agent's tree server, on 127.0.0.1 (no cluster)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from smlaunch.sdk.backends.kubernetes.host import (
    TOKEN_HEADER,
    TREE_TOKEN_ENV,
    fetch_tree,
    listen_for_signals,
    send_results,
)
from smlaunch.sdk.backends.kubernetes.trees import TreeServer

TOKEN = "job-token"


@pytest.fixture(autouse=True)
def pod_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host pod's token, as the kubelet sets it from the job's Secret."""
    monkeypatch.setenv(TREE_TOKEN_ENV, TOKEN)


def test_a_host_gets_its_tree_with_data_and_hands_back_model_and_output(tmp_path: Path) -> None:
    data = tmp_path / "cache" / "train.csv"
    data.parent.mkdir()
    data.write_text("1,2\n")
    tree = tmp_path / "agent" / "algo-1"
    (tree / "input" / "config").mkdir(parents=True)
    (tree / "input" / "config" / "resourceconfig.json").write_text('{"current_host": "algo-1"}')
    (tree / "input" / "data" / "train").mkdir(parents=True)
    (tree / "input" / "data" / "train" / "train.csv").symlink_to(data)  # a channel view: a link
    (tree / "model").mkdir()
    server = TreeServer(TOKEN, "127.0.0.1")
    try:
        server.serve({"algo-1": tree})
        url = server.url("127.0.0.1", "algo-1")
        pod = tmp_path / "pod"
        pod.mkdir()
        fetch_tree(url, pod)
        copied = pod / "input" / "data" / "train" / "train.csv"
        assert copied.read_text() == "1,2\n" and not copied.is_symlink()  # the data, not the agent's path
        assert (pod / "input" / "config" / "resourceconfig.json").read_text() == '{"current_host": "algo-1"}'

        (pod / "model" / "model.pt").write_bytes(b"weights")
        (pod / "output").mkdir()
        (pod / "output" / "failure").write_text("none")
        send_results(url, pod)
        assert (tree / "model" / "model.pt").read_bytes() == b"weights"
        assert (tree / "output" / "failure").read_text() == "none"
        assert server.received == {"algo-1"}

        assert TOKEN not in url  # never in a URL, so never in a pod spec or a log line
        for wrong, token in ((url, "guess"), (url, None), (url.replace("algo-1", "algo-9"), TOKEN)):
            request = urllib.request.Request(f"{wrong}/tree.tar")
            if token is not None:
                request.add_header(TOKEN_HEADER, token)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 404
    finally:
        server.close()


def test_a_tree_server_without_the_jobs_token_is_refused() -> None:
    with pytest.raises(ValueError, match="SMLAUNCH_K8S_TREE_TOKEN"):
        TreeServer("", "127.0.0.1")


def test_the_checkpoint_directory_comes_back_as_the_host_left_it(tmp_path: Path) -> None:
    tree = tmp_path / "agent" / "algo-1"
    (tree / "checkpoints").mkdir(parents=True)
    (tree / "checkpoints" / "restored.pt").write_bytes(b"old")  # restored before the host started
    (tree / "checkpoints" / "pruned.pt").write_bytes(b"older")
    server = TreeServer(TOKEN, "127.0.0.1")
    try:
        server.serve({"algo-1": tree}, checkpoints="checkpoints")
        url = server.url("127.0.0.1", "algo-1")
        pod = tmp_path / "pod"
        pod.mkdir()
        fetch_tree(url, pod)
        restored_at = (tree / "checkpoints" / "restored.pt").stat().st_mtime
        (pod / "checkpoints" / "pruned.pt").unlink()  # the script pruned it
        (pod / "checkpoints" / "step-3").mkdir()
        (pod / "checkpoints" / "step-3" / "model.pt").write_bytes(b"new")
        (pod / "model").mkdir()
        (pod / "model" / "early.pt").write_bytes(b"not yet")
        send_results(url, pod, ("checkpoints",))  # while it runs: the checkpoints only
        assert sorted(p.relative_to(tree).as_posix() for p in (tree / "checkpoints").rglob("*")) == [
            "checkpoints/restored.pt",
            "checkpoints/step-3",
            "checkpoints/step-3/model.pt",
        ]
        assert (tree / "checkpoints" / "step-3" / "model.pt").read_bytes() == b"new"
        assert (tree / "checkpoints" / "restored.pt").stat().st_mtime == restored_at  # not sent again
        assert not (tree / "model" / "early.pt").exists()

        server.serve({"algo-1": tree})  # without checkpoints, a host's are not taken
        (pod / "checkpoints" / "late.pt").write_bytes(b"late")
        (pod / "output").mkdir()
        (pod / "output" / "failure.json").write_text('{"kind": "stopped"}')
        server.keeps_output = lambda host: host != "algo-1"  # its pod was lost under a spot job
        send_results(url, pod, ("model", "output", "checkpoints"))
        assert not (tree / "checkpoints" / "late.pt").exists()
        assert (tree / "model" / "early.pt").read_bytes() == b"not yet"
        assert not (tree / "output").exists()  # its "stopped" report is no failure of the job
    finally:
        server.close()


def test_the_checkpoint_signature_changes_with_a_write_an_addition_or_a_removal(tmp_path: Path) -> None:
    import os

    from smlaunch.sdk.backends.kubernetes.host import signature

    assert signature(tmp_path / "absent") == []
    (tmp_path / "a.pt").write_bytes(b"1")
    first = signature(tmp_path)
    assert signature(tmp_path) == first  # nothing changed: nothing to send again
    os.utime(tmp_path / "a.pt", ns=(0, 10**9))
    touched = signature(tmp_path)
    assert touched != first
    (tmp_path / "b.pt").write_bytes(b"2")
    added = signature(tmp_path)
    assert added != touched
    (tmp_path / "b.pt").unlink()
    assert signature(tmp_path) == touched


def test_a_polling_host_gets_the_agents_signal_in_band(tmp_path: Path) -> None:
    server = TreeServer(TOKEN, "127.0.0.1")
    try:
        server.serve({"algo-1": tmp_path})
        assert server.signal("algo-1", 15) is False  # not polling: the caller deletes the pod
        url = server.url("127.0.0.1", "algo-1")
        got: list[int] = []
        listener = threading.Thread(target=listen_for_signals, args=(url, got.append), daemon=True)
        listener.start()
        deadline = time.monotonic() + 10
        while not server.signal("algo-1", 15):
            assert time.monotonic() < deadline, "the host never polled"
            time.sleep(0.05)
        while not got:
            assert time.monotonic() < deadline, "the signal never arrived"
            time.sleep(0.05)
        assert got == [15]
        assert server.next_signal("algo-2", wait=0.1) is None  # nothing for a host: an empty answer
        request = urllib.request.Request(f"{url}/signal")
        request.add_header(TOKEN_HEADER, "guess")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 404
    finally:
        server.close()
