"""The arguments of ``HyperparameterTuner``: SDK v2's, checked as the service would check them
before anything is sent, each error naming the argument, the value and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.estimator import Estimator
from smlaunch.sdk.request import validation
from smlaunch.sdk.tuning import request
from smlaunch.sdk.tuning.configs import StrategyConfig, TuningJobCompletionCriteriaConfig, WarmStartConfig
from smlaunch.sdk.tuning.parameters import (
    CategoricalParameter,
    ContinuousParameter,
    IntegerParameter,
    ParameterRange,
)

STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
OBJECTIVE_TYPES = ("Maximize", "Minimize")
EARLY_STOPPING_TYPES = ("Off", "Auto")


def _one_of(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigurationError(field, value, f"must be one of {', '.join(allowed)}", f"pass {allowed[0]!r}")
    return str(value)


def check_arguments(
    estimator: Any,
    objective_metric_name: Any,
    hyperparameter_ranges: Any,
    metric_definitions: Any,
    strategy: Any,
    objective_type: Any,
    max_jobs: Any,
    max_parallel_jobs: Any,
    max_runtime_in_seconds: Any,
    tags: Any,
    base_tuning_job_name: Any,
    early_stopping_type: Any,
    random_seed: Any,
    warm_start_config: Any = None,
    strategy_config: Any = None,
    completion_criteria_config: Any = None,
) -> request.TunerArgs:
    """The tuner's arguments, checked as the service would check them, before anything is sent."""
    if not isinstance(estimator, Estimator):
        raise ConfigurationError(
            "estimator",
            estimator,
            f"must be an smlaunch estimator, not {type(estimator).__name__}",
            "pass e.g. smlaunch.PyTorch(...) or smlaunch.Estimator(...)",
        )
    require_type("objective_metric_name", objective_metric_name, str, "pass e.g. 'validation:loss'")
    if not objective_metric_name:
        raise ConfigurationError("objective_metric_name", "", "is empty", "pass e.g. 'validation:loss'")
    if not isinstance(hyperparameter_ranges, Mapping) or not hyperparameter_ranges:
        raise ConfigurationError(
            "hyperparameter_ranges",
            hyperparameter_ranges,
            "must be a non-empty dict of name -> range",
            "pass e.g. {'lr': ContinuousParameter(1e-5, 1e-2)}",
        )
    ranges: dict[str, ParameterRange] = {}
    for name, parameter in hyperparameter_ranges.items():
        require_type("hyperparameter_ranges key", name, str, "name each range by its hyperparameter")
        require_type(
            f"hyperparameter_ranges[{name!r}]",
            parameter,
            (IntegerParameter, ContinuousParameter, CategoricalParameter),
            "pass smlaunch.IntegerParameter, ContinuousParameter or CategoricalParameter",
        )
        ranges[name] = parameter
    metrics = validation.check_metrics(metric_definitions)
    if metrics is not None and objective_metric_name not in [m["Name"] for m in metrics]:
        raise ConfigurationError(
            "objective_metric_name",
            objective_metric_name,
            "is not among metric_definitions' names",
            "add {'Name': objective_metric_name, 'Regex': ...} to metric_definitions",
        )
    strategy = _one_of("strategy", strategy, STRATEGIES)
    if strategy == "Grid":
        numeric = [name for name, value in ranges.items() if not isinstance(value, CategoricalParameter)]
        if numeric:
            raise ConfigurationError(
                f"hyperparameter_ranges[{numeric[0]!r}]",
                ranges[numeric[0]],
                "the Grid strategy searches categorical ranges only",
                "make it a CategoricalParameter of the values to try, or use strategy='Bayesian'",
            )
    require_type(
        "warm_start_config",
        warm_start_config,
        (WarmStartConfig, type(None)),
        "pass smlaunch.WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, parents={...})",
    )
    require_type(
        "strategy_config",
        strategy_config,
        (StrategyConfig, type(None)),
        "pass smlaunch.StrategyConfig(HyperbandStrategyConfig(max_resource=..., min_resource=...))",
    )
    if strategy_config is not None and strategy != "Hyperband":
        raise ConfigurationError(
            "strategy_config",
            strategy_config,
            f"is Hyperband's, and strategy={strategy!r}",
            "pass strategy='Hyperband'",
        )
    require_type(
        "completion_criteria_config",
        completion_criteria_config,
        (TuningJobCompletionCriteriaConfig, type(None)),
        "pass smlaunch.TuningJobCompletionCriteriaConfig(max_number_of_training_jobs_not_improving=5)",
    )
    if max_jobs is not None:
        max_jobs = validation.positive_int(max_jobs, "max_jobs", "training jobs, e.g. 20")
    elif strategy != "Grid":
        max_jobs = 1  # the SDK's default but for Grid, which counts the combinations itself
    if max_runtime_in_seconds is not None:
        max_runtime_in_seconds = validation.positive_int(
            max_runtime_in_seconds, "max_runtime_in_seconds", "seconds, e.g. 86400"
        )
    if random_seed is not None:
        require_type("random_seed", random_seed, int, "pass an integer, e.g. 42")
    if base_tuning_job_name is not None:
        require_type("base_tuning_job_name", base_tuning_job_name, str, "pass e.g. 'bert-tune'")
        request.validate_tuning_job_name(
            request.tuning_job_name(base_tuning_job_name, datetime(2000, 1, 1, tzinfo=timezone.utc)),
            "base_tuning_job_name",
        )
    return request.TunerArgs(
        objective_metric_name=objective_metric_name,
        hyperparameter_ranges=ranges,
        metric_definitions=metrics,
        strategy=strategy,
        objective_type=_one_of("objective_type", objective_type, OBJECTIVE_TYPES),
        max_jobs=max_jobs,
        max_parallel_jobs=validation.positive_int(max_parallel_jobs, "max_parallel_jobs", "jobs, e.g. 2"),
        max_runtime_in_seconds=max_runtime_in_seconds,
        tags=validation.check_tags(tags),
        base_tuning_job_name=base_tuning_job_name,
        early_stopping_type=_one_of("early_stopping_type", early_stopping_type, EARLY_STOPPING_TYPES),
        random_seed=random_seed,
        warm_start_config=warm_start_config,
        strategy_config=strategy_config,
        completion_criteria_config=completion_criteria_config,
    )
