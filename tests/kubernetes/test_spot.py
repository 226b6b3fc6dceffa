"""A managed-spot job on the dev cluster outlives both its notebook and a host pod: submitted from a
notebook process that is then SIGKILLed, it runs on in the cluster; a host pod deleted through the
API mid-job without a grace (as a node reclaimed at once) ends the attempt ``Interrupted``, and the
next attempt starts on fresh pods from the checkpoints (the deleted host's from what it handed back
while it ran, the other's from what it saved on the agent's SIGTERM) and completes.
``smlaunch list --kubernetes`` shows it, ``smlaunch rm`` refuses it while it runs and deletes its
record once it ended. One job shows all of it, to keep the ``kubernetes`` set within CI's budget.
See docs/kubernetes.md."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch import KubernetesSession, TrainingJob
from smlaunch.sdk.cli.main import main
from tests.kubernetes.conftest import S3_BUCKET, DevCluster, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
STEPS = 8

TRAIN = textwrap.dedent(
    f"""
    import json, os, signal, sys, time
    host = os.environ["SM_CURRENT_HOST"]
    path = os.path.join("/opt/ml/checkpoints", host + ".json")
    step = json.load(open(path))["step"] if os.path.exists(path) else 0
    first = step
    print(f"{{host}} starts at step {{step}}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # what was saved is the checkpoint
    while step < {STEPS}:
        time.sleep(1)
        step += 1
        with open(path + ".tmp", "w") as handle:
            json.dump({{"step": step}}, handle)
        os.replace(path + ".tmp", path)
        print(f"{{host}} step {{step}}", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w") as handle:
        json.dump({{"first": first, "last": step}}, handle)
    """
)

NOTEBOOK = textwrap.dedent(
    """
    import sys
    from smlaunch import KubernetesSession, PyTorch
    arguments = {arguments!r}
    session = KubernetesSession(**arguments)
    PyTorch(
        entry_point="train.py",
        source_dir={source!r},
        role="arn:aws:iam::000000000000:role/test",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        output_path="s3://{bucket}/out",
        checkpoint_s3_uri="s3://{bucket}/checkpoints",
        use_spot_instances=True,
        environment={{"SMLAUNCH_K8S_CHECKPOINT_SECONDS": "1"}},  # the hosts hand them back every 1 s
        max_wait=900,
        max_run=600,
        sagemaker_session=session,
    ).fit(job_name={name!r})  # waits, following the log, until this process is killed
    """
)


def test_a_spot_job_outlives_its_notebook_and_resumes_from_checkpoints_after_a_pod_is_deleted(
    k8s_cluster: DevCluster,
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    image: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))  # for the CLI
    (tmp_path / "train.py").write_text(TRAIN)
    name = f"spot-{uuid.uuid4().hex[:8]}"
    arguments = {
        "namespace": namespace,
        "kubeconfig": str(k8s_cluster.kubeconfig),
        "image": image,
        "image_pull_policy": "Never",
        "resources": "off",
        "host_network": True,
        "storage": {"s3": {"endpoint_url": s3.meta.endpoint_url, "credentials_secret": "aws"}},
        "stop_grace_seconds": 5,
    }
    k8s_session()  # makes the namespace's "aws" Secret, which the notebook's session names
    notebook = subprocess.Popen(
        [
            sys.executable,
            "-c",
            NOTEBOOK.format(arguments=arguments, source=str(tmp_path), bucket=S3_BUCKET, name=name),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen = _read_until(notebook, "[algo-1/rank 0] algo-1 step 1", 240)
    notebook.send_signal(signal.SIGKILL)  # the notebook dies mid-job
    notebook.wait(timeout=30)

    handle = TrainingJob(KubernetesSession(**arguments).backend(), name)
    assert handle.describe()["TrainingJobStatus"] == "InProgress"
    reference = f"kubernetes:{namespace}:{name}"
    assert _cli(capsys, "rm", reference)[0] == 2  # running: refused
    assert "is still running (InProgress)" in capsys.readouterr().err
    deadline = time.monotonic() + 120
    while "algo-2 step 4" not in (logs := "\n".join(handle.backend.log_lines(name))):
        assert time.monotonic() < deadline, logs[-3000:]
        time.sleep(1)
    (victim,) = [
        pod.metadata.name
        for pod in core.list_namespaced_pod(namespace, label_selector="smlaunch.io/role=host").items
        if pod.spec.hostname == "algo-2"
    ]
    # As a node reclaimed at once: no SIGTERM, no grace, so what algo-2 saved is what it handed back
    # while it ran (step 2 at least: two of its 1-s hand-backs came after it wrote step 2).
    core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)

    description = handle.wait(logs=False)
    logs = "\n".join(handle.backend.log_lines(name))
    assert description["TrainingJobStatus"] == "Completed", (description.get("FailureReason"), logs[-4000:])
    attempts = description["Attempts"]
    assert [a["Outcome"] for a in attempts] == ["Interrupted", "Completed"], (attempts, logs[-4000:])
    assert "a spot interruption" in logs, logs[-4000:]
    second = logs.split("starting attempt 2", 1)[1]
    resumed = {host: _resumed_at(second, host) for host in ("algo-1", "algo-2")}
    # Both from a checkpoint, neither from scratch (the pods may start a second or so apart).
    assert all(step >= 2 for step in resumed.values()), (resumed, seen[-2000:], logs[-4000:])

    model = _model_files(s3, description["ModelArtifacts"]["S3ModelArtifacts"])
    for host, step in resumed.items():
        assert model[f"{host}.json"] == {"first": step, "last": STEPS}, model
    assert job_objects(api, namespace) == []

    status, listed = _cli(capsys, "list", "--kubernetes", namespace, "--output", "json")
    summaries = json.loads(listed)["TrainingJobSummaries"]
    assert status == 0 and [(s["TrainingJobName"], s["TrainingJobStatus"]) for s in summaries] == [
        (name, "Completed")
    ]
    assert _cli(capsys, "rm", reference) == (0, f"removed {reference}\n")
    assert json.loads(_cli(capsys, "list", "--kubernetes", namespace, "--output", "json")[1]) == {
        "TrainingJobSummaries": []
    }


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``smlaunch ARGV`` in this process: its exit status and standard output (stderr left to read)."""
    capsys.readouterr()
    status = main(list(argv))
    out = capsys.readouterr()
    print(out.err, file=sys.stderr)  # readable again by the caller's capsys.readouterr()
    return status, out.out


def _read_until(process: subprocess.Popen[bytes], text: str, seconds: float) -> str:
    """The process's output until a line holds ``text`` (failing after ``seconds``)."""
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + seconds
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and process.poll() is None, seen.decode(errors="replace")[-3000:]
        ready, _, _ = select.select([process.stdout], [], [], min(left, 1.0))
        if ready:
            seen += os.read(process.stdout.fileno(), 1 << 16)
    return seen.decode(errors="replace")


def _resumed_at(logs: str, host: str) -> int:
    marker = f"{host} starts at step "
    assert marker in logs, logs[-3000:]
    return int(logs.split(marker, 1)[1].split(None, 1)[0])


def _model_files(s3: Any, uri: str) -> dict[str, Any]:
    import io
    import tarfile

    key = uri.split(f"s3://{S3_BUCKET}/", 1)[1]
    archive = s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {
            member.name: json.load(tar.extractfile(member))  # type: ignore[arg-type]
            for member in tar.getmembers()
            if member.isfile()
        }
