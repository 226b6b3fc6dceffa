"""The local tuning job's search (ranges -> optuna, strategy -> sampler) and its counters."""

from __future__ import annotations

from typing import Any

import pytest

from smlaunch.sdk.tuning import local, search

optuna = pytest.importorskip("optuna")

RANGES = {
    "CategoricalParameterRanges": [{"Name": "opt", "Values": ['"sgd"', '"adam"']}],
    "ContinuousParameterRanges": [
        {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"}
    ],
    "IntegerParameterRanges": [{"Name": "layers", "MinValue": "1", "MaxValue": "4", "ScalingType": "Auto"}],
}


def test_ranges_become_optuna_distributions_on_their_scale() -> None:
    found = search.distributions(RANGES)
    assert found["opt"] == optuna.distributions.CategoricalDistribution(['"sgd"', '"adam"'])
    assert found["lr"] == optuna.distributions.FloatDistribution(0.0001, 0.1, log=True)
    assert found["layers"] == optuna.distributions.IntDistribution(1, 4, log=False)


@pytest.mark.parametrize(
    ("strategy", "sampler"),
    [
        ("Random", "RandomSampler"),
        ("Bayesian", "TPESampler"),
        ("Grid", "GridSampler"),
        ("Hyperband", "TPESampler"),
    ],
)
def test_each_local_strategy_has_its_sampler(strategy: str, sampler: str) -> None:
    chosen = search.sampler(strategy, RANGES, seed=3)
    assert isinstance(chosen, getattr(optuna.samplers, sampler))
    with pytest.raises(ValueError, match="Median"):
        search.sampler("Median", RANGES, seed=3)


def _asked(strategy: str, ranges: dict[str, Any], seed: int, count: int) -> list[dict[str, str]]:
    study = optuna.create_study(sampler=search.sampler(strategy, ranges, seed))
    space = search.distributions(ranges)
    asked = []
    for _ in range(count):
        trial = study.ask(space)
        asked.append(search.wire_values(trial.params))
        study.tell(trial, 1.0)
    return asked


def test_a_seed_repeats_the_hyperparameters_and_the_grid_covers_every_combination() -> None:
    assert _asked("Random", RANGES, 7, 4) == _asked("Random", RANGES, 7, 4)
    assert _asked("Random", RANGES, 7, 4) != _asked("Random", RANGES, 8, 4)
    grid = {
        "CategoricalParameterRanges": [
            {"Name": "a", "Values": ["1", "2", "3"]},
            {"Name": "b", "Values": ["x", "y"]},
        ]
    }
    assert search.grid_size(grid) == 6
    combos = _asked("Grid", grid, 1, 6)  # every combination once, no Study.stop() at the end
    assert sorted((c["a"], c["b"]) for c in combos) == sorted((a, b) for a in "123" for b in "xy")
    assert all(isinstance(value, str) for combo in combos for value in combo.values())


def test_wire_values_are_the_text_a_request_carries() -> None:
    assert search.wire_values({"lr": 0.001, "layers": 3, "opt": '"adam"'}) == {
        "lr": "0.001",
        "layers": "3",
        "opt": '"adam"',
    }


def test_counters_count_every_trial_once() -> None:
    summaries = [
        {"TrainingJobStatus": "Completed", "ObjectiveStatus": "Succeeded"},
        {"TrainingJobStatus": "Failed", "ObjectiveStatus": "Failed"},
        {"TrainingJobStatus": "Stopping", "ObjectiveStatus": "Pending"},
        {"TrainingJobStatus": "InProgress", "ObjectiveStatus": "Pending"},
        {"TrainingJobStatus": "Stopped", "ObjectiveStatus": "Failed"},
    ]
    assert local.counters(summaries) == {
        "TrainingJobStatusCounters": {
            "Completed": 1,
            "InProgress": 2,
            "RetryableError": 0,
            "NonRetryableError": 1,
            "Stopped": 1,
        },
        "ObjectiveStatusCounters": {"Succeeded": 1, "Pending": 2, "Failed": 2},
    }


def test_only_what_runs_locally_is_let_through() -> None:
    config = {
        "Strategy": "Random",
        "ResourceLimits": {"MaxParallelTrainingJobs": 2},
        "ParameterRanges": RANGES,
    }
    assert search.local_refusal(config) is None
    assert search.local_refusal(dict(config, Strategy="Median"))[0] == "strategy"  # type: ignore[index]
    log = dict(RANGES, IntegerParameterRanges=[{"Name": "n", "ScalingType": "ReverseLogarithmic"}])
    refusal = search.local_refusal(dict(config, ParameterRanges=log))
    assert refusal is not None and refusal[0] == "hyperparameter_ranges['n'].scaling_type"
