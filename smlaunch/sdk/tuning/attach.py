"""The inverse of :mod:`.request`: a DescribeHyperParameterTuningJob answer -> the estimator class,
its arguments and the tuner's arguments that sent it (``HyperparameterTuner.attach``); for a tuning
job of several training job definitions, each definition's estimator and ``create()``'s arguments
(:func:`create_arguments`, the inverse of :mod:`.multi`).

The estimator comes back through :func:`smlaunch.sdk.request.describe.arguments`, the inverse the
estimator's own ``attach`` uses, from the ``TrainingJobDefinition`` re-shaped as a training job's
description; its class from the static hyperparameters the SDK names it in (the generic
``Estimator`` when none). The tuned hyperparameters' ranges come back typed, as the SDK's ``attach``
rebuilds them (scaling types included, which the SDK's drops).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from smlaunch.sdk.errors import UnsupportedFeatureError
from smlaunch.sdk.request import describe
from smlaunch.sdk.tuning import request
from smlaunch.sdk.tuning.configs import StrategyConfig, TuningJobCompletionCriteriaConfig, WarmStartConfig
from smlaunch.sdk.tuning.parameters import (
    CategoricalParameter,
    ContinuousParameter,
    IntegerParameter,
    ParameterRange,
)


def _estimator_class(framework: str | None) -> type:
    # Imported here: the estimator classes are what the tuner module already loaded.
    if framework == "pytorch":
        from smlaunch.sdk.pytorch import PyTorch

        return PyTorch
    if framework == "tensorflow":
        from smlaunch.sdk.tensorflow import TensorFlow

        return TensorFlow
    from smlaunch.sdk.estimator import Estimator

    return Estimator


def framework(static: Mapping[str, str]) -> str | None:
    """Which estimator the static hyperparameters name (:data:`request.SDK_CLASSES`), None: generic."""
    raw = static.get(request.ESTIMATOR_CLASS_KEY)
    class_name = json.loads(raw) if raw else None
    for candidate, (name, _module) in request.SDK_CLASSES.items():
        if name == class_name:
            return candidate
    return None


def parameter_ranges(wire: Mapping[str, Any], json_categories: bool) -> dict[str, ParameterRange]:
    """``ParameterRanges`` as range objects (categorical values JSON-decoded for a framework)."""
    ranges: dict[str, ParameterRange] = {}
    for entry in wire.get("CategoricalParameterRanges") or []:
        values = [json.loads(v) for v in entry["Values"]] if json_categories else list(entry["Values"])
        ranges[entry["Name"]] = CategoricalParameter(values)
    for entry in wire.get("ContinuousParameterRanges") or []:
        ranges[entry["Name"]] = ContinuousParameter(
            float(entry["MinValue"]), float(entry["MaxValue"]), entry.get("ScalingType", "Auto")
        )
    for entry in wire.get("IntegerParameterRanges") or []:
        ranges[entry["Name"]] = IntegerParameter(
            int(entry["MinValue"]), int(entry["MaxValue"]), entry.get("ScalingType", "Auto")
        )
    return ranges


def _estimator(definition: Mapping[str, Any], tuning_job_name: str) -> tuple[type, dict[str, Any], bool]:
    """(estimator class, its keyword arguments but the session, whether it is a framework's) of
    one training job definition."""
    static = {
        key: value
        for key, value in (definition.get("StaticHyperParameters") or {}).items()
        if key not in (request.OBJECTIVE_KEY, request.ESTIMATOR_CLASS_KEY, request.ESTIMATOR_MODULE_KEY)
    }
    chosen = framework(definition.get("StaticHyperParameters") or {})
    resources = definition.get("HyperParameterTuningResourceConfig") or definition.get("ResourceConfig") or {}
    as_training_job = {
        **definition,
        "TrainingJobName": tuning_job_name,
        "HyperParameters": static,
        "ResourceConfig": resources,
    }
    estimator_kwargs = describe.arguments(as_training_job, chosen)
    estimator_kwargs.pop("base_job_name", None)  # a tuning job's name is no trial's base
    return _estimator_class(chosen), estimator_kwargs, chosen is not None


def _shared(description: Mapping[str, Any]) -> dict[str, Any]:
    """The tuner's keyword arguments of the tuning job's config (those every definition shares)."""
    config = description["HyperParameterTuningJobConfig"]
    limits = config.get("ResourceLimits") or {}
    shared: dict[str, Any] = {
        "strategy": config.get("Strategy", "Bayesian"),
        "max_jobs": limits.get("MaxNumberOfTrainingJobs"),
        "max_parallel_jobs": limits.get("MaxParallelTrainingJobs", 1),
        "max_runtime_in_seconds": limits.get("MaxRuntimeInSeconds"),
        "early_stopping_type": config.get("TrainingJobEarlyStoppingType", "Off"),
        "random_seed": config.get("RandomSeed"),
        "base_tuning_job_name": request.base_from_tuning_job_name(description["HyperParameterTuningJobName"]),
        "warm_start_config": WarmStartConfig.from_job_desc(description.get("WarmStartConfig")),
    }
    if config.get("StrategyConfig"):
        shared["strategy_config"] = StrategyConfig.from_job_desc(config["StrategyConfig"])
    if config.get("TuningJobCompletionCriteria"):
        shared["completion_criteria_config"] = TuningJobCompletionCriteriaConfig.from_job_desc(
            config["TuningJobCompletionCriteria"]
        )
    return shared


def arguments(description: Mapping[str, Any]) -> tuple[type, dict[str, Any], dict[str, Any]]:
    """(estimator class, its keyword arguments but the session, the tuner's keyword arguments but
    the estimator) of the tuning job ``description`` describes (one training job definition)."""
    definition = description.get("TrainingJobDefinition")
    if definition is None:
        raise UnsupportedFeatureError(
            "attach() to a tuning job without a TrainingJobDefinition this way",
            "HyperparameterTuner.attach(name) rebuilds a tuner of several definitions with create()",
        )
    estimator_cls, estimator_kwargs, json_categories = _estimator(
        definition, description["HyperParameterTuningJobName"]
    )
    config = description["HyperParameterTuningJobConfig"]
    objective = config.get("HyperParameterTuningJobObjective") or {}
    tuner_kwargs: dict[str, Any] = {
        "objective_metric_name": objective.get("MetricName"),
        "objective_type": objective.get("Type", "Maximize"),
        "hyperparameter_ranges": parameter_ranges(config.get("ParameterRanges") or {}, json_categories),
        "metric_definitions": (definition.get("AlgorithmSpecification") or {}).get("MetricDefinitions"),
        **_shared(description),
    }
    return estimator_cls, estimator_kwargs, tuner_kwargs


def create_arguments(
    description: Mapping[str, Any],
) -> tuple[dict[str, tuple[type, dict[str, Any]]], dict[str, Any]]:
    """For a tuning job of several training job definitions (``TrainingJobDefinitions``, as
    ``HyperparameterTuner.create`` sends it): each definition's estimator class and keyword
    arguments but the session, by ``DefinitionName``, and ``create()``'s other keyword arguments
    (the dictionaries by definition name, then the shared arguments)."""
    name = description["HyperParameterTuningJobName"]
    estimators: dict[str, tuple[type, dict[str, Any]]] = {}
    objectives: dict[str, str] = {}
    ranges: dict[str, dict[str, ParameterRange]] = {}
    metrics: dict[str, list[dict[str, str]]] = {}
    objective_type = "Maximize"
    for definition in description["TrainingJobDefinitions"]:
        key = definition["DefinitionName"]
        estimator_cls, estimator_kwargs, json_categories = _estimator(definition, name)
        estimators[key] = (estimator_cls, estimator_kwargs)
        objective = definition.get("TuningObjective") or {}
        objectives[key] = str(objective["MetricName"])
        objective_type = objective.get("Type", objective_type)  # one type for all, as create() sends it
        ranges[key] = parameter_ranges(definition.get("HyperParameterRanges") or {}, json_categories)
        defined = (definition.get("AlgorithmSpecification") or {}).get("MetricDefinitions")
        if defined:
            metrics[key] = defined
    create_kwargs: dict[str, Any] = {
        "objective_metric_name_dict": objectives,
        "hyperparameter_ranges_dict": ranges,
        "metric_definitions_dict": metrics or None,
        "objective_type": objective_type,
        **_shared(description),
    }
    return estimators, create_kwargs
