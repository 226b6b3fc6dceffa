"""Early stopping and completion of a local tuning job as pure decisions on metric series: the
median stopping rule, Hyperband's pruner and resources, and the completion criteria."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.tuning import completion, pruning, search

optuna = pytest.importorskip("optuna")

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_the_objective_series_is_one_hosts_values_in_order() -> None:
    records = [
        MetricRecord(name="loss", value=3.0, time=AT, host="algo-1"),
        MetricRecord(name="acc", value=0.1, time=AT, host="algo-1"),
        MetricRecord(name="loss", value=3.5, time=AT, host="algo-2"),
        MetricRecord(name="loss", value=2.0, time=AT, host="algo-1"),
    ]
    assert pruning.objective_series(records, "loss") == [3.0, 2.0]
    assert pruning.objective_series(records, "nothing") == []


def test_the_median_rule_compares_the_last_value_with_the_median_of_running_averages() -> None:
    earlier = [[1.0, 3.0], [2.0, 4.0], [5.0, 5.0]]  # running averages at step 2: 2.0, 3.0, 5.0
    assert pruning.median_rule_stops([9.0, 2.9], earlier, maximize=True)
    assert not pruning.median_rule_stops([0.0, 3.1], earlier, maximize=True)
    assert pruning.median_rule_stops([0.0, 3.1], earlier, maximize=False)
    assert not pruning.median_rule_stops([9.0, 2.9], earlier, maximize=False)
    # Only the trials that reached the step count; too few of them stop nothing.
    assert not pruning.median_rule_stops([0.0, 0.0, 0.0], earlier, maximize=True)
    assert not pruning.median_rule_stops([0.0], earlier[:2], maximize=True)
    assert not pruning.median_rule_stops([], earlier, maximize=True)


def _request(strategy: str = "Hyperband", **config: Any) -> dict[str, Any]:
    static = config.pop("static", {})
    return {
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy,
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "acc"},
            **config,
        },
        "TrainingJobDefinition": {"StaticHyperParameters": static},
    }


def test_hyperband_resources_come_from_the_strategy_config_or_the_epochs() -> None:
    given = {"HyperbandStrategyConfig": {"MinResource": 2, "MaxResource": 27}}
    assert pruning.hyperband_resources(_request(StrategyConfig=given)) == (2, 27)
    assert pruning.hyperband_resources(_request(static={"epochs": "12"})) == (1, 12)
    assert pruning.hyperband_resources(_request(static={"num_epochs": '"5"'})) == (1, 5)
    with pytest.raises(ConfigurationError, match=r"strategy_config.*MaxResource"):
        pruning.hyperband_resources(_request(static={"lr": "0.1"}))
    with pytest.raises(ConfigurationError, match=r"hyperparameters\['epochs'\]"):
        pruning.hyperband_resources(_request(static={"epochs": '"many"'}))


def test_each_setting_has_its_pruner() -> None:
    assert pruning.pruner(_request("Random")) is None
    assert pruning.pruner(_request("Random", TrainingJobEarlyStoppingType="Off")) is None
    median = pruning.pruner(_request("Bayesian", TrainingJobEarlyStoppingType="Auto"))
    assert isinstance(median, optuna.pruners.BasePruner)
    hyperband = pruning.pruner(_request(static={"epochs": "9"}))
    assert isinstance(hyperband, optuna.pruners.HyperbandPruner)


def _run(study: Any, series: list[float], max_resource: int | None) -> tuple[int, str | None]:
    """Feed ``series`` to a new trial of ``study`` one value at a time, as the agent does; the
    step it stopped at and why (or its length and None)."""
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reported = 0
    for step in range(1, len(series) + 1):
        reported = pruning.report(trial, series[:step], reported)
        verdict = pruning.decision(trial, reported, max_resource)
        if verdict is not None:
            if verdict == pruning.PRUNED:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, series[step - 1])
            return step, verdict
    study.tell(trial, series[-1])
    return len(series), None


def test_the_median_rule_stops_a_worse_trial_after_three_earlier_ones() -> None:
    request = _request("Random", TrainingJobEarlyStoppingType="Auto")
    study = optuna.create_study(direction="maximize", pruner=pruning.pruner(request))
    for quality in (0.5, 0.6, 0.7):
        assert _run(study, [quality] * 4, None) == (4, None)
    assert _run(study, [0.1] * 4, None) == (1, pruning.PRUNED)
    assert _run(study, [0.9] * 4, None) == (4, None)
    assert _run(study, [0.7, 0.7, 0.5, 0.9], None) == (3, pruning.PRUNED)


def test_hyperband_stops_worse_trials_at_their_rungs_and_every_trial_at_max_resource() -> None:
    request = _request(StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 9}})
    study = optuna.create_study(
        study_name="smlaunch-tuning",
        direction="maximize",
        sampler=search.sampler("Hyperband", {}, seed=1),
        pruner=pruning.pruner(request),
    )
    good = [_run(study, [1.0 + i / 100] * 12, 9) for i in range(6)]  # each better than the last
    bad = [_run(study, [0.0] * 12, 9) for _ in range(9)]
    assert good == [(9, pruning.MAX_RESOURCE)] * 6
    assert all(step <= 9 for step, _ in bad)
    pruned = [step for step, verdict in bad if verdict == pruning.PRUNED]
    assert len(pruned) >= 5 and all(step < 9 for step in pruned)
    # A trial is never stopped before MinResource.
    late = pruning.pruner(
        _request(StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 3, "MaxResource": 9}})
    )
    study = optuna.create_study(study_name="smlaunch-tuning", direction="maximize", pruner=late)
    _run(study, [1.0] * 9, 9)
    assert all(_run(study, [0.0] * 9, 9)[0] >= 3 for _ in range(6))


def test_not_improving_counts_the_trials_since_the_last_improvement_of_more_than_one_percent() -> None:
    assert completion.not_improving([], maximize=True) == 0
    assert completion.not_improving([1.0], maximize=True) == 0
    assert completion.not_improving([1.0, 2.0, 1.5, 2.01, 0.3], maximize=True) == 3
    assert completion.not_improving([1.0, 2.0, 3.0], maximize=True) == 0
    assert completion.not_improving([5.0, 4.0, 6.0], maximize=False) == 1


def test_the_completion_criteria_and_the_runtime_end_the_tuning_job() -> None:
    def config(**criteria: Any) -> dict[str, Any]:
        return {"TuningJobCompletionCriteria": criteria, "ResourceLimits": {"MaxRuntimeInSeconds": 600}}

    target = config(TargetObjectiveMetricValue=0.9)
    assert completion.end_reason(target, [0.5, 0.8], True, 10) is None
    assert "TargetObjectiveMetricValue=0.9" in str(completion.end_reason(target, [0.5, 0.95], True, 10))
    assert completion.end_reason(target, [0.95], False, 10) is None
    assert completion.end_reason(target, [0.85], False, 10) is not None
    patience = config(BestObjectiveNotImproving={"MaxNumberOfTrainingJobsNotImproving": 3})
    assert completion.end_reason(patience, [1.0, 0.5, 0.5], True, 10) is None
    assert "3 training jobs" in str(completion.end_reason(patience, [1.0, 0.5, 0.5, 1.0], True, 10))
    assert completion.end_reason(config(), [], True, 599.5) is None
    assert "MaxRuntimeInSeconds=600" in str(completion.end_reason(config(), [], True, 600))


def test_convergence_detection_is_refused_locally_and_the_rest_let_through() -> None:
    base = {"Strategy": "Random", "ParameterRanges": {}}
    enabled = {"ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}
    refusal = search.local_refusal(dict(base, TuningJobCompletionCriteria=enabled))
    assert refusal is not None and refusal[0] == "completion_criteria_config.complete_on_convergence"
    disabled = {"ConvergenceDetected": {"CompleteOnConvergence": "Disabled"}, "TargetObjectiveMetricValue": 1}
    assert search.local_refusal(dict(base, TuningJobCompletionCriteria=disabled)) is None
    assert search.local_refusal(dict(base, ResourceLimits={"MaxRuntimeInSeconds": 120})) is None
    assert search.local_refusal(dict(base, Strategy="Hyperband")) is None
    both = dict(base, Strategy="Hyperband", TrainingJobEarlyStoppingType="Auto")
    assert search.local_refusal(both)[0] == "early_stopping_type"  # type: ignore[index]
