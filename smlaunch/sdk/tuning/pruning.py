"""Stopping a local tuning job's trials early: ``Strategy='Hyperband'`` and
``TrainingJobEarlyStoppingType='Auto'``, decided on each trial's intermediate objective values.

A trial's objective series is the objective metric's values, in order, as its logs printed them
(the job's ``metrics.jsonl``, read with the metric definitions as SageMaker reads them;
:func:`objective_series`): the n-th value is the trial's step n, SageMaker's "epoch" and
Hyperband's unit of resource. The agent reports every new value to the trial's optuna trial
(:func:`report`) and asks :func:`decision` whether to stop it; a trial to stop is stopped through
the training job's own stop path.

- ``Auto`` is SageMaker's median stopping rule (:func:`median_rule_stops`), an optuna pruner here
  (:func:`pruner`): after each step, a trial whose value is worse than the median of the running
  averages, up to that step, of the trials started before it is stopped. Our choice where
  SageMaker says nothing: the rule waits for :data:`MIN_EARLIER_TRIALS` earlier trials to have
  reached the step, so that the median is one of several.
- ``Hyperband`` is optuna's ``HyperbandPruner`` with ``min_resource=MinResource`` and
  ``max_resource=MaxResource`` of the ``HyperbandStrategyConfig`` (:func:`hyperband_resources`):
  a trial is never stopped before ``MinResource`` steps, and is stopped once it reaches
  ``MaxResource`` steps, as SageMaker stops it. Without a strategy config, ``MaxResource`` is read
  from the static hyperparameters ``epochs``, ``numepochs``, ``n-epochs``, ``n_epochs`` or
  ``num_epochs`` as SageMaker reads it (``MinResource`` is then 1); without either the tuning
  job is refused, as SageMaker's validation refuses it. optuna's reduction factor (3) is
  Hyperband's usual one; SageMaker does not name its own.

optuna is imported only by the functions that need it (the ``tuning`` extra).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.request import hyperparameters as hp

MIN_EARLIER_TRIALS = 3
"""Earlier trials that must have reached a step before the median stopping rule stops a trial at it."""
EPOCH_HYPERPARAMETERS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")
"""The static hyperparameters SageMaker reads Hyperband's ``MaxResource`` from when none is given."""
PRUNED = "pruned"
"""A :func:`decision`: the pruner stopped the trial (worse than its peers at its last step)."""
MAX_RESOURCE = "max resource"
"""A :func:`decision`: the trial reached Hyperband's ``MaxResource``; it is stopped, not worse."""


def objective_series(records: Sequence[MetricRecord], metric: str) -> list[float]:
    """The objective's values in the order they were printed, from the first host that printed it
    (on a multi-host trial each host may print it: one host's values are the trial's steps)."""
    hosts = [r.host for r in records if r.name == metric]
    return [r.value for r in records if r.name == metric and r.host == hosts[0]] if hosts else []


def median_rule_stops(series: Sequence[float], earlier: Sequence[Sequence[float]], maximize: bool) -> bool:
    """Whether SageMaker's median stopping rule stops a trial whose objective values so far are
    ``series`` (step 1 first), given the series of the trials started before it: its last value
    is worse than the median of the earlier trials' running averages up to the same step."""
    step = len(series)
    if step == 0:
        return False
    averages = [statistics.fmean(other[:step]) for other in earlier if len(other) >= step]
    if len(averages) < MIN_EARLIER_TRIALS:
        return False
    median = statistics.median(averages)
    return series[-1] < median if maximize else series[-1] > median


def hyperband_resources(request: Mapping[str, Any]) -> tuple[int, int]:
    """``(MinResource, MaxResource)`` of a Hyperband CreateHyperParameterTuningJob request; see the
    module docstring for the defaults. :class:`ConfigurationError` when there is no MaxResource."""
    config = request["HyperParameterTuningJobConfig"].get("StrategyConfig") or {}
    hyperband = config.get("HyperbandStrategyConfig") or {}
    if hyperband.get("MaxResource") is not None:
        return int(hyperband.get("MinResource") or 1), int(hyperband["MaxResource"])
    static = request["TrainingJobDefinition"].get("StaticHyperParameters") or {}
    for name in EPOCH_HYPERPARAMETERS:
        if name in static:
            try:
                return 1, max(1, int(float(hp.decode_value(static[name]))))
            except (TypeError, ValueError):
                raise ConfigurationError(
                    f"hyperparameters[{name!r}]",
                    static[name],
                    "is Hyperband's MaxResource and is not a number of epochs",
                    "pass a whole number, or strategy_config=StrategyConfig(HyperbandStrategyConfig(...))",
                ) from None
    raise ConfigurationError(
        "strategy_config",
        None,
        "Hyperband needs a MaxResource (the steps a trial runs at most): none was given and no "
        f"static hyperparameter names it ({', '.join(EPOCH_HYPERPARAMETERS)})",
        "pass strategy_config=StrategyConfig(HyperbandStrategyConfig(max_resource=10, min_resource=1))",
    )


def pruner(request: Mapping[str, Any]) -> Any:
    """The optuna pruner of a tuning job's request: Hyperband's, the median stopping rule for
    early stopping ``Auto``, or None (trials run to their end)."""
    import optuna

    config = request["HyperParameterTuningJobConfig"]
    if config["Strategy"] == "Hyperband":
        low, high = hyperband_resources(request)
        return optuna.pruners.HyperbandPruner(min_resource=low, max_resource=high)
    if config.get("TrainingJobEarlyStoppingType", "Off") != "Auto":
        return None
    maximize = config["HyperParameterTuningJobObjective"]["Type"] == "Maximize"

    class MedianStoppingRule(optuna.pruners.BasePruner):
        """SageMaker's median stopping rule (:func:`median_rule_stops`) as an optuna pruner."""

        def prune(self, study: Any, trial: Any) -> bool:
            earlier = [
                _series(other)
                for other in study.get_trials(deepcopy=False)
                if other.number < trial.number and other.intermediate_values
            ]
            return median_rule_stops(_series(trial), earlier, maximize)

    return MedianStoppingRule()


def _series(trial: Any) -> list[float]:
    """A trial's reported values, step 1 first (steps are reported without gaps)."""
    values: Mapping[int, float] = trial.intermediate_values
    return [values[step] for step in sorted(values)]


def report(trial: Any, series: Sequence[float], reported: int) -> int:
    """Report the values of ``series`` after the first ``reported`` to ``trial`` (step n for the
    n-th value); the number reported now in all."""
    for step in range(reported + 1, len(series) + 1):
        trial.report(series[step - 1], step)
    return max(reported, len(series))


def decision(trial: Any, steps: int, max_resource: int | None) -> str | None:
    """Whether to stop a running trial that has reported ``steps`` values: :data:`MAX_RESOURCE`,
    :data:`PRUNED` or None (it runs on)."""
    if steps == 0:
        return None
    if max_resource is not None and steps >= max_resource:
        return MAX_RESOURCE
    return PRUNED if trial.should_prune() else None
