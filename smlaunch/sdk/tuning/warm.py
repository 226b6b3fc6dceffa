"""Warm start of a local tuning job from earlier local tuning jobs of the same store (its
``WarmStartConfig.ParentHyperParameterTuningJobs``).

:func:`check_parents` refuses, before anything starts, parents that do not exist here, still
run, or optimise another objective (SageMaker refuses these too). :func:`parent_trials` reads the
parents' trials that ended with an objective value; the agent adds them to its study as finished
trials, so the sampler starts from what the parents learnt. Both warm start types read them the
same way: ``IdenticalDataAndAlgorithm`` and ``TransferLearning`` differ in what SageMaker lets
change between parent and child, not in how the search reuses the parents. A parent trial's
hyperparameters outside the child's ranges are left out of what it teaches (a trial with none
inside is left out whole). With ``IdenticalDataAndAlgorithm``, the child's description carries
``OverallBestTrainingJob``: the best trial of the child and of its parents (:func:`overall_best`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.tuning import local

IDENTICAL = "IdenticalDataAndAlgorithm"


def parents(warm_start: Mapping[str, Any] | None) -> list[str]:
    """The parent tuning jobs' names in a request's ``WarmStartConfig`` (none without one)."""
    entries = (warm_start or {}).get("ParentHyperParameterTuningJobs", [])
    return [entry["HyperParameterTuningJobName"] for entry in entries]


def check_parents(root: Path, request: Mapping[str, Any]) -> None:
    """Refuse a warm start whose parents the local tuning job cannot read (see the module docstring)."""
    objective = request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
    for name in parents(request.get("WarmStartConfig")):
        try:
            parent = local.describe(root, name)
        except local.TuningJobNotFoundError:
            raise ConfigurationError(
                "warm_start_config.parents",
                name,
                f"is no local tuning job under {root}",
                "name tuning jobs this LocalSession ran (smlaunch.LocalSession(root=...) of the same root)",
            ) from None
        if parent["HyperParameterTuningJobStatus"] not in local.TERMINAL:
            raise ConfigurationError(
                "warm_start_config.parents",
                name,
                f"is still {parent['HyperParameterTuningJobStatus']}",
                "wait for it (HyperparameterTuner.attach(name).wait()) or stop it first",
            )
        theirs = parent["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        if (theirs["MetricName"], theirs["Type"]) != (objective["MetricName"], objective["Type"]):
            raise ConfigurationError(
                "warm_start_config.parents",
                name,
                f"optimises {theirs['Type']} {theirs['MetricName']!r}, not "
                f"{objective['Type']} {objective['MetricName']!r}",
                "warm start from tuning jobs with the same objective metric and objective type",
            )


def _value(wire: str, distribution: Any) -> Any:
    """The optuna value of the wire text ``wire`` in ``distribution``, or None when outside it."""
    import optuna

    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return wire if wire in distribution.choices else None
    try:
        number = float(wire)
    except ValueError:
        return None
    if isinstance(distribution, optuna.distributions.IntDistribution):
        if number != int(number):
            return None
        number = int(number)
    return number if distribution.low <= number <= distribution.high else None


def parent_trials(root: Path, names: Iterable[str], distributions: Mapping[str, Any]) -> list[Any]:
    """The parents' trials that ended with an objective value, as finished optuna trials over the
    child's ``distributions`` (see the module docstring for what is left out)."""
    import optuna

    found = []
    for name in names:
        for summary in local.training_job_summaries(root, name):
            if summary.get("ObjectiveStatus") != "Succeeded":
                continue
            params: dict[str, Any] = {}
            for key, wire in summary.get("TunedHyperParameters", {}).items():
                if key in distributions and (value := _value(wire, distributions[key])) is not None:
                    params[key] = value
            if not params:
                continue
            found.append(
                optuna.trial.create_trial(
                    params=params,
                    distributions={key: distributions[key] for key in params},
                    value=summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
                )
            )
    return found


def overall_best(
    root: Path, warm_start: Mapping[str, Any] | None, own: dict[str, Any] | None, maximize: bool
) -> dict[str, Any] | None:
    """``OverallBestTrainingJob``: with ``IdenticalDataAndAlgorithm``, the best of ``own`` (the
    child's ``BestTrainingJob``) and its parents' overall best; None for other warm starts."""
    if not warm_start or warm_start.get("WarmStartType") != IDENTICAL:
        return None
    candidates = [own] if own else []
    for name in parents(warm_start):
        state = local.raw_state(root, name)
        best = state.get("OverallBestTrainingJob") or state.get("BestTrainingJob")
        if best:
            candidates.append(best)
    if not candidates:
        return None
    sign = 1 if maximize else -1
    return max(candidates, key=lambda s: sign * s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
