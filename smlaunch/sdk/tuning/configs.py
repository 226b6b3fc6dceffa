"""A tuning job's optional configurations: SDK v2's ``sagemaker.tuner`` classes, as checked, frozen data.

``WarmStartConfig(warm_start_type, parents)`` (with ``WarmStartTypes``), ``StrategyConfig(
hyperband_strategy_config=HyperbandStrategyConfig(max_resource, min_resource))`` and
``TuningJobCompletionCriteriaConfig(...)`` take the SDK's arguments; ``to_input_req()`` is each one's
part of CreateHyperParameterTuningJob and ``from_job_desc(...)`` reads it back from
DescribeHyperParameterTuningJob, as the SDK's do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from smlaunch.sdk.errors import ConfigurationError, require_type

MAX_WARM_START_PARENTS = 5
"""ParentHyperParameterTuningJobs' limit."""


class WarmStartTypes(Enum):
    """How a warm-started tuning job reuses its parents: the same data and algorithm, or transfer
    learning to changed ones."""

    IDENTICAL_DATA_AND_ALGORITHM = "IdenticalDataAndAlgorithm"
    TRANSFER_LEARNING = "TransferLearning"


@dataclass(frozen=True, init=False)
class WarmStartConfig:
    """Start a tuning job from the results of earlier ones (``parents``: their names)."""

    type: WarmStartTypes
    parents: tuple[str, ...]

    def __init__(self, warm_start_type: WarmStartTypes, parents: Iterable[str]) -> None:
        if not isinstance(warm_start_type, WarmStartTypes):
            raise ConfigurationError(
                "warm_start_config.warm_start_type",
                warm_start_type,
                "must be a WarmStartTypes member",
                "pass WarmStartTypes.TRANSFER_LEARNING or WarmStartTypes.IDENTICAL_DATA_AND_ALGORITHM",
            )
        names = tuple(dict.fromkeys(parents or ()))  # a set, as the SDK's, but in the order given
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ConfigurationError(
                "warm_start_config.parents",
                parents,
                "must name one or more earlier tuning jobs",
                "pass e.g. {'bert-tune-260101-1200'}",
            )
        if len(names) > MAX_WARM_START_PARENTS:
            raise ConfigurationError(
                "warm_start_config.parents",
                parents,
                f"names {len(names)} tuning jobs; SageMaker reads {MAX_WARM_START_PARENTS} at most",
                f"keep the {MAX_WARM_START_PARENTS} most relevant parents",
            )
        object.__setattr__(self, "type", warm_start_type)
        object.__setattr__(self, "parents", names)

    @classmethod
    def from_job_desc(cls, warm_start_config: Mapping[str, Any] | None) -> WarmStartConfig | None:
        """The config a DescribeHyperParameterTuningJob answer's ``WarmStartConfig`` holds (or None)."""
        if not warm_start_config or "WarmStartType" not in warm_start_config:
            return None
        parents = [
            p["HyperParameterTuningJobName"] for p in warm_start_config["ParentHyperParameterTuningJobs"]
        ]
        return cls(WarmStartTypes(warm_start_config["WarmStartType"]), parents)

    def to_input_req(self) -> dict[str, Any]:
        """The request's ``WarmStartConfig``."""
        return {
            "WarmStartType": self.type.value,
            "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": p} for p in self.parents],
        }


@dataclass(frozen=True)
class HyperbandStrategyConfig:
    """Hyperband's resources (epochs, say): a trial is never stopped before ``min_resource`` and is
    stopped at ``max_resource``."""

    max_resource: int
    min_resource: int

    def __post_init__(self) -> None:
        for field in ("max_resource", "min_resource"):
            value = getattr(self, field)
            require_type(f"HyperbandStrategyConfig.{field}", value, int, "pass a number of epochs")
            if value < 1:
                raise ConfigurationError(
                    f"HyperbandStrategyConfig.{field}", value, "must be >= 1", "pass e.g. 1"
                )
        if self.min_resource > self.max_resource:
            raise ConfigurationError(
                "HyperbandStrategyConfig.min_resource",
                self.min_resource,
                f"is above max_resource={self.max_resource}",
                "pass min_resource <= max_resource",
            )

    @classmethod
    def from_job_desc(cls, config: Mapping[str, Any]) -> HyperbandStrategyConfig:
        """The config a description's ``HyperbandStrategyConfig`` holds."""
        return cls(max_resource=config["MaxResource"], min_resource=config["MinResource"])

    def to_input_req(self) -> dict[str, Any]:
        """The request's ``HyperbandStrategyConfig``."""
        return {"MinResource": self.min_resource, "MaxResource": self.max_resource}


@dataclass(frozen=True)
class StrategyConfig:
    """The strategy's own settings: today Hyperband's only (``strategy='Hyperband'``)."""

    hyperband_strategy_config: HyperbandStrategyConfig

    def __post_init__(self) -> None:
        require_type(
            "StrategyConfig.hyperband_strategy_config",
            self.hyperband_strategy_config,
            HyperbandStrategyConfig,
            "pass HyperbandStrategyConfig(max_resource=..., min_resource=...)",
        )

    @classmethod
    def from_job_desc(cls, config: Mapping[str, Any]) -> StrategyConfig:
        """The config a description's ``StrategyConfig`` holds."""
        return cls(HyperbandStrategyConfig.from_job_desc(config["HyperbandStrategyConfig"]))

    def to_input_req(self) -> dict[str, Any]:
        """The request's ``StrategyConfig``."""
        return {"HyperbandStrategyConfig": self.hyperband_strategy_config.to_input_req()}


@dataclass(frozen=True)
class TuningJobCompletionCriteriaConfig:
    """When the tuning job ends before ``max_jobs``: after so many trials without a better objective,
    on convergence, or once the objective reaches a target."""

    max_number_of_training_jobs_not_improving: int | None = None
    complete_on_convergence: bool | None = None
    target_objective_metric_value: float | None = None

    def __post_init__(self) -> None:
        name = "TuningJobCompletionCriteriaConfig"
        count = self.max_number_of_training_jobs_not_improving
        require_type(
            f"{name}.max_number_of_training_jobs_not_improving", count, (int, type(None)), "pass e.g. 5"
        )
        if count is not None and count < 3:
            raise ConfigurationError(
                f"{name}.max_number_of_training_jobs_not_improving", count, "must be >= 3", "pass 3 or more"
            )
        require_type(
            f"{name}.complete_on_convergence", self.complete_on_convergence, (bool, type(None)), "pass True"
        )
        require_type(
            f"{name}.target_objective_metric_value",
            self.target_objective_metric_value,
            (int, float, type(None)),
            "pass the objective value to stop at, e.g. 0.95",
        )

    @classmethod
    def from_job_desc(cls, config: Mapping[str, Any]) -> TuningJobCompletionCriteriaConfig:
        """The config a description's ``TuningJobCompletionCriteria`` holds."""
        convergence = (config.get("ConvergenceDetected") or {}).get("CompleteOnConvergence")
        return cls(
            max_number_of_training_jobs_not_improving=(config.get("BestObjectiveNotImproving") or {}).get(
                "MaxNumberOfTrainingJobsNotImproving"
            ),
            complete_on_convergence=None if convergence is None else convergence == "Enabled",
            target_objective_metric_value=config.get("TargetObjectiveMetricValue"),
        )

    def to_input_req(self) -> dict[str, Any]:
        """The request's ``TuningJobCompletionCriteria``."""
        wire: dict[str, Any] = {}
        if self.max_number_of_training_jobs_not_improving is not None:
            wire["BestObjectiveNotImproving"] = {
                "MaxNumberOfTrainingJobsNotImproving": self.max_number_of_training_jobs_not_improving
            }
        if self.target_objective_metric_value is not None:
            wire["TargetObjectiveMetricValue"] = self.target_objective_metric_value
        if self.complete_on_convergence is not None:
            wire["ConvergenceDetected"] = {
                "CompleteOnConvergence": "Enabled" if self.complete_on_convergence else "Disabled"
            }
        return wire
