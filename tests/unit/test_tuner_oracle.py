"""Oracle: our ``HyperparameterTuner.plan()`` equals the CreateHyperParameterTuningJob request of the
real SageMaker SDK v2.

For each configuration the real ``sagemaker.tuner.HyperparameterTuner(...).fit(inputs,
job_name=..., wait=False)`` runs against moto (the code upload happens for real); the keyword
arguments of ``create_hyper_parameter_tuning_job`` are captured with a botocore
``provide-client-params`` hook, as :mod:`tests.unit.test_plan_oracle` captures CreateTrainingJob.
Our tuner with the same arguments must plan the same dict, field by field. Deliberate differences
are listed in ``DELIBERATE_DIFFERENCES`` and asserted exactly, so an unlisted difference fails.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
sagemaker = pytest.importorskip("sagemaker")
moto = pytest.importorskip("moto")

import sagemaker.parameter as sdk_parameter  # noqa: E402
import sagemaker.tuner as sdk_tuner  # noqa: E402
from sagemaker.estimator import Estimator as SdkEstimator  # noqa: E402
from sagemaker.inputs import TrainingInput as SdkInput  # noqa: E402
from sagemaker.pytorch import PyTorch as SdkPyTorch  # noqa: E402
from sagemaker.tuner import HyperparameterTuner as SdkTuner  # noqa: E402

import smlaunch  # noqa: E402
from smlaunch import (  # noqa: E402
    ContinuousParameter,
    Estimator,
    HyperparameterTuner,
    PyTorch,
    TrainingInput,
)
from tests.unit._sdk_under_moto import sdk_session  # noqa: E402
from tests.unit.test_plan_oracle import (  # noqa: E402
    BUCKET,
    REGION,
    ROLE,
    FakeSageMakerSession,
    _differences,
    _normalise,
)

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:latest"
METRICS = [
    {"Name": "validation:accuracy", "Regex": "val_acc=([0-9.]+)"},
    {"Name": "train:loss", "Regex": "loss=([0-9.]+)"},
]
PYTORCH = dict(
    instance_type="ml.g5.2xlarge",
    instance_count=1,
    framework_version="2.1.0",
    py_version="py310",
    entry_point="train.py",
    hyperparameters={"epochs": 10, "lr": 0.1, "optimizer": "sgd", "batch_size": 32},
)
GENERIC = dict(
    image_uri=IMAGE,
    instance_type="ml.m5.xlarge",
    instance_count=2,
    hyperparameters={"epochs": 10, "eta": 0.3, "booster": "gbtree"},
)


def _ranges(module: Any, shape: str) -> dict[str, Any]:
    """The same ranges built from the SDK's classes or from ours (``module``)."""
    if shape == "every_kind":
        return {
            "lr": module.ContinuousParameter(1e-5, 1e-1, scaling_type="Logarithmic"),
            "batch_size": module.IntegerParameter(16, 256, scaling_type="Linear"),
            "optimizer": module.CategoricalParameter(["sgd", "adam", 3]),
            "momentum": module.ContinuousParameter(0.5, 0.999, scaling_type="ReverseLogarithmic"),
            "layers": module.IntegerParameter(1, 8),
        }
    if shape == "categorical":
        return {
            "optimizer": module.CategoricalParameter(["sgd", "adam"]),
            "batch_size": module.CategoricalParameter([16, 32]),
        }
    if shape == "generic":
        return {
            "eta": module.ContinuousParameter(0.01, 0.5),
            "max_depth": module.IntegerParameter(3, 10, "Logarithmic"),
            "booster": module.CategoricalParameter(["gbtree", "dart"]),
        }
    raise AssertionError(shape)


def _configs(module: Any, case: str) -> dict[str, Any]:
    """The same optional configurations built from the SDK's classes or from ours (``module``)."""
    if case == "hyperband-configs":
        return {
            "strategy_config": module.StrategyConfig(
                module.HyperbandStrategyConfig(max_resource=20, min_resource=2)
            ),
            "completion_criteria_config": module.TuningJobCompletionCriteriaConfig(
                max_number_of_training_jobs_not_improving=5,
                complete_on_convergence=True,
                target_objective_metric_value=0.05,
            ),
        }
    if case == "warm-start":
        return {
            "warm_start_config": module.WarmStartConfig(
                module.WarmStartTypes.TRANSFER_LEARNING, parents={"parent-tune-1"}
            ),
            "completion_criteria_config": module.TuningJobCompletionCriteriaConfig(
                complete_on_convergence=False
            ),
        }
    return {}


# name -> (estimator kind, estimator kwargs, ranges shape, tuner kwargs, inputs, fit kwargs)
CASES: dict[str, tuple[str, dict[str, Any], str, dict[str, Any], Any, dict[str, Any]]] = {
    "bayesian-pytorch": (
        "pytorch",
        PYTORCH,
        "every_kind",
        dict(
            objective_metric_name="validation:accuracy",
            metric_definitions=METRICS,
            max_jobs=20,
            max_parallel_jobs=2,
        ),
        {"training": "s3://my-bucket/data/train"},
        {},
    ),
    "random-minimize": (
        "pytorch",
        PYTORCH,
        "every_kind",
        dict(
            objective_metric_name="train:loss",
            metric_definitions=METRICS,
            strategy="Random",
            objective_type="Minimize",
            max_jobs=10,
            max_parallel_jobs=3,
            early_stopping_type="Auto",
        ),
        "s3://my-bucket/data/train",
        {},
    ),
    "hyperband": (
        "pytorch",
        PYTORCH,
        "every_kind",
        dict(
            objective_metric_name="train:loss",
            metric_definitions=METRICS,
            strategy="Hyperband",
            objective_type="Minimize",
            max_jobs=30,
            max_parallel_jobs=5,
        ),
        None,
        {},
    ),
    "hyperband-configs": (
        "pytorch",
        PYTORCH,
        "every_kind",
        dict(
            objective_metric_name="train:loss",
            metric_definitions=METRICS,
            strategy="Hyperband",
            objective_type="Minimize",
            max_jobs=30,
            max_parallel_jobs=5,
        ),
        None,
        {},
    ),
    "warm-start": (
        "pytorch",
        PYTORCH,
        "categorical",
        dict(objective_metric_name="validation:accuracy", metric_definitions=METRICS, max_jobs=5),
        None,
        {},
    ),
    "grid": (
        "pytorch",
        PYTORCH,
        "categorical",
        dict(
            objective_metric_name="validation:accuracy",
            metric_definitions=METRICS,
            strategy="Grid",
            max_jobs=4,
        ),
        None,
        {},
    ),
    "default-limits": (
        "pytorch",
        PYTORCH,
        "categorical",
        dict(objective_metric_name="validation:accuracy", metric_definitions=METRICS),
        None,
        {},
    ),
    "generic-estimator": (
        "generic",
        GENERIC,
        "generic",
        dict(objective_metric_name="validation:auc", strategy="Random", max_jobs=6, max_parallel_jobs=2),
        {"train": "s3://my-bucket/train", "validation": "s3://my-bucket/validation"},
        {},
    ),
    "generic-cls-metadata-seed-tags": (
        "generic",
        {**GENERIC, "tags": [{"Key": "team", "Value": "ml"}]},
        "generic",
        dict(
            objective_metric_name="validation:auc",
            max_jobs=6,
            random_seed=7,
            max_runtime_in_seconds=7200,
            tags=[{"Key": "project", "Value": "tune"}],
        ),
        None,
        {"include_cls_metadata": True},
    ),
    "pytorch-options": (
        "pytorch",
        {
            **PYTORCH,
            "instance_type": "ml.g5.12xlarge",
            "instance_count": 2,
            "output_path": "s3://out-bucket/prefix/out",
            "max_run": 3600,
            "volume_size": 50,
            "volume_kms_key": "vol-key",
            "output_kms_key": "kms-key-1",
            "environment": {"NCCL_DEBUG": "INFO"},
            "use_spot_instances": True,
            "max_wait": 7200,
            "checkpoint_s3_uri": "s3://ckpt-bucket/run1",
            "checkpoint_local_path": "/opt/ml/checkpoints",
            "subnets": ["subnet-1"],
            "security_group_ids": ["sg-1"],
            "enable_network_isolation": True,
            "encrypt_inter_container_traffic": True,
            "max_retry_attempts": 2,
            "disable_output_compression": True,
            "metric_definitions": [{"Name": "ignored", "Regex": "x=([0-9]+)"}],
            "distribution": {"torch_distributed": {"enabled": True}},
            "keep_alive_period_in_seconds": 600,
        },
        "every_kind",
        dict(objective_metric_name="validation:accuracy", metric_definitions=METRICS, max_jobs=4),
        {"training": "s3://my-bucket/data/train"},
        {},
    ),
    "training-input-mode": (
        "pytorch",
        PYTORCH,
        "categorical",
        dict(objective_metric_name="validation:accuracy", metric_definitions=METRICS, max_jobs=2),
        "TrainingInput",
        {},
    ),
}

# case -> (key path, SDK value, our value). Anything else must be equal.
DELIBERATE_DIFFERENCES: dict[str, list[tuple[tuple[str, ...], Any, Any]]] = {}


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("code") / "src"
    root.mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    return root


@pytest.fixture(scope="module")
def sdk_tuning() -> Any:
    """A function running the real SDK tuner's fit(wait=False) under moto, returning its request."""
    with sdk_session(REGION, "CreateHyperParameterTuningJob", ("my-bucket", "out-bucket", "ckpt-bucket")) as (
        sm_session,
        captured,
    ):

        def run(
            estimator: Any, tuner_kwargs: dict[str, Any], ranges: Any, inputs: Any, **fit: Any
        ) -> dict[str, Any]:
            captured.clear()
            tuner = SdkTuner(estimator, hyperparameter_ranges=ranges, **tuner_kwargs)
            tuner.fit(inputs, wait=False, **fit)
            assert len(captured) == 1
            return captured[0]

        def create(inputs: Any, fit: dict[str, Any], **create_kwargs: Any) -> dict[str, Any]:
            captured.clear()
            tuner = SdkTuner.create(**create_kwargs)
            tuner.fit(inputs, wait=False, **fit)
            assert len(captured) == 1
            return captured[0]

        run.session = sm_session  # type: ignore[attr-defined]
        run.create = create  # type: ignore[attr-defined]
        yield run


def _pair(
    case: str, src: Path, sdk_session: Any
) -> tuple[Any, Any, dict[str, Any], dict[str, Any], Any, Any]:
    kind, estimator_kwargs, shape, tuner_kwargs, inputs, _ = CASES[case]
    kwargs = copy.deepcopy(estimator_kwargs)
    if kind == "pytorch":
        kwargs["source_dir"] = str(src)
        ours = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
        theirs = SdkPyTorch(role=ROLE, sagemaker_session=sdk_session, **copy.deepcopy(kwargs))
    else:
        ours = Estimator(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
        theirs = SdkEstimator(role=ROLE, sagemaker_session=sdk_session, **copy.deepcopy(kwargs))
    our_inputs, sdk_inputs = inputs, inputs
    if inputs == "TrainingInput":
        our_inputs = TrainingInput("s3://my-bucket/train", input_mode="FastFile")
        sdk_inputs = SdkInput("s3://my-bucket/train", input_mode="FastFile")
    return (
        ours,
        theirs,
        tuner_kwargs,
        {"sdk": _ranges(sdk_parameter, shape), "ours": _ranges(smlaunch, shape)},
        our_inputs,
        sdk_inputs,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_equals_sdk_tuning_request(case: str, src: Path, sdk_tuning: Any) -> None:
    ours, theirs, tuner_kwargs, ranges, our_inputs, sdk_inputs = _pair(case, src, sdk_tuning.session)
    fit_kwargs = CASES[case][5]
    job_name = f"tune-{case}"[:32]
    sdk_kwargs = {**tuner_kwargs, **_configs(sdk_tuner, case)}
    sdk = _normalise(
        sdk_tuning(theirs, sdk_kwargs, ranges["sdk"], sdk_inputs, job_name=job_name, **fit_kwargs)
    )
    our_kwargs = {**tuner_kwargs, **_configs(smlaunch, case)}
    tuner = HyperparameterTuner(ours, hyperparameter_ranges=ranges["ours"], **our_kwargs)
    planned = tuner.plan(our_inputs, job_name=job_name, **fit_kwargs)
    assert _differences(sdk, _normalise(planned.to_request())) == DELIBERATE_DIFFERENCES.get(case, [])


def test_generated_tuning_job_name_has_the_sdk_shape(src: Path) -> None:
    estimator = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), source_dir=str(src), **PYTORCH)
    tuner = HyperparameterTuner(estimator, "loss", {"lr": ContinuousParameter(0.01, 0.1)})
    name = tuner.plan().HyperParameterTuningJobName
    assert name.startswith("pytorch-training-") and len(name) == len("pytorch-training-") + 11
    based = HyperparameterTuner(
        estimator,
        "loss",
        {"lr": ContinuousParameter(0.01, 0.1)},
        base_tuning_job_name="a-very-long-tuning-base-name",
    )
    assert len(based.plan().HyperParameterTuningJobName) == 32
    assert based.plan().HyperParameterTuningJobName.startswith("a-very-long-tuning-b-")
    assert BUCKET in tuner.plan().TrainingJobDefinition["OutputDataConfig"]["S3OutputPath"]


def _estimators(kinds: dict[str, str], src: Path, sdk_session: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """name -> (ours, the SDK's) estimator of each kind, the same arguments for both."""
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for name, kind in kinds.items():
        if kind == "pytorch":
            kwargs = {**copy.deepcopy(PYTORCH), "source_dir": str(src)}
            ours[name] = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
            theirs[name] = SdkPyTorch(role=ROLE, sagemaker_session=sdk_session, **copy.deepcopy(kwargs))
        else:
            ours[name] = Estimator(
                role=ROLE, sagemaker_session=FakeSageMakerSession(), **copy.deepcopy(GENERIC)
            )
            theirs[name] = SdkEstimator(role=ROLE, sagemaker_session=sdk_session, **copy.deepcopy(GENERIC))
    return ours, theirs


# name -> (estimator kinds by name, create() kwargs but the estimators and ranges, inputs, fit kwargs)
MULTI_CASES: dict[str, tuple[dict[str, str], dict[str, Any], Any, dict[str, Any]]] = {
    "two-algorithms": (
        {"xgb": "generic", "torch": "pytorch"},
        dict(
            objective_metric_name_dict={"torch": "validation:accuracy", "xgb": "validation:auc"},
            metric_definitions_dict={"torch": METRICS},
            strategy="Random",
            max_jobs=10,
            max_parallel_jobs=2,
            random_seed=3,
            early_stopping_type="Auto",
            tags=[{"Key": "project", "Value": "tune"}],
        ),
        {"torch": "s3://my-bucket/data/train", "xgb": {"train": "s3://my-bucket/train"}},
        {"include_cls_metadata": {"xgb": True}},
    ),
    "two-scripts-one-job-name": (
        {"small": "pytorch", "large": "pytorch"},
        dict(
            objective_metric_name_dict={"small": "validation:accuracy", "large": "validation:accuracy"},
            metric_definitions_dict={"small": METRICS, "large": METRICS},
            objective_type="Maximize",
            max_jobs=4,
            completion_criteria_config="completion",
        ),
        None,
        {"include_cls_metadata": {}},  # the SDK refuses its own default (False) with estimator_dict
    ),
}


@pytest.mark.parametrize("case", sorted(MULTI_CASES))
def test_a_multi_estimator_plan_equals_sdk_tuning_request(case: str, src: Path, sdk_tuning: Any) -> None:
    kinds, kwargs, inputs, fit = MULTI_CASES[case]
    ours, theirs = _estimators(kinds, src, sdk_tuning.session)
    shapes = {"pytorch": "every_kind", "generic": "generic"}
    job_name = f"tune-{case}"[:32]

    def arguments(module: Any) -> dict[str, Any]:
        arguments = copy.deepcopy(kwargs)
        if arguments.get("completion_criteria_config") == "completion":
            arguments["completion_criteria_config"] = module.TuningJobCompletionCriteriaConfig(
                max_number_of_training_jobs_not_improving=4
            )
        ranges = {
            name: _ranges(module if module is smlaunch else sdk_parameter, shapes[kind])
            for name, kind in kinds.items()
        }
        return {**arguments, "hyperparameter_ranges_dict": ranges}

    sdk = _normalise(
        sdk_tuning.create(
            inputs, {"job_name": job_name, **fit}, estimator_dict=theirs, **arguments(sdk_tuner)
        )
    )
    tuner = HyperparameterTuner.create(estimator_dict=ours, **arguments(smlaunch))
    planned = _normalise(tuner.plan(inputs, job_name=job_name, **fit).to_request())
    sdk_definitions, our_definitions = (
        sdk.pop("TrainingJobDefinitions"),
        planned.pop("TrainingJobDefinitions"),
    )
    assert _differences(sdk, planned) == []
    assert [d["DefinitionName"] for d in our_definitions] == sorted(kinds)
    assert len(sdk_definitions) == len(our_definitions)
    for index, (theirs_one, ours_one) in enumerate(zip(sdk_definitions, our_definitions, strict=True)):
        expected = []
        if case == "two-scripts-one-job-name" and index == 1:
            # Deliberate: the SDK stages both estimators' code at one key (the last upload wins);
            # the second definition's code is staged under its own name here.
            submit = ("StaticHyperParameters", "sagemaker_submit_directory")
            code = f"s3://{BUCKET}/{job_name}/source/sourcedir.tar.gz"
            expected = [(submit, json.dumps(code), json.dumps(code.replace("/source/", "/small/source/")))]
        assert _differences(theirs_one, ours_one) == expected, ours_one["DefinitionName"]


def test_create_checks_its_dicts_as_the_sdk_does(src: Path) -> None:
    ours, _ = _estimators({"a": "pytorch", "b": "generic"}, src, None)
    ranges = {"a": _ranges(smlaunch, "every_kind"), "b": _ranges(smlaunch, "generic")}
    objectives = {"a": "loss", "b": "auc"}
    with pytest.raises(smlaunch.ConfigurationError, match="objective_metric_name_dict"):
        HyperparameterTuner.create(ours, {"a": "loss"}, ranges)
    with pytest.raises(smlaunch.ConfigurationError, match="metric_definitions_dict"):
        HyperparameterTuner.create(ours, objectives, ranges, {"c": METRICS})
    with pytest.raises(smlaunch.ConfigurationError, match="estimator_dict"):
        HyperparameterTuner.create({}, {}, {})
    with pytest.raises(smlaunch.ConfigurationError, match="max_parallel_jobs"):
        HyperparameterTuner.create(ours, objectives, ranges, max_parallel_jobs=0)
    tuner = HyperparameterTuner.create(ours, objectives, ranges, strategy="Random")
    assert tuner.estimator_dict == ours and tuner.estimator is ours["a"] and tuner.strategy == "Random"
    with pytest.raises(smlaunch.ConfigurationError, match="inputs"):
        tuner.plan({"c": "s3://my-bucket/x"})
