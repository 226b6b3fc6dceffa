"""The failure policy and the job's handle on the dev cluster: a crash on one rank fails the job
naming host and rank, and ends the other host's pods; attach and logs from a second process;
``smlaunch describe/logs/stop kubernetes:NAMESPACE:NAME``: stop() reaches the script as
SIGTERM and ends the job Stopped; max_run ends it MaxRuntimeExceeded; a job waits as Starting,
with the scheduler's reason, in the record its agent keeps while the node is full, then runs.
Nothing of a job is left after."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch import JobFailedError, KubernetesSession
from smlaunch.sdk.backends.kubernetes.plan import object_name
from smlaunch.sdk.cli.main import main
from tests.kubernetes.conftest import DevCluster, estimator, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

CRASH = textwrap.dedent(
    """
    import os, sys, time
    host = os.environ["SM_CURRENT_HOST"]
    print(f"{host} up", flush=True)
    if host == "algo-2":
        sys.exit("rank on algo-2 gives up")
    time.sleep(600)  # until the agent ends this host
    """
)

SLEEPER = textwrap.dedent(
    """
    import signal, sys, time
    def stop(signum, frame):
        print("SIGTERM reached the script", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("sleeping", flush=True)
    time.sleep(600)
    """
)


def test_a_crash_on_one_rank_fails_the_job_and_a_second_process_attaches(
    k8s_cluster: DevCluster,
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
) -> None:
    job = estimator(k8s_session(), tmp_path, CRASH)
    with pytest.raises(JobFailedError) as failed:
        job.fit(logs=False)
    reason = failed.value.reason
    assert "algo-2" in reason and "rank" in reason and "gives up" in reason, reason
    assert job_objects(api, namespace) == []  # algo-1's pod ended by the agent, then everything

    name = job.latest_training_job.name
    attach = textwrap.dedent(
        f"""
        import json
        from smlaunch import JobFailedError, KubernetesSession, PyTorch, TrainingJob
        session = KubernetesSession(namespace={namespace!r}, kubeconfig={str(k8s_cluster.kubeconfig)!r})
        try:
            PyTorch.attach({name!r}, sagemaker_session=session)  # waits, and raises as the SDK does
        except JobFailedError as error:
            print(json.dumps({{"status": error.status, "reason": error.reason}}))
        TrainingJob(session.backend(), {name!r}).logs()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shown = subprocess.run(
        [sys.executable, "-c", attach], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    first, _, logs = shown.stdout.partition("\n")
    assert json.loads(first) == {"status": "Failed", "reason": reason}
    # Both hosts' lines, the stopped one's last ones too (its script, even its runtime, may not
    # have started yet).
    lines = logs.splitlines()
    assert [line for line in lines if line.startswith("[algo-1]") and "stopped by SIGTERM" in line], logs
    assert "[algo-2/rank 0] rank on algo-2 gives up" in logs, logs


def test_the_cli_describes_stops_and_shows_the_logs_of_a_kubernetes_job(
    k8s_cluster: DevCluster,
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = estimator(k8s_session(), tmp_path, SLEEPER)
    job.fit(wait=False)
    handle = job.latest_training_job
    reference = f"kubernetes:{namespace}:{handle.name}"
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    deadline = time.monotonic() + 180
    while "sleeping" not in _cli(capsys, "logs", reference):
        assert time.monotonic() < deadline, handle.describe()
        time.sleep(1)
    described = json.loads(_cli(capsys, "describe", reference, "--output", "json"))
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("InProgress", "Training")
    core = client.CoreV1Api(api)
    secret = core.read_namespaced_secret(f"{object_name(handle.name)}-tree", namespace)
    token = base64.b64decode(secret.data["token"]).decode()
    pods = api.sanitize_for_serialization(core.list_namespaced_pod(namespace))
    assert len(token) > 16 and token not in json.dumps(pods)  # through secretKeyRef only

    _cli(capsys, "stop", reference)  # SIGTERM reaches the script, SIGKILL after the grace
    handle.wait(logs=False)  # Stopped: a logged warning, as the SDK's
    assert handle.describe()["TrainingJobStatus"] == "Stopped"
    logs = _cli(capsys, "logs", reference)
    assert "SIGTERM reached the script" in logs, logs[-3000:]
    assert job_objects(api, namespace) == []


def test_max_run_stops_the_job_as_max_runtime_exceeded(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
) -> None:
    job = estimator(k8s_session(), tmp_path, SLEEPER, max_run=20)
    job.fit(logs=False)  # Stopped: a logged warning, as the SDK's
    description = job.latest_training_job.describe()
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == (
        "Stopped",
        "MaxRuntimeExceeded",
    ), description.get("FailureReason")
    logs = "\n".join(job.sagemaker_session.backend().log_lines(job.latest_training_job.name))
    assert "SIGTERM reached the script" in logs, logs[-3000:]
    assert job_objects(api, namespace) == []


def test_a_job_waits_starting_while_the_node_is_full_then_runs(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    image: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
) -> None:
    allocatable = core.read_node("localhost").status.allocatable["cpu"]
    millicores = int(allocatable[:-1]) if allocatable.endswith("m") else int(allocatable) * 1000
    hog = client.V1Pod(
        metadata=client.V1ObjectMeta(name="hog"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="main",
                    image=image,
                    image_pull_policy="Never",
                    command=["sleep", "600"],
                    resources=client.V1ResourceRequirements(requests={"cpu": f"{millicores - 500}m"}),
                )
            ],
        ),
    )
    core.create_namespaced_pod(namespace, hog)
    job = estimator(k8s_session(resources={"cpu": "1"}), tmp_path, "print('ran', flush=True)\n")
    job.fit(wait=False)
    handle = job.latest_training_job
    deadline = time.monotonic() + 120
    while True:  # the job's record, as the agent keeps it in the root (what every reader reads)
        root = core.read_namespaced_config_map(object_name(handle.name), namespace)
        recorded = json.loads(root.data["state.json"])
        message = recorded["SecondaryStatusTransitions"][-1].get("StatusMessage", "")
        if recorded["SecondaryStatus"] == "Starting" and "Insufficient cpu" in message:
            break
        assert recorded["SecondaryStatus"] != "Training", recorded  # no host is on the node
        assert time.monotonic() < deadline, recorded
        time.sleep(1)
    assert message.startswith("algo-") and "Pending: 0/1 nodes are available" in message, message
    described = handle.describe()
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("InProgress", "Starting")

    core.delete_namespaced_pod("hog", namespace, grace_period_seconds=0)
    final = handle.wait(logs=False)
    assert final["TrainingJobStatus"] == "Completed"
    statuses = [t["Status"] for t in final["SecondaryStatusTransitions"]]
    assert statuses[-5:] == ["Downloading", "Starting", "Training", "Uploading", "Completed"], statuses
    assert "Insufficient cpu" in final["SecondaryStatusTransitions"][-4]["StatusMessage"]
    logs = "\n".join(job.sagemaker_session.backend().log_lines(handle.name))
    assert "is pending: 0/1 nodes are available: 1 Insufficient cpu" in logs, logs[-3000:]
    assert "[algo-2/rank 0] ran" in logs, logs[-3000:]
    assert job_objects(api, namespace) == []


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``smlaunch ARGV`` in this process; its standard output."""
    capsys.readouterr()
    status = main(list(argv))
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    return captured.out
