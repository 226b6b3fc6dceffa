"""When a local tuning job ends before it has run ``MaxNumberOfTrainingJobs`` trials: its
``TuningJobCompletionCriteria`` and ``ResourceLimits.MaxRuntimeInSeconds``, as pure decisions.

- ``TargetObjectiveMetricValue``: once a trial's objective reaches the target (at or above it when
  maximising, at or below when minimising);
- ``BestObjectiveNotImproving.MaxNumberOfTrainingJobsNotImproving``: once that many trials in a
  row, in the order they ended with an objective, did not improve on the best objective before
  them by more than 1% (:func:`not_improving`, also DescribeHyperParameterTuningJob's
  ``TuningJobCompletionDetails.NumberOfTrainingJobsObjectiveNotImproving``);
- ``MaxRuntimeInSeconds``: once the tuning job has run that long.

The agent then starts no more trials, stops the running ones through their stop path, and ends
the tuning job Completed (:func:`end_reason` says why, for its log). ``ConvergenceDetected`` needs
SageMaker's own convergence model: a local tuning job refuses ``CompleteOnConvergence='Enabled'``
(:func:`local_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def local_refusal(config: Mapping[str, Any]) -> tuple[str, Any, str, str] | None:
    """``(field, value, problem, fix)`` for completion criteria a local tuning job cannot apply."""
    criteria = config.get("TuningJobCompletionCriteria") or {}
    if (criteria.get("ConvergenceDetected") or {}).get("CompleteOnConvergence") == "Enabled":
        return (
            "completion_criteria_config.complete_on_convergence",
            True,
            "local tuning jobs have no model of convergence (SageMaker's is its own)",
            "pass max_number_of_training_jobs_not_improving=... instead, or run the tuning job on SageMaker",
        )
    return None


IMPROVEMENT = 0.01
"""A trial improves the best objective when it beats it by more than this fraction of it (SageMaker
counts an improvement of 1% or less as not improving)."""


def not_improving(values: Sequence[float], maximize: bool) -> int:
    """How many of the objective values ``values`` (in the order their trials ended), counted back
    from the last, came after the best one without improving on it (:data:`IMPROVEMENT`)."""
    if not values:
        return 0
    best, since = values[0], 0
    for value in values[1:]:
        gain = value - best if maximize else best - value
        if gain > IMPROVEMENT * abs(best):
            best, since = value, 0
        else:
            since += 1
            if gain > 0:
                best = value  # the best so far, though not by enough to count as improving
    return since


def end_reason(
    config: Mapping[str, Any], values: Sequence[float], maximize: bool, elapsed: float
) -> str | None:
    """Why the tuning job of ``HyperParameterTuningJobConfig`` ``config`` ends now, or None: its
    trials' objective values so far are ``values`` (in the order they ended) and it has run for
    ``elapsed`` seconds."""
    criteria = config.get("TuningJobCompletionCriteria") or {}
    target = criteria.get("TargetObjectiveMetricValue")
    if target is not None and any(v >= target if maximize else v <= target for v in values):
        return f"a trial's objective reached TargetObjectiveMetricValue={target}"
    patience = (criteria.get("BestObjectiveNotImproving") or {}).get("MaxNumberOfTrainingJobsNotImproving")
    if patience is not None and not_improving(values, maximize) >= patience:
        return f"{patience} training jobs in a row did not improve the best objective"
    limit = (config.get("ResourceLimits") or {}).get("MaxRuntimeInSeconds")
    if limit is not None and elapsed >= limit:
        return f"the tuning job ran MaxRuntimeInSeconds={limit}"
    return None
