"""``HyperparameterTuner``: arguments checked at construction, the local refusal, and the tuning job's
life on SageMaker (fit through moto; describe, wait, stop, best job and attach on a scripted client).

The request itself is checked against the real SDK in :mod:`tests.unit.test_tuner_oracle`.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from smlaunch import (
    CategoricalParameter,
    ConfigurationError,
    ContinuousParameter,
    Estimator,
    HyperparameterTuner,
    IntegerParameter,
    LocalSession,
    PyTorch,
    Session,
    SlurmSession,
    UnexpectedStatusException,
    UnsupportedByBackendError,
)
from smlaunch.sdk.tuning.configs import (
    HyperbandStrategyConfig,
    StrategyConfig,
    TuningJobCompletionCriteriaConfig,
    WarmStartConfig,
    WarmStartTypes,
)
from tests.unit.test_estimator import FakeSageMakerSession

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:latest"
RANGES = {
    "lr": ContinuousParameter(1e-4, 1e-1, "Logarithmic"),
    "optimizer": CategoricalParameter(["sgd", "adam"]),
}
METRICS = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.py").write_text("print('loss=0.1')\n")
    return root


def _pytorch(src: Path, session: Any) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role=ROLE,
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"epochs": 3, "lr": 0.01},
        sagemaker_session=session,
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(objective_metric_name=""), "objective_metric_name"),
        (dict(objective_metric_name=3), "objective_metric_name"),
        (dict(hyperparameter_ranges={}), "hyperparameter_ranges"),
        (dict(hyperparameter_ranges={"lr": (0.1, 0.2)}), "hyperparameter_ranges['lr']"),
        (dict(strategy="Genetic"), "strategy"),
        (dict(objective_type="Max"), "objective_type"),
        (dict(max_jobs=0), "max_jobs"),
        (dict(max_parallel_jobs=True), "max_parallel_jobs"),
        (dict(early_stopping_type="On"), "early_stopping_type"),
        (dict(metric_definitions=[{"Name": "acc", "Regex": "acc=([0-9.]+)"}]), "objective_metric_name"),
        (dict(metric_definitions=[{"Name": "loss"}]), "metric_definitions[0]"),
        (dict(strategy="Grid"), "hyperparameter_ranges['lr']"),
        (dict(base_tuning_job_name="bad_name"), "base_tuning_job_name"),
        (dict(tags="team=ml"), "tags"),
        (dict(random_seed="7"), "random_seed"),
        (dict(estimator="not an estimator"), "estimator"),
    ],
)
def test_arguments_are_checked_at_construction(src: Path, kwargs: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = dict(
        estimator=_pytorch(src, FakeSageMakerSession()),
        objective_metric_name="loss",
        hyperparameter_ranges=RANGES,
        metric_definitions=METRICS,
    )
    with pytest.raises(ConfigurationError) as raised:
        HyperparameterTuner(**{**arguments, **kwargs})
    assert raised.value.field == field
    assert "Fix:" in str(raised.value)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: IntegerParameter(5, 1), "IntegerParameter.min_value"),
        (lambda: IntegerParameter(1.5, 3), "IntegerParameter.min_value"),
        (lambda: IntegerParameter(1, 3, "ReverseLogarithmic"), "IntegerParameter.scaling_type"),
        (lambda: ContinuousParameter(0, 1, "Logarithmic"), "ContinuousParameter.min_value"),
        (lambda: ContinuousParameter(0.1, 1.0, "ReverseLogarithmic"), "ContinuousParameter.max_value"),
        (lambda: ContinuousParameter(0.1, 1.0, "Log"), "ContinuousParameter.scaling_type"),
        (lambda: CategoricalParameter([]), "CategoricalParameter.values"),
    ],
)
def test_ranges_the_service_would_refuse_are_refused(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        make()
    assert raised.value.field == field


def test_ranges_keep_the_sdk_attributes() -> None:
    integer = IntegerParameter(1, 8, scaling_type="Linear")
    assert (integer.min_value, integer.max_value, integer.scaling_type) == (1, 8, "Linear")
    assert integer.is_valid(3) and not integer.is_valid(9) and IntegerParameter.cast_to_type("4") == 4
    categorical = CategoricalParameter(3)
    assert categorical.values == ("3",) and categorical.as_json_range("n") == {"Name": "n", "Values": ['"3"']}


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: WarmStartConfig("TransferLearning", {"p"}), "warm_start_config.warm_start_type"),
        (lambda: WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, set()), "warm_start_config.parents"),
        (
            lambda: WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, [f"p{i}" for i in range(6)]),
            "warm_start_config.parents",
        ),
        (
            lambda: HyperbandStrategyConfig(max_resource=0, min_resource=1),
            "HyperbandStrategyConfig.max_resource",
        ),
        (
            lambda: HyperbandStrategyConfig(max_resource=2, min_resource=5),
            "HyperbandStrategyConfig.min_resource",
        ),
        (lambda: StrategyConfig({"MaxResource": 2}), "StrategyConfig.hyperband_strategy_config"),
        (
            lambda: TuningJobCompletionCriteriaConfig(max_number_of_training_jobs_not_improving=2),
            "TuningJobCompletionCriteriaConfig.max_number_of_training_jobs_not_improving",
        ),
    ],
)
def test_configs_the_service_would_refuse_are_refused(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        make()
    assert raised.value.field == field


def test_configs_are_checked_against_the_tuner(src: Path) -> None:
    estimator = _pytorch(src, FakeSageMakerSession())
    hyperband = StrategyConfig(HyperbandStrategyConfig(max_resource=10, min_resource=1))
    with pytest.raises(ConfigurationError) as raised:
        HyperparameterTuner(
            estimator, "loss", RANGES, METRICS, strategy="Bayesian", strategy_config=hyperband
        )
    assert raised.value.field == "strategy_config"
    for argument in ("warm_start_config", "strategy_config", "completion_criteria_config"):
        with pytest.raises(ConfigurationError) as raised:
            HyperparameterTuner(
                estimator, "loss", RANGES, METRICS, strategy="Hyperband", **{argument: {"a": 1}}
            )
        assert raised.value.field == argument


def test_configs_read_back_from_a_description() -> None:
    criteria = TuningJobCompletionCriteriaConfig(
        5, complete_on_convergence=False, target_objective_metric_value=0.9
    )
    assert TuningJobCompletionCriteriaConfig.from_job_desc(criteria.to_input_req()) == criteria
    warm = WarmStartConfig(WarmStartTypes.IDENTICAL_DATA_AND_ALGORITHM, ["a", "b", "a"])
    assert warm.parents == ("a", "b") and WarmStartConfig.from_job_desc(warm.to_input_req()) == warm
    strategy = StrategyConfig(HyperbandStrategyConfig(max_resource=10, min_resource=2))
    assert StrategyConfig.from_job_desc(strategy.to_input_req()) == strategy


def test_grid_leaves_max_jobs_to_the_service(src: Path) -> None:
    grid = HyperparameterTuner(
        _pytorch(src, FakeSageMakerSession()),
        "loss",
        {"optimizer": CategoricalParameter(["a", "b"])},
        METRICS,
        "Grid",
    )
    assert grid.max_jobs is None
    limits = grid.plan(job_name="grid").HyperParameterTuningJobConfig["ResourceLimits"]
    assert limits == {"MaxParallelTrainingJobs": 1}
    assert HyperparameterTuner(_pytorch(src, FakeSageMakerSession()), "loss", RANGES).max_jobs == 1


class UnreachablePartition:
    """A Slurm client whose cluster has no partition ``debug`` (what ``sinfo`` would say)."""

    def default_partition(self) -> str:
        return "debug"

    def partition(self, name: str) -> None:
        return None


def test_a_slurm_session_plans_and_refuses_trials_its_cluster_cannot_run(src: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    session = SlurmSession(shared_dir=shared, slurm_client=UnreachablePartition())
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
    )
    tuner = HyperparameterTuner(estimator, "loss", RANGES, METRICS, strategy="Random", max_jobs=2)
    planned = tuner.plan(job_name="on-slurm").to_request()
    assert planned["HyperParameterTuningJobName"] == "on-slurm"
    with pytest.raises(ConfigurationError) as raised:
        tuner.fit(job_name="on-slurm")
    assert raised.value.field == "partition" and raised.value.value == "debug"
    assert not (shared / "jobs").exists() or not any((shared / "jobs" / ".tuning").glob("*"))
    assert tuner.latest_tuning_job is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"strategy": "Hyperband"}, "strategy_config"),  # no max_resource, no epochs hyperparameter
        (
            {
                "strategy": "Hyperband",
                "strategy_config": StrategyConfig(HyperbandStrategyConfig(max_resource=9, min_resource=1)),
                "early_stopping_type": "Auto",
            },
            "early_stopping_type",
        ),
        (
            {"warm_start_config": WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, ["parent"])},
            "warm_start_config.parents",
        ),
        (
            {"completion_criteria_config": TuningJobCompletionCriteriaConfig(complete_on_convergence=True)},
            "completion_criteria_config.complete_on_convergence",
        ),
        (
            {"hyperparameter_ranges": {"lr": ContinuousParameter(0.1, 0.9, "ReverseLogarithmic")}},
            "hyperparameter_ranges['lr'].scaling_type",
        ),
        ({"metric_definitions": None}, "metric_definitions"),
    ],
)
def test_a_local_tuning_job_refuses_what_it_cannot_run_before_anything_starts(
    src: Path, tmp_path: Path, kwargs: dict[str, Any], field: str
) -> None:
    root = tmp_path / "jobs"
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        instance_type="local",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=LocalSession(root=root),
    )
    arguments: dict[str, Any] = {"hyperparameter_ranges": RANGES, "metric_definitions": METRICS, **kwargs}
    tuner = HyperparameterTuner(estimator, "loss", **arguments)
    with pytest.raises(ConfigurationError) as raised:
        tuner.fit(job_name="refused", wait=False)
    assert raised.value.field == field
    assert not root.exists() or not any(root.rglob("*.json"))
    assert tuner.latest_tuning_job is None


@pytest.fixture
def aws() -> Any:
    moto = pytest.importorskip("moto")
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    with moto.mock_aws():
        boto_session = boto3.Session(region_name="us-west-2")
        boto_session.client("s3").create_bucket(
            Bucket="my-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        yield Session(boto_session=boto_session, default_bucket="my-bucket")
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_fit_stages_the_code_and_creates_the_tuning_job(src: Path, aws: Any, capsys: Any) -> None:
    tuner = HyperparameterTuner(_pytorch(src, aws), "loss", RANGES, METRICS, max_jobs=4, max_parallel_jobs=2)
    planned = tuner.plan({"train": "s3://my-bucket/train"}, job_name="tune-1")
    tuner.fit({"train": "s3://my-bucket/train"}, job_name="tune-1", wait=False)
    assert tuner.latest_tuning_job == "tune-1"
    code = aws.s3_client().list_objects_v2(Bucket="my-bucket", Prefix="tune-1/source/")["Contents"]
    assert [o["Key"] for o in code if o["Key"].endswith(".tar.gz")] == ["tune-1/source/sourcedir.tar.gz"]
    described = tuner.describe()
    assert described["HyperParameterTuningJobName"] == "tune-1"
    sent = described["HyperParameterTuningJobConfig"]
    assert sent["ParameterRanges"] == planned.HyperParameterTuningJobConfig["ParameterRanges"]


def test_a_multi_estimator_fit_stages_each_estimators_code_apart(src: Path, tmp_path: Path, aws: Any) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.py").write_text("print('loss=0.2')  # the other script\n")
    estimators = {"large": _pytorch(src, aws), "small": _pytorch(other, aws)}
    tuner = HyperparameterTuner.create(
        estimators, {"large": "loss", "small": "loss"}, {"large": RANGES, "small": RANGES}, {"small": METRICS}
    )
    tuner.fit({"small": "s3://my-bucket/train"}, job_name="tune-m", wait=False)
    s3 = aws.s3_client()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="my-bucket", Prefix="tune-m/")["Contents"])
    assert keys == ["tune-m/small/source/sourcedir.tar.gz", "tune-m/source/sourcedir.tar.gz"]
    scripts = {}
    for key in keys:
        body = s3.get_object(Bucket="my-bucket", Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            member = archive.extractfile("train.py")
            assert member is not None
            scripts[key] = member.read().decode()
    assert "other script" in scripts["tune-m/small/source/sourcedir.tar.gz"]
    assert "other script" not in scripts["tune-m/source/sourcedir.tar.gz"]
    sent = aws.sagemaker_client().describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-m")
    assert [d["DefinitionName"] for d in sent["TrainingJobDefinitions"]] == ["large", "small"]


def test_a_multi_estimator_tuner_runs_on_sagemaker_only(src: Path, tmp_path: Path) -> None:
    local = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        instance_type="local",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=LocalSession(root=tmp_path / "jobs"),
    )
    tuner = HyperparameterTuner.create({"a": local}, {"a": "loss"}, {"a": RANGES}, {"a": METRICS})
    with pytest.raises(UnsupportedByBackendError) as raised:
        tuner.fit(wait=False)
    assert raised.value.field == "estimator_dict" and raised.value.value == ["a"]
    assert not (tmp_path / "jobs").exists()


class ScriptedClient:
    """A SageMaker client answering DescribeHyperParameterTuningJob from a script of answers."""

    def __init__(self, answers: list[dict[str, Any]], stop_error: str | None = None) -> None:
        self.answers = answers
        self.stop_error = stop_error
        self.stopped: list[str] = []

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {"HyperParameterTuningJobName": HyperParameterTuningJobName, "ResponseMetadata": {}, **answer}

    def stop_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> None:
        if self.stop_error:
            raise ClientError(
                {"Error": {"Code": self.stop_error, "Message": "no"}}, "StopHyperParameterTuningJob"
            )
        self.stopped.append(HyperParameterTuningJobName)


class ScriptedSession(FakeSageMakerSession):
    def __init__(self, client: ScriptedClient) -> None:
        super().__init__()
        self.client = client

    def sagemaker_client(self) -> ScriptedClient:
        return self.client


def _tuner(src: Path, client: ScriptedClient) -> HyperparameterTuner:
    tuner = HyperparameterTuner(
        _pytorch(src, ScriptedSession(client)), "loss", RANGES, METRICS, objective_type="Minimize"
    )
    tuner.latest_tuning_job = "tune-1"
    return tuner


def test_wait_polls_until_the_job_ends_and_raises_for_failed(src: Path, capsys: Any) -> None:
    running, done = (
        {"HyperParameterTuningJobStatus": "InProgress"},
        {"HyperParameterTuningJobStatus": "Completed"},
    )
    sleeps: list[float] = []
    assert (
        _tuner(src, ScriptedClient([running, running, done])).wait(poll=2, sleep=sleeps.append)[
            "HyperParameterTuningJobStatus"
        ]
        == "Completed"
    )
    assert sleeps == [2, 2] and capsys.readouterr().out == "..!\n"
    failed = {"HyperParameterTuningJobStatus": "Failed", "FailureReason": "no trial started"}
    with pytest.raises(
        UnexpectedStatusException, match=r"tune-1: Failed\. Reason: no trial started"
    ) as raised:
        _tuner(src, ScriptedClient([failed])).wait(sleep=sleeps.append)
    assert raised.value.actual_status == "Failed"


def test_stop_and_best_training_job(src: Path) -> None:
    client = ScriptedClient([{"HyperParameterTuningJobStatus": "InProgress"}])
    tuner = _tuner(src, client)
    tuner.stop_tuning_job()
    assert client.stopped == ["tune-1"]
    _tuner(src, ScriptedClient([{}], stop_error="ValidationException")).stop_tuning_job()  # already ended
    with pytest.raises(ClientError):
        _tuner(src, ScriptedClient([{}], stop_error="AccessDeniedException")).stop_tuning_job()
    with pytest.raises(ConfigurationError, match="no best training job yet"):
        tuner.best_training_job()
    best = ScriptedClient([{"BestTrainingJob": {"TrainingJobName": "tune-1-003-abc"}}])
    assert _tuner(src, best).best_training_job() == "tune-1-003-abc"
    with pytest.raises(ConfigurationError, match="call fit\\(\\) first"):
        HyperparameterTuner(_pytorch(src, FakeSageMakerSession()), "loss", RANGES).describe()


def test_a_multi_estimator_best_estimator_is_the_best_jobs_definitions(src: Path) -> None:
    attached: list[tuple[str, str]] = []

    def recording(name: str) -> type[PyTorch]:
        class Recording(PyTorch):
            @classmethod
            def attach(cls, training_job_name: str, sagemaker_session: Any = None, *_: Any, **__: Any) -> Any:
                attached.append((name, training_job_name))
                return name

        return Recording

    best = {"TrainingJobName": "tune-m-002-abc", "TrainingJobDefinitionName": "small"}
    session = ScriptedSession(ScriptedClient([{"BestTrainingJob": best}]))
    estimators = {
        name: recording(name)(
            entry_point="train.py",
            source_dir=str(src),
            role=ROLE,
            instance_type="ml.g5.2xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            sagemaker_session=session,
        )
        for name in ("large", "small")
    }
    tuner = HyperparameterTuner.create(
        estimators, {"large": "loss", "small": "loss"}, {"large": RANGES, "small": RANGES}
    )
    tuner.latest_tuning_job = "tune-m"
    assert tuner.best_estimator() == "small"
    assert attached == [("small", "tune-m-002-abc")]


@pytest.mark.parametrize("framework", [True, False])
def test_attach_rebuilds_the_tuner_from_its_description(src: Path, framework: bool) -> None:
    if framework:
        estimator: Any = _pytorch(src, FakeSageMakerSession())
    else:
        estimator = Estimator(
            image_uri=IMAGE,
            role=ROLE,
            instance_type="ml.m5.xlarge",
            instance_count=2,
            hyperparameters={"eta": 0.3},
            sagemaker_session=FakeSageMakerSession(),
        )
    ranges = {**RANGES, "depth": IntegerParameter(2, 9, "Linear")}
    original = HyperparameterTuner(
        estimator,
        "loss",
        ranges,
        METRICS,
        "Random",
        "Minimize",
        max_jobs=6,
        max_parallel_jobs=3,
        random_seed=5,
    )
    request = original.plan(job_name="tune-260101-1200").to_request()
    # What DescribeHyperParameterTuningJob adds to the request it was sent.
    request["TrainingJobDefinition"]["StaticHyperParameters"]["_tuning_objective_metric"] = "loss"
    description = {**request, "HyperParameterTuningJobStatus": "Completed"}
    attached = HyperparameterTuner.attach(
        "tune-260101-1200", sagemaker_session=ScriptedSession(ScriptedClient([description]))
    )
    assert attached.latest_tuning_job == "tune-260101-1200"
    assert type(attached.estimator) is type(estimator)
    assert attached.args == original.args.__class__(
        **{**original.args.__dict__, "base_tuning_job_name": "tune"}
    )
    assert (
        attached.plan(job_name="tune-260101-1200").to_request()
        == original.plan(job_name="tune-260101-1200").to_request()
    )


def test_attach_rebuilds_a_multi_estimator_tuner_with_create(src: Path) -> None:
    estimators: dict[str, Any] = {
        "torch": _pytorch(src, FakeSageMakerSession()),
        "algo": Estimator(
            image_uri=IMAGE,
            role=ROLE,
            instance_type="ml.m5.xlarge",
            instance_count=2,
            hyperparameters={"eta": 0.3},
            sagemaker_session=FakeSageMakerSession(),
        ),
    }
    original = HyperparameterTuner.create(
        estimators,
        {"torch": "loss", "algo": "auc"},
        {"torch": RANGES, "algo": {"depth": IntegerParameter(2, 9, "Linear")}},
        {"torch": METRICS, "algo": [{"Name": "auc", "Regex": "auc=([0-9.]+)"}]},
        strategy="Random",
        objective_type="Minimize",
        max_jobs=6,
        max_parallel_jobs=3,
        random_seed=5,
    )
    request = original.plan(job_name="tune-260101-1200").to_request()
    for definition in request["TrainingJobDefinitions"]:  # what DescribeHyperParameterTuningJob adds
        static = definition.setdefault("StaticHyperParameters", {})
        static["_tuning_objective_metric"] = definition["TuningObjective"]["MetricName"]
    description = {**request, "HyperParameterTuningJobStatus": "Completed"}
    attached = HyperparameterTuner.attach(
        "tune-260101-1200", sagemaker_session=ScriptedSession(ScriptedClient([description]))
    )
    assert attached.latest_tuning_job == "tune-260101-1200"
    assert attached.estimator_dict is not None
    assert {name: type(e) for name, e in attached.estimator_dict.items()} == {
        "algo": Estimator,
        "torch": PyTorch,
    }
    assert (attached.strategy, attached.objective_type, attached.max_jobs) == ("Random", "Minimize", 6)
    assert (
        attached.plan(job_name="tune-260101-1200").to_request()
        == original.plan(job_name="tune-260101-1200").to_request()
    )


def test_estimator_kwargs_are_checked_as_the_sdk_checks_them(src: Path, aws: Any) -> None:
    estimators = {"large": _pytorch(src, aws), "small": _pytorch(src, aws)}
    tuner = HyperparameterTuner.create(
        estimators, {"large": "loss", "small": "loss"}, {"large": RANGES, "small": RANGES}, {"small": METRICS}
    )
    for given, field in (
        ({"medium": {}}, "estimator_kwargs"),  # not an estimator's name
        ([{}], "estimator_kwargs"),
        ({"small": None}, "estimator_kwargs['small']"),
        ({"small": {"mini_batch_size": 10}}, "estimator_kwargs['small']"),  # would be ignored
    ):
        with pytest.raises(ConfigurationError) as raised:
            tuner.fit(job_name="tune-k", estimator_kwargs=given, wait=False)
        assert raised.value.field == field
    assert tuner.latest_tuning_job is None
    single = HyperparameterTuner(_pytorch(src, aws), "loss", RANGES, METRICS)
    with pytest.raises(ConfigurationError, match="create\\(\\)") as raised:
        single.fit(job_name="tune-s", estimator_kwargs={"x": {}}, wait=False)
    assert raised.value.field == "estimator_kwargs"
    tuner.fit(job_name="tune-k", estimator_kwargs={"small": {}}, wait=False)  # as notebooks pass them
    assert tuner.describe()["HyperParameterTuningJobName"] == "tune-k"
