"""``HyperparameterTuningJobAnalytics``: a tuning job's trials as a pandas table and a picture.

The SageMaker SDK's ``sagemaker.analytics.HyperparameterTuningJobAnalytics(name, sagemaker_session)``
reads ListTrainingJobsForHyperParameterTuningJob and its ``dataframe()`` has one row per trial: the
tuned hyperparameters (each a float where it reads as one), ``TrainingJobName``,
``TrainingJobStatus``, ``FinalObjectiveValue``, ``TrainingStartTime``, ``TrainingEndTime``,
``TrainingElapsedTimeSeconds`` (where both times are known) and, for a tuning job of several
training job definitions, ``TrainingJobDefinitionName``. This class builds the same table, row for
row, for a local tuning job (from the job store) and a SageMaker one (the SDK's calls,
:mod:`smlaunch.sdk.tuning.records`), and adds :meth:`~HyperparameterTuningJobAnalytics.plot`: the
objective of each trial in launch order and the best so far.

pandas and matplotlib are the ``analytics`` extra (``pip install 'smlaunch[analytics]'``); without
them these methods raise :class:`~smlaunch.sdk.errors.MissingExtraError` saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs.analytics import display_figures_inline, require
from smlaunch.sdk.tuning import records


def row(summary: Mapping[str, Any]) -> dict[str, Any]:
    """One trial's row of :meth:`HyperparameterTuningJobAnalytics.dataframe`, as the SDK shapes it."""
    out: dict[str, Any] = {}
    for name, value in summary["TunedHyperParameters"].items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            out[name] = value
    out["TrainingJobName"] = summary["TrainingJobName"]
    out["TrainingJobStatus"] = summary["TrainingJobStatus"]
    out["FinalObjectiveValue"] = summary.get("FinalHyperParameterTuningJobObjectiveMetric", {}).get("Value")
    start, end = summary.get("TrainingStartTime"), summary.get("TrainingEndTime")
    out["TrainingStartTime"] = start
    out["TrainingEndTime"] = end
    if start and end:
        out["TrainingElapsedTimeSeconds"] = (end - start).total_seconds()
    if "TrainingJobDefinitionName" in summary:
        out["TrainingJobDefinitionName"] = summary["TrainingJobDefinitionName"]
    return out


def best_so_far(values: list[float], maximize: bool) -> list[float]:
    """The running best of ``values`` (the largest so far when ``maximize``, else the smallest)."""
    best: list[float] = []
    for value in values:
        best.append(value if not best else (max if maximize else min)(best[-1], value))
    return best


class HyperparameterTuningJobAnalytics:
    """The trials of one tuning job (see the module docstring).

    ``hyperparameter_tuning_job_name``: the tuning job. ``sagemaker_session``: where it is
    (``LocalSession()`` or ``Session()``); default: the default local store when it holds a tuning
    job of that name, else SageMaker. Answers are cached; ``force_refresh=True`` or
    :meth:`clear_cache` reads again, e.g. while the tuning job runs.
    """

    def __init__(self, hyperparameter_tuning_job_name: str, sagemaker_session: Any | None = None) -> None:
        self._name = hyperparameter_tuning_job_name
        self._session = records.session_for(hyperparameter_tuning_job_name, sagemaker_session)
        self._description: dict[str, Any] | None = None
        self._summaries: list[dict[str, Any]] | None = None
        self._frame: Any = None

    @property
    def name(self) -> str:
        """Name of the tuning job analysed."""
        return self._name

    def __repr__(self) -> str:
        return f"<smlaunch HyperparameterTuningJobAnalytics for {self._name}>"

    def clear_cache(self) -> None:
        """Forget every answer, so the next call reads the tuning job again."""
        self._description = None
        self._summaries = None
        self._frame = None

    def description(self, force_refresh: bool = False) -> dict[str, Any]:
        """DescribeHyperParameterTuningJob of the tuning job."""
        if force_refresh:
            self.clear_cache()
        if self._description is None:
            self._description = records.describe(self._session, self._name)
        return self._description

    def training_job_summaries(self, force_refresh: bool = False) -> list[dict[str, Any]]:
        """ListTrainingJobsForHyperParameterTuningJob's summaries: every trial, in launch order."""
        if force_refresh:
            self.clear_cache()
        if self._summaries is None:
            self._summaries = records.training_job_summaries(self._session, self._name)
        return self._summaries

    @property
    def tuning_ranges(self) -> dict[str, Any]:
        """The tuned hyperparameters' ranges by name (by definition name, then hyperparameter
        name, for a tuning job of several training job definitions), as the SDK gives them."""
        description = self.description()
        if "TrainingJobDefinition" in description:
            return _ranges(description["HyperParameterTuningJobConfig"]["ParameterRanges"])
        return {
            definition["DefinitionName"]: _ranges(definition["HyperParameterRanges"])
            for definition in description["TrainingJobDefinitions"]
        }

    def dataframe(self, force_refresh: bool = False) -> Any:
        """The trials as a ``pandas.DataFrame`` in the SDK's columns (module docstring)."""
        pandas = require("pandas", "HyperparameterTuningJobAnalytics.dataframe()")
        if force_refresh:
            self.clear_cache()
        if self._frame is None:
            self._frame = pandas.DataFrame([row(summary) for summary in self.training_job_summaries()])
        return self._frame

    def export_csv(self, filename: str | Path) -> None:
        """Write :meth:`dataframe` to ``filename`` as CSV (with the index, as the SDK writes it)."""
        self.dataframe().to_csv(filename)

    def plot(self, path: str | Path | None = None) -> Any:
        """The objective of each trial that has one, by its place in launch order (1 = the first
        trial), and the best so far as a step line, as a matplotlib ``Figure``; saved as PNG to
        ``path`` when given. In Jupyter the returned figure displays inline."""
        figure_module = require("matplotlib.figure", "HyperparameterTuningJobAnalytics.plot()")
        display_figures_inline(figure_module.Figure)
        objective = records.objective(self.description())
        scored = [
            (number, float(summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]))
            for number, summary in enumerate(self.training_job_summaries(), start=1)
            if (summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value") is not None
        ]
        if not scored:
            raise ConfigurationError(
                "hyperparameter_tuning_job_name",
                self._name,
                "no trial has an objective value yet, so there is nothing to plot",
                "wait for a trial to complete (tuner.describe()['ObjectiveStatusCounters'])",
            )
        numbers = [number for number, _ in scored]
        values = [value for _, value in scored]
        maximize = objective["Type"] == "Maximize"
        figure = figure_module.Figure(figsize=(7, 3.6), layout="constrained")
        ax = figure.subplots()
        ax.plot(numbers, values, marker="o", linestyle="none", label=objective["MetricName"])
        ax.plot(numbers, best_so_far(values, maximize), drawstyle="steps-post", label="best so far")
        ax.set_xlabel("training job (launch order)")
        ax.set_ylabel(f"{objective['MetricName']} ({objective['Type']})")
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
        figure.suptitle(self._name, fontsize="medium")
        if path is not None:
            figure.savefig(path, format="png", dpi=100)
        return figure


def _ranges(parameter_ranges: Mapping[str, Any]) -> dict[str, Any]:
    return {parameter["Name"]: parameter for ranges in parameter_ranges.values() for parameter in ranges}
