"""A tuning job on the dev cluster: a ``HyperparameterTuner`` over a ``KubernetesSession`` keeps its
tuning job on this machine (the session's ``tuning_root``, under ``$SMLAUNCH_HOME``), its agent
detached here, and submits each trial as a normal job of the cluster, two at a time.

Covered: 3 trials, 2 in parallel, over a script whose objective has a known optimum: the best trial
is the one nearest it (its value read from its log), each trial is a job of the cluster whose
describe names the tuning job (``TuningJobArn``) as ``smlaunch list --kubernetes`` does,
``smlaunch describe kubernetes:NAMESPACE:NAME``, ``list --tuning --kubernetes`` and ``attach``
from a fresh session read it, and ``best_estimator()`` attaches the best trial.
Then a second tuning job is stopped through ``smlaunch stop kubernetes:NAMESPACE:NAME`` (what
``stop_tuning_job()`` does) with both its trials running: they end Stopped through the training
job's stop path. At the end no pod (nor Service, account, Role or binding) of any trial is left,
the only ConfigMap of each trial is its root, the trial's record, and the tuning agents are gone.
"""

from __future__ import annotations

import contextlib
import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client

from smlaunch import ContinuousParameter, HyperparameterTuner, KubernetesSession, PyTorch
from smlaunch.sdk.backends.kubernetes.plan import JOB_LABEL
from smlaunch.sdk.cli import main as cli
from smlaunch.sdk.tuning import local
from tests.kubernetes.conftest import S3_BUCKET, DevCluster, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = textwrap.dedent(
    """
    import argparse, time
    parser = argparse.ArgumentParser()
    parser.add_argument("--xv", type=float, default=0.0)
    parser.add_argument("--sleep", type=float, default=0.0)
    args, _ = parser.parse_known_args()
    print("trial up", flush=True)
    time.sleep(args.sleep)
    print(f"objective={-(args.xv - 3.0) ** 2}", flush=True)
    """
)
METRICS = [{"Name": "objective", "Regex": r"objective=([-0-9.e]+)"}]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k8s_cluster: DevCluster) -> Iterator[Path]:
    """``$SMLAUNCH_HOME`` (the tuning root's default place) and ``$KUBECONFIG`` (what ``smlaunch``
    and a ``KubernetesSession`` without ``kubeconfig`` read) for the test; the tuning agents it
    started are killed afterwards should the test have failed before they ended."""
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    yield tmp_path / "home"
    for agent_file in (tmp_path / "home").rglob(f"{local.TUNING_DIR}/*/agent.json"):
        with contextlib.suppress(psutil.Error, OSError, ValueError, KeyError):
            psutil.Process(int(json.loads(agent_file.read_text())["pid"])).kill()


def _tuner(session: KubernetesSession, source: Path, **kwargs: Any) -> HyperparameterTuner:
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(SCRIPT)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::000000000000:role/test",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        output_path=f"s3://{S3_BUCKET}/out",
        hyperparameters=kwargs.pop("hyperparameters", {}),
        sagemaker_session=session,
    )
    ranges = {"xv": ContinuousParameter(0.0, 10.0)}
    return HyperparameterTuner(estimator, "objective", ranges, METRICS, strategy="Random", **kwargs)


def _agent_gone(root: Path, name: str, timeout: float = 20) -> bool:
    agent = json.loads(local.tuning_dir(root, name).agent_file.read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(int(agent["pid"]))
            if abs(proc.create_time() - float(agent["create_time"])) < 1.0 and proc.status() != "zombie":
                time.sleep(0.2)
                continue
        return True
    return False


def _most_at_once(summaries: list[dict[str, Any]]) -> int:
    spans = [(s["TrainingStartTime"], s["TrainingEndTime"]) for s in summaries]
    return max(sum(1 for start, end in spans if start <= moment < end) for moment, _ in spans)


def _config_maps(api: client.ApiClient, namespace: str) -> list[str]:
    items = client.CoreV1Api(api).list_namespaced_config_map(namespace, label_selector=JOB_LABEL).items
    return sorted(item.metadata.name for item in items)


def test_trials_are_jobs_of_the_cluster_two_at_a_time_and_stop_through_the_cli(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = k8s_session()
    root = session.tuning_root
    assert root.is_relative_to(home / "jobs" / ".kubernetes") and root.name == namespace
    name = "k8s-tuning"
    tuner = _tuner(session, tmp_path / "src", max_jobs=3, max_parallel_jobs=2, random_seed=3)
    tuner.fit(job_name=name)  # waits
    assert _agent_gone(root, name)
    described = tuner.describe()
    assert described["HyperParameterTuningJobStatus"] == "Completed", described.get("FailureReason")
    assert described["TrainingJobStatusCounters"]["Completed"] == 3
    logs = {
        s["TrainingJobName"]: "\n".join(session.backend().log_lines(s["TrainingJobName"]))[-3000:]
        for s in tuner.analytics().training_job_summaries()
    }
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 3, "Pending": 0, "Failed": 0}, logs
    summaries = tuner.analytics().training_job_summaries()
    assert len(summaries) == 3 and _most_at_once(summaries) <= 2
    values = {
        s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries
    }
    best = tuner.best_training_job()
    assert values[best] == max(values.values())
    tuned = {s["TrainingJobName"]: float(s["TunedHyperParameters"]["xv"]) for s in summaries}
    assert values[best] == pytest.approx(-((tuned[best] - 3.0) ** 2), abs=1e-6)  # read from its log
    arn = described["HyperParameterTuningJobArn"]
    for trial in values:  # each trial a job of the cluster, its record the root ConfigMap
        trial_description = session.backend().describe(trial)
        assert trial_description["TrainingJobStatus"] == "Completed"
        assert trial_description["TuningJobArn"] == arn
        assert float(trial_description["HyperParameters"]["xv"]) == pytest.approx(tuned[trial])

    capsys.readouterr()  # as another terminal would: the namespace names the session
    assert cli.main(["describe", f"kubernetes:{namespace}:{name}", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["BestTrainingJob"]["TrainingJobName"] == best
    assert cli.main(["list", "--tuning", "--kubernetes", namespace, "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["HyperParameterTuningJobSummaries"]
    assert [(s["HyperParameterTuningJobName"], s["HyperParameterTuningJobStatus"]) for s in listed] == [
        (name, "Completed")
    ]
    assert cli.main(["list", "--kubernetes", namespace, "--output", "table"]) == 0
    table = capsys.readouterr().out
    assert "TUNING_JOB" in table and sum(line.split()[-1] == name for line in table.splitlines()) == 3, table
    attached = HyperparameterTuner.attach(name, sagemaker_session=KubernetesSession(namespace=namespace))
    assert attached.best_training_job() == best and attached.max_parallel_jobs == 2
    assert attached.best_estimator().latest_training_job.name == best

    stopped = "k8s-tuning-stop"
    tuner = _tuner(session, tmp_path / "src", max_jobs=4, max_parallel_jobs=2, hyperparameters={"sleep": 300})
    tuner.fit(job_name=stopped, wait=False)
    deadline = time.monotonic() + 120
    running: list[str] = []
    while time.monotonic() < deadline and len(running) < 2:  # both scripts started, in their pods
        names = [s["TrainingJobName"] for s in tuner.analytics().training_job_summaries()]
        running = [t for t in names if "trial up" in "\n".join(session.backend().log_lines(t))]
        time.sleep(1)
    assert len(running) == 2, tuner.describe()
    assert cli.main(["stop", f"kubernetes:{namespace}:{stopped}"]) == 0
    assert f"Stopping tuning job {stopped}" in capsys.readouterr().err
    described = tuner.wait(poll=1)
    summaries = tuner.analytics().training_job_summaries()
    assert described["HyperParameterTuningJobStatus"] == "Stopped", described
    assert len(summaries) == 2 and {s["TrainingJobStatus"] for s in summaries} == {"Stopped"}, summaries
    assert described["TrainingJobStatusCounters"]["Stopped"] == 2
    assert _agent_gone(root, stopped)

    assert job_objects(api, namespace) == []  # no pod, Service, account, Role or binding of a trial
    trials = sorted([*values, *running])
    assert _config_maps(api, namespace) == trials  # each trial's root, its record, and nothing else
