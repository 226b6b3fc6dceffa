"""What users see of a real local tuning job: its analytics table (equal to the SageMaker SDK's for
the same trials), its plot, the ``smlaunch`` command (list, list --tuning, describe, stop) and its
MLflow runs (a parent run, each trial a child run), all from one tuning job of real trials;
``smlaunch stop`` on a running tuning job stopping its trials; and ``list --tuning``/``describe
--tuning`` of a SageMaker tuning job (on a moto server, as ``test_cli_sagemaker.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import psutil
import pytest
from botocore.stub import Stubber

from smlaunch import CategoricalParameter, ContinuousParameter, HyperparameterTuner, LocalSession, PyTorch
from smlaunch.sdk.cli.output import plain
from smlaunch.sdk.tuning import local
from tests.functional._local_helpers import kill_leftover_jobs
from tests.functional._sagemaker_moto import REGION, ROLE_NAME
from tests.functional.test_cli_sagemaker import server, smlaunch  # noqa: F401  (the moto server fixture)
from tests.unit.test_kubernetes_session import KUBECONFIG

pytestmark = pytest.mark.slow
pandas = pytest.importorskip("pandas")

SCRIPT = """
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--xv", type=float, default=0.0)
parser.add_argument("--shape", default="flat")
parser.add_argument("--sleep", type=float, default=0.0)
args, _ = parser.parse_known_args()
time.sleep(args.sleep)
for step in range(3):
    print(f"step={step} objective={-(args.xv - 3.0) ** 2 - step}", flush=True)
"""
METRICS = [{"Name": "objective", "Regex": r"objective=([-0-9.e]+)"}]
NAME = "tune-surface"


class Cli:
    """``smlaunch ...`` in a subprocess over the job store under ``home`` (``$SMLAUNCH_HOME``)."""

    def __init__(self, home: Path) -> None:
        self.env = dict(
            os.environ, SMLAUNCH_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2])
        )

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "smlaunch.sdk.cli.main", *args]
        environment = {**self.env, **env}
        return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)


def _kill_tuning_agents(root: Path) -> None:
    for agent_file in (root / local.TUNING_DIR).glob("*/agent.json"):
        with contextlib.suppress(psutil.Error, OSError, ValueError, KeyError):
            psutil.Process(int(json.loads(agent_file.read_text())["pid"])).kill()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("tuning-surface")
    (base / "src").mkdir()
    (base / "src" / "train.py").write_text(SCRIPT)
    yield base
    _kill_tuning_agents(base / "jobs")
    kill_leftover_jobs(base / "jobs")


def _tuner(home: Path, mlflow: str | None = None, **kwargs: Any) -> HyperparameterTuner:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(home / "src"),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local",
        instance_count=1,
        hyperparameters=kwargs.pop("hyperparameters", {}),
        sagemaker_session=LocalSession(root=home / "jobs", mlflow=mlflow),
    )
    ranges = {"xv": ContinuousParameter(0.0, 10.0), "shape": CategoricalParameter(["flat", "round"])}
    return HyperparameterTuner(estimator, "objective", ranges, METRICS, strategy="Random", **kwargs)


@pytest.fixture(scope="module")
def tuned(home: Path) -> Iterator[tuple[HyperparameterTuner, str]]:
    """A finished tuning job of 4 trials, 2 at a time, waited on with MLflow tracking on; and the
    MLflow store's URI."""
    store = (home / "mlruns").as_uri()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 keeps the file store opt-in
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        pytest.importorskip("mlflow")
        tuner = _tuner(home, store, max_jobs=4, max_parallel_jobs=2, random_seed=3)
        tuner.fit(job_name=NAME, wait=True)
        yield tuner, store


def test_analytics_equals_the_sdk_table_of_the_same_trials(tuned: tuple[HyperparameterTuner, str]) -> None:
    tuner, _ = tuned
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    sdk_analytics = pytest.importorskip("sagemaker.analytics")
    summaries = local.training_job_summaries(tuner.estimator.sagemaker_session.root, NAME)
    assert len(summaries) == 4
    client = boto3.client(
        "sagemaker", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stubber:  # checks the local summaries against the service's model too
        stubber.add_response(
            "list_training_jobs_for_hyper_parameter_tuning_job",
            {"TrainingJobSummaries": summaries},
            {"HyperParameterTuningJobName": NAME, "MaxResults": 100},
        )
        sdk = sdk_analytics.HyperparameterTuningJobAnalytics(
            NAME, sagemaker_session=SimpleNamespace(sagemaker_client=client)
        ).dataframe()
    ours = tuner.analytics().dataframe()
    pandas.testing.assert_frame_equal(ours, sdk)
    assert set(list(ours.columns)[:2]) == {"xv", "shape"}
    assert set(ours["shape"]) <= {'"flat"', '"round"'}  # as SageMaker gives a framework's categories
    assert (ours["TrainingElapsedTimeSeconds"] > 0).all()


def test_plot_holds_each_objective_and_the_best_so_far(
    tuned: tuple[HyperparameterTuner, str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    tuner, _ = tuned
    figure = tuner.analytics().plot(tmp_path / "tuning.png")
    assert (tmp_path / "tuning.png").read_bytes()[:4] == b"\x89PNG"
    frame = tuner.analytics().dataframe()
    values = [float(v) for v in frame["FinalObjectiveValue"]]
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert list(lines["objective"].get_xdata()) == [1, 2, 3, 4]
    assert [float(y) for y in lines["objective"].get_ydata()] == values
    assert [float(y) for y in lines["best so far"].get_ydata()] == [
        max(values[: i + 1]) for i in range(len(values))
    ]


def test_cli_lists_trials_with_their_tuning_job_and_lists_tuning_jobs(
    tuned: tuple[HyperparameterTuner, str], home: Path
) -> None:
    tuner, _ = tuned
    cli = Cli(home)
    trials = set(tuner.analytics().dataframe()["TrainingJobName"])
    listed = cli("list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[-1] == "TUNING_JOB"
    assert {row.split()[0] for row in rows if row.split()[-1] == NAME} == trials

    table = cli("list", "--tuning")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "NAME", "STATUS", "STRATEGY", "TRIALS", "BEST", "STARTED", "DURATION"
    ]  # fmt: skip
    best = tuner.describe()["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    assert table.stdout.splitlines()[1].split()[:5] == [
        NAME,
        "Completed",
        "Random",
        "4/4",
        f"objective={best:g}",
    ]
    as_json = json.loads(cli("list", "--tuning", "--output", "json").stdout)
    (summary,) = as_json["HyperParameterTuningJobSummaries"]
    assert summary["HyperParameterTuningJobName"] == NAME
    assert summary["TrainingJobStatusCounters"]["Completed"] == 4
    assert summary["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2}
    assert cli("list", "--tuning", "--status", "Failed", "--output", "json").stdout.count(NAME) == 0


def test_cli_describes_a_tuning_job_and_a_trial_names_its_tuning_job(
    tuned: tuple[HyperparameterTuner, str], home: Path
) -> None:
    tuner, _ = tuned
    cli = Cli(home)
    described = cli("describe", NAME)
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout) == plain(tuner.describe())
    assert json.loads(cli("describe", "--tuning", f"local:{NAME}").stdout) == plain(tuner.describe())
    trial = tuner.best_training_job()
    arn = cli("describe", trial, "--query", "TuningJobArn", "--output", "text")
    assert arn.stdout.strip() == tuner.describe()["HyperParameterTuningJobArn"]
    stopped = cli("stop", NAME)
    assert (stopped.returncode, stopped.stderr.strip()) == (0, f"{NAME} already ended Completed")
    missing = cli("describe", "--tuning", "local:no-such-tuning")
    assert missing.returncode == 2 and "no local tuning job" in missing.stderr
    last = cli("describe", "--tuning", "--last", "--query", "HyperParameterTuningJobName")
    assert json.loads(last.stdout) == NAME, last.stderr
    logs = cli("logs", NAME)
    assert logs.returncode == 2 and "is a tuning job, which has no logs" in logs.stderr
    kubeconfig = home / "kubeconfig"  # a cluster's tuning jobs are kept apart from the local ones
    kubeconfig.write_text(json.dumps(KUBECONFIG))
    kubernetes = cli("describe", "--tuning", f"kubernetes:default:{NAME}", KUBECONFIG=str(kubeconfig))
    assert kubernetes.returncode == 2, kubernetes.stderr
    assert "no Kubernetes tuning job of that name under" in kubernetes.stderr
    assert str(home / "jobs" / ".kubernetes" / "dev" / "default") in kubernetes.stderr


def test_each_trial_is_a_child_run_of_the_tuning_job_run(tuned: tuple[HyperparameterTuner, str]) -> None:
    mlflow = pytest.importorskip("mlflow")
    tuner, store = tuned
    client = mlflow.MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("smlaunch")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [run for run in runs if run.data.tags.get("smlaunch.kind") == "tuning_job"]
    children = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 5 and len(children) == 4
    assert parent.info.run_name == NAME and parent.info.status == "FINISHED"
    assert parent.data.params["strategy"] == "Random" and parent.data.params["max_jobs"] == "4"
    assert json.loads(parent.data.params["range.xv"])["MaxValue"] == "10.0"
    frame = tuner.analytics().dataframe().set_index("TrainingJobName")
    best = tuner.describe()["BestTrainingJob"]
    assert (
        parent.data.metrics["BestObjectiveValue"]
        == best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
    )
    assert parent.data.tags["smlaunch.best_training_job"] == best["TrainingJobName"]
    for child in children:
        name = child.data.tags["smlaunch.job_name"]
        assert child.data.tags["smlaunch.tuning_job_name"] == NAME
        assert float(child.data.params["xv"]) == pytest.approx(frame.loc[name, "xv"])
        assert child.data.metrics["FinalObjectiveValue"] == frame.loc[name, "FinalObjectiveValue"]
    tuner.wait()  # waiting again logs nothing twice
    assert len(client.search_runs([experiment.experiment_id])) == 5


def test_cli_stop_stops_a_running_tuning_job_and_its_trials(home: Path) -> None:
    tuner = _tuner(home, hyperparameters={"sleep": 120}, max_jobs=4, max_parallel_jobs=2)
    tuner.fit(job_name="tune-cli-stop", wait=False)
    deadline = time.monotonic() + 90
    while tuner.describe()["TrainingJobStatusCounters"]["InProgress"] < 2:
        assert time.monotonic() < deadline, tuner.describe()
        time.sleep(0.2)
    stopped = Cli(home)("stop", "tune-cli-stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "Stopping tuning job tune-cli-stop" in stopped.stderr
    deadline = time.monotonic() + 120
    while tuner.describe()["HyperParameterTuningJobStatus"] not in local.TERMINAL:
        assert time.monotonic() < deadline, tuner.describe()
        time.sleep(0.5)
    description = tuner.describe()
    assert description["HyperParameterTuningJobStatus"] == "Stopped"
    assert description["TrainingJobStatusCounters"]["Stopped"] == 2
    backend = LocalSession(root=home / "jobs").backend()
    for name in tuner.analytics().dataframe()["TrainingJobName"]:
        assert backend.describe(name)["TrainingJobStatus"] == "Stopped"


def test_cli_lists_and_describes_a_sagemaker_tuning_job(
    server: dict[str, str],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    sagemaker = boto3.client("sagemaker", endpoint_url=server["AWS_ENDPOINT_URL"], region_name=REGION)
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="sm-tune",
        HyperParameterTuningJobConfig={
            "Strategy": "Random",
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
            "ParameterRanges": {
                "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1"}]
            },
        },
        TrainingJobDefinition={
            "AlgorithmSpecification": {
                "TrainingImage": "123456789012.dkr.ecr.us-west-2.amazonaws.com/algo:latest",
                "TrainingInputMode": "File",
                "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
            },
            "RoleArn": f"arn:aws:iam::123456789012:role/{ROLE_NAME}",
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        },
    )
    expected = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="sm-tune")
    expected.pop("ResponseMetadata")
    listed = smlaunch(server, "list", "--tuning", "--sagemaker", "--output", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (summary,) = json.loads(listed.stdout)["HyperParameterTuningJobSummaries"]
    assert summary["HyperParameterTuningJobName"] == "sm-tune"
    table = smlaunch(server, "list", "--tuning", "--sagemaker", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split()[:3] == [
        "sm-tune",
        expected["HyperParameterTuningJobStatus"],
        "Random",
    ]
    for args in (
        ("--tuning", "--sagemaker", "sm-tune"),
        ("--tuning", "sagemaker:sm-tune"),
        ("--tuning", "sm-tune"),
    ):
        described = smlaunch(server, "describe", *args, cwd=tmp_path)  # a bare name: not local, so SageMaker
        assert described.returncode == 0, (args, described.stderr)
        assert json.loads(described.stdout) == plain(expected)
