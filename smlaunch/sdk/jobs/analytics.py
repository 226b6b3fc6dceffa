"""``TrainingJobAnalytics``: a job's metrics as a pandas table and a matplotlib picture, on any backend.

The SageMaker SDK's ``sagemaker.analytics.TrainingJobAnalytics(training_job_name, metric_names=None)``
reads CloudWatch metrics and its ``dataframe()`` has the columns ``timestamp`` (seconds since the
metric's first datapoint), ``metric_name`` and ``value``, one metric after another in
``metric_names`` order (default: the job's ``MetricDefinitions``), each sorted by time. This class
returns the same table from any backend (:meth:`Backend.metric_records
<smlaunch.sdk.backends.base.Backend.metric_records>`):

- local jobs: every value of every host's lines, at the time the line was printed;
- SageMaker jobs: CloudWatch metrics (``/aws/sagemaker/TrainingJobs``), falling back to the job's
  CloudWatch logs for a metric without datapoints.

One column is added after the SDK's three: ``host`` (``algo-2``; empty where CloudWatch aggregates
hosts). :meth:`TrainingJobAnalytics.plot` draws one panel per metric against seconds since start, one
line per host where the hosts' values differ, and saves it as PNG.

pandas and matplotlib are the ``analytics`` extra (``pip install 'smlaunch[analytics]'``); without
them these methods raise :class:`~smlaunch.sdk.errors.MissingExtraError` saying so.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError, MissingExtraError
from smlaunch.sdk.jobs.metrics import MetricRecord

COLUMNS = ("timestamp", "metric_name", "value", "host")
"""The table's columns: the SDK's three, then the host."""
EXTRA = "analytics"


def require(module: str, feature: str) -> Any:
    """Import ``module`` (pandas, matplotlib) or raise :class:`MissingExtraError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(feature, module.split(".")[0], EXTRA) from None


def metric_rows(records: Sequence[MetricRecord], metric_names: Sequence[str]) -> dict[str, list[Any]]:
    """The table's columns as lists: each metric in ``metric_names`` order, sorted by time, its
    ``timestamp`` in seconds since its first value (None where the source has no times)."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for name in metric_names:
        mine = [r for r in records if r.name == name]
        timed = [r for r in mine if r.time is not None]
        timed.sort(key=lambda r: r.time)  # type: ignore[arg-type, return-value]
        base = timed[0].time if timed else None
        for record in timed + [r for r in mine if r.time is None]:
            since = (record.time - base).total_seconds() if record.time and base else None
            columns["timestamp"].append(since)
            columns["metric_name"].append(name)
            columns["value"].append(record.value)
            columns["host"].append(record.host)
    return columns


class TrainingJobAnalytics:
    """Metrics of one training job (see the module docstring).

    ``training_job_name``: a name or a job reference (:mod:`smlaunch.sdk.jobs.jobref`, e.g.
    ``local:NAME``). ``sagemaker_session``: where the job is (``LocalSession()`` or ``Session()``);
    default: as the reference says; for a bare name, the local job store when it holds the job,
    else SageMaker. ``metric_names``: which metrics
    (default: every ``MetricDefinitions`` name of the job).
    """

    def __init__(
        self,
        training_job_name: str,
        metric_names: Sequence[str] | None = None,
        sagemaker_session: Any | None = None,
    ) -> None:
        from smlaunch.sdk.jobs import jobref

        sagemaker_session, training_job_name = jobref.resolve(training_job_name, sagemaker_session)
        self._name = training_job_name
        self._backend = sagemaker_session.backend()
        self._requested = list(metric_names) if metric_names else None
        self._frame: Any = None

    @property
    def name(self) -> str:
        """Name of the training job analysed."""
        return self._name

    def __repr__(self) -> str:
        return f"<smlaunch TrainingJobAnalytics for {self._name}>"

    @property
    def metric_names(self) -> list[str]:
        """The metrics in the table: those asked for, else the job's ``MetricDefinitions``."""
        if self._requested is not None:
            return self._requested
        algorithm = self._backend.describe(self._name).get("AlgorithmSpecification") or {}
        return [str(d["Name"]) for d in algorithm.get("MetricDefinitions") or []]

    def clear_cache(self) -> None:
        """Forget the table, so the next :meth:`dataframe` reads the job's metrics again."""
        self._frame = None

    def dataframe(self, force_refresh: bool = False) -> Any:
        """The metrics as a ``pandas.DataFrame`` with columns ``timestamp``, ``metric_name``, ``value``,
        ``host``. Cached; ``force_refresh=True`` (or :meth:`clear_cache`) reads again, e.g. while the
        job still runs."""
        pandas = require("pandas", "TrainingJobAnalytics.dataframe()")
        if force_refresh:
            self.clear_cache()
        if self._frame is None:
            names = self.metric_names
            records = self._backend.metric_records(self._name, names)
            self._frame = pandas.DataFrame(metric_rows(records, names), columns=list(COLUMNS))
        return self._frame

    def export_csv(self, filename: str | Path) -> None:
        """Write :meth:`dataframe` to ``filename`` as CSV."""
        self.dataframe().to_csv(filename, index=False)

    def plot(self, path: str | Path | None = None) -> Any:
        """One panel per metric (value against seconds since start; one line per host where the hosts'
        values differ) as a matplotlib ``Figure``, saved as PNG to ``path`` when given. In Jupyter the
        returned figure displays inline."""
        figure_module = require("matplotlib.figure", "TrainingJobAnalytics.plot()")
        display_figures_inline(figure_module.Figure)
        frame = self.dataframe()
        names = [name for name in self.metric_names if (frame["metric_name"] == name).any()]
        if not names:
            raise ConfigurationError(
                "metric_names",
                self.metric_names,
                f"job {self._name} has no metric values to plot",
                "check the job's metric_definitions regexes against its logs (smlaunch logs JOB)",
            )
        figure = figure_module.Figure(figsize=(7, 2.4 * len(names) + 0.6), layout="constrained")
        axes = figure.subplots(len(names), 1, squeeze=False)[:, 0]
        for ax, name in zip(axes, names, strict=True):
            rows = frame[frame["metric_name"] == name]
            series = {host: rows[rows["host"] == host] for host in sorted(rows["host"].dropna().unique())}
            if len(series) > 1 and not _same_values(list(series.values())):
                for host, part in series.items():
                    ax.plot(part["timestamp"], part["value"], marker=".", label=host)
                ax.legend(loc="best", fontsize="small")
            else:  # one host, or every host printed the same values (an all-reduced metric)
                part = next(iter(series.values()), rows)
                ax.plot(part["timestamp"], part["value"], marker=".")
            ax.set_title(name, fontsize="medium")
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("seconds since start")
        figure.suptitle(self._name, fontsize="medium")
        if path is not None:
            figure.savefig(path, format="png", dpi=100)
        return figure


def display_figures_inline(figure_class: type) -> None:
    """In a notebook, make a returned ``Figure`` display as a picture: IPython draws figures only once
    an inline backend registered its formatter, which ``plot()`` (no pyplot) never triggers. A format
    the user chose (svg, retina) is kept."""
    if "IPython" not in sys.modules:
        return
    shell = sys.modules["IPython"].get_ipython()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters
    if any(
        figure_class in formatters[kind].type_printers
        for kind in ("image/png", "image/svg+xml")
        if kind in formatters
    ):
        return
    from IPython.core.pylabtools import select_figure_formats

    select_figure_formats(shell, {"png"})


def _same_values(parts: list[Any]) -> bool:
    first = list(parts[0]["value"])
    return all(list(part["value"]) == first for part in parts[1:])
