"""``HyperparameterTuningJobAnalytics``: its table equals the SageMaker SDK v2's, and its plot holds
the objective of each trial and the best so far.

Oracle: the real ``sagemaker.analytics.HyperparameterTuningJobAnalytics`` and ours read the same
SageMaker answers from a real boto3 client whose responses a botocore ``Stubber`` serves (and checks
against the service model); both must send the same requests (the Stubber's expected parameters)
and build the same DataFrame. A local tuning job's table is compared with the SDK's the same way in
``tests/functional/test_tuning_surface.py``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from smlaunch import ConfigurationError, HyperparameterTuningJobAnalytics
from smlaunch.sdk.tuning.analytics import best_so_far

pandas = pytest.importorskip("pandas")

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
NAME = "tune-260101-1200"


def _summary(
    number: int, status: str, value: float | None, tuned: dict[str, str], **more: Any
) -> dict[str, Any]:
    name = f"{NAME}-{number:03d}-0123abcd"
    summary: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-west-2:123456789012:training-job/{name}",
        "CreationTime": T0 + timedelta(minutes=number),
        "TrainingJobStatus": status,
        "TunedHyperParameters": tuned,
        **more,
    }
    if status != "InProgress":
        summary["TrainingStartTime"] = T0 + timedelta(minutes=number, seconds=30)
    if status == "Completed":
        summary["TrainingEndTime"] = T0 + timedelta(minutes=number + 2, seconds=5)
    if value is not None:
        summary["FinalHyperParameterTuningJobObjectiveMetric"] = {"MetricName": "loss", "Value": value}
        summary["ObjectiveStatus"] = "Succeeded"
    return summary


PAGES = [
    [
        _summary(1, "Completed", 0.5, {"lr": "0.01", "optimizer": '"adam"', "layers": "3"}),
        _summary(2, "Failed", None, {"lr": "0.2", "optimizer": '"sgd"', "layers": "2"}),
    ],
    [
        _summary(3, "Completed", 0.25, {"lr": "0.003", "optimizer": '"adam"', "layers": "4"}),
        _summary(4, "InProgress", None, {"lr": "0.05", "optimizer": '"sgd"', "layers": "1"}),
    ],
]
MULTI = [
    _summary(1, "Completed", 0.4, {"lr": "0.01"}, TrainingJobDefinitionName="small"),
    _summary(2, "Completed", 0.3, {"depth": "5"}, TrainingJobDefinitionName="large"),
]


def _client(pages: list[list[dict[str, Any]]]) -> tuple[Any, Stubber]:
    client = boto3.client(
        "sagemaker", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(client)
    for index, page in enumerate(pages):
        expected: dict[str, Any] = {"HyperParameterTuningJobName": NAME, "MaxResults": 100}
        if index:
            expected["NextToken"] = f"page-{index}"
        answer: dict[str, Any] = {"TrainingJobSummaries": page}
        if index + 1 < len(pages):
            answer["NextToken"] = f"page-{index + 1}"
        stubber.add_response("list_training_jobs_for_hyper_parameter_tuning_job", answer, expected)
    stubber.activate()
    return client, stubber


class ClientSession:
    """A SageMaker session (not a local one) whose client is ``client``."""

    is_local = False

    def __init__(self, client: Any) -> None:
        self.client = client

    def sagemaker_client(self) -> Any:
        return self.client


@pytest.fixture(scope="module")
def sdk_analytics() -> Any:
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    return pytest.importorskip("sagemaker.analytics").HyperparameterTuningJobAnalytics


@pytest.mark.slow  # importing the SageMaker SDK takes seconds
@pytest.mark.parametrize("pages", [PAGES, [MULTI]], ids=["paged", "multi-estimator"])
def test_dataframe_equals_the_sdk_one(sdk_analytics: Any, pages: list[list[dict[str, Any]]]) -> None:
    sdk_client, sdk_stubber = _client(pages)
    expected = sdk_analytics(NAME, sagemaker_session=SimpleNamespace(sagemaker_client=sdk_client)).dataframe()
    sdk_stubber.assert_no_pending_responses()
    our_client, our_stubber = _client(pages)
    ours = HyperparameterTuningJobAnalytics(NAME, sagemaker_session=ClientSession(our_client))
    frame = ours.dataframe()
    our_stubber.assert_no_pending_responses()  # the same calls: every page, with the SDK's arguments
    pandas.testing.assert_frame_equal(frame, expected)
    assert ours.dataframe() is frame  # cached, as the SDK's
    assert len(frame) == sum(len(page) for page in pages)


def test_columns_are_the_tuned_hyperparameters_then_the_sdk_ones() -> None:
    client, _ = _client(PAGES)
    frame = HyperparameterTuningJobAnalytics(NAME, sagemaker_session=ClientSession(client)).dataframe()
    assert list(frame.columns) == [
        "lr",
        "optimizer",
        "layers",
        "TrainingJobName",
        "TrainingJobStatus",
        "FinalObjectiveValue",
        "TrainingStartTime",
        "TrainingEndTime",
        "TrainingElapsedTimeSeconds",
    ]
    first = frame.iloc[0]
    assert (first["lr"], first["optimizer"], first["layers"]) == (0.01, '"adam"', 3.0)
    assert first["TrainingElapsedTimeSeconds"] == 95.0
    assert pandas.isna(frame.iloc[1]["FinalObjectiveValue"])


def _plotted(figure: Any) -> dict[str, tuple[list[float], list[float]]]:
    (ax,) = figure.axes
    return {
        line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
        for line in ax.get_lines()
    }


class DescribedSession(ClientSession):
    """A client answering DescribeHyperParameterTuningJob (objective ``loss``, ``objective_type``)
    and the trials of ``pages``."""

    def __init__(self, objective_type: str, pages: list[list[dict[str, Any]]] = PAGES) -> None:
        client, _ = _client(pages)
        self.objective_type = objective_type
        super().__init__(self)
        self.lister = client

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        objective = {"Type": self.objective_type, "MetricName": "loss"}
        return {"HyperParameterTuningJobConfig": {"HyperParameterTuningJobObjective": objective}}

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        return dict(self.lister.list_training_jobs_for_hyper_parameter_tuning_job(**kwargs))


@pytest.mark.parametrize(("objective_type", "best"), [("Minimize", [0.5, 0.25]), ("Maximize", [0.5, 0.5])])
def test_plot_draws_each_objective_by_launch_order_and_the_best_so_far(
    tmp_path: Path, objective_type: str, best: list[float]
) -> None:
    pytest.importorskip("matplotlib")
    analytics = HyperparameterTuningJobAnalytics(NAME, sagemaker_session=DescribedSession(objective_type))
    png = tmp_path / "tuning.png"
    figure = analytics.plot(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # trials 2 (Failed) and 4 (InProgress) have no objective: only 1 and 3 are drawn, at their places
    assert _plotted(figure) == {"loss": ([1.0, 3.0], [0.5, 0.25]), "best so far": ([1.0, 3.0], best)}
    assert figure.axes[0].get_ylabel() == f"loss ({objective_type})"


def test_plot_without_any_objective_says_so() -> None:
    pytest.importorskip("matplotlib")
    session = DescribedSession("Minimize", [[PAGES[0][1]]])
    with pytest.raises(ConfigurationError, match="no trial has an objective value yet"):
        HyperparameterTuningJobAnalytics(NAME, sagemaker_session=session).plot()


def test_best_so_far() -> None:
    assert best_so_far([3.0, 1.0, 2.0, 0.5], maximize=False) == [3.0, 1.0, 1.0, 0.5]
    assert best_so_far([1.0, 3.0, 2.0], maximize=True) == [1.0, 3.0, 3.0]
    assert best_so_far([], maximize=True) == []


def test_a_session_of_another_platform_is_refused_by_name() -> None:
    from smlaunch import UnsupportedByBackendError

    class EdgeSession:
        """A platform of local semantics with no store for tuning jobs."""

        is_local = True

    analytics = HyperparameterTuningJobAnalytics(NAME, sagemaker_session=EdgeSession())
    with pytest.raises(UnsupportedByBackendError, match="sagemaker_session='EdgeSession'"):
        analytics.dataframe()


class MultiSession(DescribedSession):
    """A tuning job of two training job definitions, each with its objective and ranges."""

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        return {
            "HyperParameterTuningJobConfig": {"Strategy": "Random"},
            "TrainingJobDefinitions": [
                {
                    "DefinitionName": name,
                    "TuningObjective": {"Type": "Minimize", "MetricName": "loss"},
                    "HyperParameterRanges": {
                        "IntegerParameterRanges": [{"Name": p, "MinValue": "1", "MaxValue": "9"}]
                    },
                }
                for name, p in (("small", "lr"), ("large", "depth"))
            ],
        }


def test_a_tuning_job_of_several_definitions_plots_and_names_its_ranges() -> None:
    pytest.importorskip("matplotlib")
    from smlaunch.sdk.tuning import records

    session = MultiSession("Minimize", [MULTI])
    analytics = HyperparameterTuningJobAnalytics(NAME, sagemaker_session=session)
    assert _plotted(analytics.plot()) == {
        "loss": ([1.0, 2.0], [0.4, 0.3]),
        "best so far": ([1.0, 2.0], [0.4, 0.3]),
    }
    assert list(analytics.tuning_ranges) == ["small", "large"]
    description = analytics.description()
    assert records.objective(description) == {"Type": "Minimize", "MetricName": "loss"}
    assert list(records.parameter_ranges(description)) == ["small.lr", "large.depth"]
