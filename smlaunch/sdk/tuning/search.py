"""The search of a local tuning job: CreateHyperParameterTuningJob's ``ParameterRanges`` and
``Strategy`` as an optuna study, asked and told one trial at a time.

:func:`distributions` turns the wire ranges into optuna distributions (``Logarithmic`` ranges on a
log scale; ``Auto`` and ``Linear`` on a linear one); :func:`sampler` picks the sampler of a
strategy (``Random`` -> ``RandomSampler``, ``Grid`` -> ``GridSampler`` over the categorical values,
``Bayesian`` and ``Hyperband`` -> ``TPESampler``, which optuna keeps to the trials of a trial's own
Hyperband bracket), seeded by ``RandomSeed`` so that a seeded tuning job asks the same
hyperparameters again; :func:`wire_values` is a trial's hyperparameters as the trial's request
carries them. :func:`local_refusal` says what a local tuning job does not run. optuna is imported
only by the functions that need it (the ``tuning`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from smlaunch.sdk.tuning import completion

LOCAL_STRATEGIES = ("Bayesian", "Random", "Grid", "Hyperband")
"""The strategies a local tuning job runs (Hyperband's pruning: :mod:`smlaunch.sdk.tuning.pruning`)."""


def local_refusal(config: Mapping[str, Any]) -> tuple[str, Any, str, str] | None:
    """``(field, value, problem, fix)`` for what a local tuning job cannot run in the tuning job's
    ``HyperParameterTuningJobConfig``, or None when it runs all of it."""
    strategy = config.get("Strategy")
    if strategy not in LOCAL_STRATEGIES:
        return (
            "strategy",
            strategy,
            f"must be one of {', '.join(LOCAL_STRATEGIES)}",
            "pass strategy='Bayesian'",
        )
    if strategy == "Hyperband" and config.get("TrainingJobEarlyStoppingType", "Off") != "Off":
        return (
            "early_stopping_type",
            config["TrainingJobEarlyStoppingType"],
            "Hyperband stops trials early itself; SageMaker requires early_stopping_type='Off' with it",
            "pass early_stopping_type='Off' with strategy='Hyperband'",
        )
    refusal = completion.local_refusal(config)
    if refusal is not None:
        return refusal
    for entry in config.get("ParameterRanges", {}).get("ContinuousParameterRanges", []) + config.get(
        "ParameterRanges", {}
    ).get("IntegerParameterRanges", []):
        if entry.get("ScalingType") == "ReverseLogarithmic":
            return (
                f"hyperparameter_ranges[{entry['Name']!r}].scaling_type",
                "ReverseLogarithmic",
                "local tuning jobs search Linear and Logarithmic scales only",
                "pass scaling_type='Linear' or 'Logarithmic', or run the tuning job on SageMaker",
            )
    return None


def distributions(ranges: Mapping[str, Any]) -> dict[str, Any]:
    """Name -> optuna distribution of every range in ``ParameterRanges``; categorical values are
    the wire strings (JSON-encoded for a framework estimator), so a trial's value is sent as is."""
    import optuna

    found: dict[str, Any] = {}
    for entry in ranges.get("CategoricalParameterRanges", []):
        found[entry["Name"]] = optuna.distributions.CategoricalDistribution(list(entry["Values"]))
    for entry in ranges.get("ContinuousParameterRanges", []):
        found[entry["Name"]] = optuna.distributions.FloatDistribution(
            float(entry["MinValue"]), float(entry["MaxValue"]), log=entry.get("ScalingType") == "Logarithmic"
        )
    for entry in ranges.get("IntegerParameterRanges", []):
        found[entry["Name"]] = optuna.distributions.IntDistribution(
            int(entry["MinValue"]), int(entry["MaxValue"]), log=entry.get("ScalingType") == "Logarithmic"
        )
    return found


def grid_size(ranges: Mapping[str, Any]) -> int:
    """How many combinations a Grid search over the (categorical) ranges has."""
    return math.prod(len(entry["Values"]) for entry in ranges.get("CategoricalParameterRanges", []))


def sampler(strategy: str, ranges: Mapping[str, Any], seed: int | None) -> Any:
    """The optuna sampler of ``strategy`` (one of :data:`LOCAL_STRATEGIES`), seeded with ``seed``."""
    import optuna

    if strategy == "Random":
        return optuna.samplers.RandomSampler(seed=seed)
    if strategy == "Grid":
        grid = {
            entry["Name"]: list(entry["Values"]) for entry in ranges.get("CategoricalParameterRanges", [])
        }

        class AskAndTellGrid(optuna.samplers.GridSampler):
            """``GridSampler`` without its end of search: that calls ``Study.stop()``, which raises
            outside ``optimize()``; the agent asks no more than :func:`grid_size` trials itself."""

            def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
                return None

        return AskAndTellGrid(grid, seed=seed)
    if strategy in ("Bayesian", "Hyperband"):
        return optuna.samplers.TPESampler(seed=seed)
    raise ValueError(f"no local sampler for strategy {strategy!r}")


def wire_values(params: Mapping[str, Any]) -> dict[str, str]:
    """A trial's hyperparameters as its training request carries them (``TunedHyperParameters``):
    numbers as text, categorical values as they are."""
    return {name: value if isinstance(value, str) else repr(value) for name, value in params.items()}
