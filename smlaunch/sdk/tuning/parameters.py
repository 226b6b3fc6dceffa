"""Hyperparameter ranges: SDK v2's ``sagemaker.parameter`` classes, as checked, frozen data.

``IntegerParameter(min_value, max_value, scaling_type="Auto")``, ``ContinuousParameter(...)`` and
``CategoricalParameter(values)`` take the SDK's arguments and keep its attribute names; each turns
into its entry of CreateHyperParameterTuningJob's ``ParameterRanges`` with ``as_tuning_range(name)``
(framework estimators send categorical values JSON-encoded: ``as_json_range(name)``, as the SDK).
Unlike the SDK's, a range the service would refuse (min above max, a logarithmic range that reaches
zero, an empty category list) is refused at construction, naming the argument.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from smlaunch.sdk.errors import ConfigurationError, require_type

SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
"""``ScalingType`` values of a numeric range (HyperParameterScalingType)."""


@dataclass(frozen=True)
class _NumericRange:
    """A numeric range: ``[min_value, max_value]`` searched on ``scaling_type``'s scale."""

    kind: ClassVar[str]
    """The range type's name in ``ParameterRanges`` (``<kind>ParameterRanges``)."""
    number: ClassVar[type | tuple[type, ...]]
    scaling_types: ClassVar[tuple[str, ...]] = SCALING_TYPES

    min_value: int | float
    max_value: int | float
    scaling_type: str = "Auto"

    def __post_init__(self) -> None:
        name = type(self).__name__
        for field in ("min_value", "max_value"):
            require_type(f"{name}.{field}", getattr(self, field), self.number, "pass a number")
        if self.min_value > self.max_value:
            raise ConfigurationError(
                f"{name}.min_value",
                self.min_value,
                f"is above max_value={self.max_value}",
                "pass min_value <= max_value",
            )
        if self.scaling_type not in self.scaling_types:
            raise ConfigurationError(
                f"{name}.scaling_type",
                self.scaling_type,
                f"must be one of {', '.join(self.scaling_types)}",
                "pass scaling_type='Auto' to let SageMaker choose",
            )
        if self.scaling_type == "Logarithmic" and self.min_value <= 0:
            raise ConfigurationError(
                f"{name}.min_value",
                self.min_value,
                "a Logarithmic range must be above 0",
                "pass min_value > 0, or scaling_type='Linear'",
            )
        if self.scaling_type == "ReverseLogarithmic" and not (0 <= self.min_value and self.max_value < 1):
            raise ConfigurationError(
                f"{name}.max_value",
                self.max_value,
                "a ReverseLogarithmic range must lie in [0, 1)",
                "pass 0 <= min_value <= max_value < 1, or scaling_type='Linear'",
            )

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` lies in the range, as the SDK's."""
        return bool(self.min_value <= value <= self.max_value)

    def as_tuning_range(self, name: str) -> dict[str, Any]:
        """This range's entry in ``ParameterRanges``: bounds as strings (``str()``, as the SDK's
        ``to_string``) and the scaling type."""
        return {
            "Name": name,
            "MinValue": str(self.min_value),
            "MaxValue": str(self.max_value),
            "ScalingType": self.scaling_type,
        }


@dataclass(frozen=True)
class ContinuousParameter(_NumericRange):
    """A hyperparameter tuned over real numbers in ``[min_value, max_value]``: SDK v2's
    ``sagemaker.parameter.ContinuousParameter``."""

    kind: ClassVar[str] = "Continuous"
    number: ClassVar[tuple[type, ...]] = (int, float)

    @classmethod
    def cast_to_type(cls, value: Any) -> float:
        """``value`` as this range's type (``float``)."""
        return float(value)


@dataclass(frozen=True)
class IntegerParameter(_NumericRange):
    """A hyperparameter tuned over the integers in ``[min_value, max_value]``: SDK v2's
    ``sagemaker.parameter.IntegerParameter``."""

    kind: ClassVar[str] = "Integer"
    number: ClassVar[type] = int
    scaling_types: ClassVar[tuple[str, ...]] = ("Auto", "Linear", "Logarithmic")
    """ReverseLogarithmic is for continuous ranges only."""

    @classmethod
    def cast_to_type(cls, value: Any) -> int:
        """``value`` as this range's type (``int``)."""
        return int(value)


@dataclass(frozen=True, init=False)
class CategoricalParameter:
    """A hyperparameter tuned over a list of values: SDK v2's
    ``sagemaker.parameter.CategoricalParameter``. ``values`` may be one value or a list; each is
    kept as ``str(value)``, as the SDK keeps them."""

    kind: ClassVar[str] = "Categorical"

    values: tuple[str, ...]

    def __init__(self, values: Any) -> None:
        listed = values if isinstance(values, (list, tuple)) else [values]
        if not listed:
            raise ConfigurationError(
                "CategoricalParameter.values", values, "holds no value", "pass e.g. ['adam', 'sgd']"
            )
        object.__setattr__(self, "values", tuple(str(value) for value in listed))

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` is one of the values."""
        return value in self.values

    @classmethod
    def cast_to_type(cls, value: Any) -> str:
        """``value`` as this range's type (``str``)."""
        return str(value)

    def as_tuning_range(self, name: str) -> dict[str, Any]:
        """This range's entry in ``ParameterRanges``."""
        return {"Name": name, "Values": list(self.values)}

    def as_json_range(self, name: str) -> dict[str, Any]:
        """The entry a framework estimator sends: each value JSON-encoded, as its container decodes
        every hyperparameter."""
        return {"Name": name, "Values": [json.dumps(value) for value in self.values]}


ParameterRange = IntegerParameter | ContinuousParameter | CategoricalParameter
"""Any one range."""
RANGE_KINDS = ("Continuous", "Categorical", "Integer")
"""The order of ``ParameterRanges``' lists, the SDK's ``ParameterRange.__all_types__``."""


def parameter_ranges(ranges: dict[str, ParameterRange], json_categories: bool) -> dict[str, Any]:
    """CreateHyperParameterTuningJob's ``ParameterRanges``: one list per kind, in
    :data:`RANGE_KINDS` order, each in the order the ranges were given. ``json_categories``: a
    framework estimator's categorical values, JSON-encoded."""
    wire: dict[str, Any] = {}
    for kind in RANGE_KINDS:
        entries = []
        for name, parameter in ranges.items():
            if parameter.kind != kind:
                continue
            if isinstance(parameter, CategoricalParameter) and json_categories:
                entries.append(parameter.as_json_range(name))
            else:
                entries.append(parameter.as_tuning_range(name))
        wire[f"{kind}ParameterRanges"] = entries
    return wire
