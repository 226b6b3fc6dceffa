"""TrainingJobAnalytics: the SDK's table from CloudWatch metrics (the installed ``sagemaker`` SDK is the
oracle, both reading the same moto CloudWatch), the logs fallback, plots and the missing-extra error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from smlaunch import TrainingJobAnalytics
from smlaunch.sdk.errors import MissingExtraError
from smlaunch.sdk.jobs.analytics import metric_rows
from smlaunch.sdk.jobs.metrics import MetricRecord
from smlaunch.sdk.sessions.sagemaker import Session
from tests.functional._sagemaker_moto import FakeSageMaker, fake_aws
from tests.unit.test_sagemaker_backend import JOB, make_request, make_spec

pandas = pytest.importorskip("pandas")

METRICS = [
    {"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
    {"Name": "validation:accuracy", "Regex": r"acc=([0-9.]+)"},
]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        yield fake


def started_job(aws: FakeSageMaker, session: Session) -> datetime:
    algorithm = make_spec().AlgorithmSpecification.model_dump(exclude_none=True)
    session.backend().submit(make_request(AlgorithmSpecification={**algorithm, "MetricDefinitions": METRICS}))
    aws.transition(JOB, "Training", "Training in progress.")
    return aws.job(JOB).training_start_time


@pytest.mark.slow  # importing the SageMaker SDK takes seconds
def test_cloudwatch_metrics_match_the_sdk(aws: FakeSageMaker) -> None:
    sagemaker_session_module = pytest.importorskip("sagemaker.session")
    sdk_analytics = pytest.importorskip("sagemaker.analytics")
    session = Session(boto_session=aws.boto_session)
    start = started_job(aws, session)
    cloudwatch = aws.boto_session.client("cloudwatch")
    minute = timedelta(minutes=1)
    for i, (loss, accuracy) in enumerate([(0.9, 0.5), (0.6, 0.7), (0.4, 0.8), (0.3, 0.85)]):
        at = start + (i + 1) * minute
        data = [
            {
                "MetricName": "train:loss",
                "Value": loss,
                "Timestamp": at,
                "Dimensions": [{"Name": "TrainingJobName", "Value": JOB}],
            }
        ]
        if i % 2 == 0 or i == 3:  # accuracy less often: the metrics have their own first datapoint
            data.append(
                {
                    "MetricName": "validation:accuracy",
                    "Value": accuracy,
                    "Timestamp": at + minute / 2,
                    "Dimensions": [{"Name": "TrainingJobName", "Value": JOB}],
                }
            )
        cloudwatch.put_metric_data(Namespace="/aws/sagemaker/TrainingJobs", MetricData=data)
    aws.complete(JOB)
    aws.job(JOB).training_end_time = start + 10 * minute

    ours = TrainingJobAnalytics(JOB, sagemaker_session=session).dataframe()
    sdk_session = sagemaker_session_module.Session(
        boto_session=aws.boto_session, sagemaker_client=aws.boto_session.client("sagemaker")
    )
    oracle = sdk_analytics.TrainingJobAnalytics(JOB, sagemaker_session=sdk_session).dataframe()
    assert len(oracle) == 4 + 3
    pandas.testing.assert_frame_equal(ours[["timestamp", "metric_name", "value"]], oracle)
    assert ours["host"].isna().all()  # CloudWatch aggregates the hosts

    only_loss = TrainingJobAnalytics(JOB, metric_names=["train:loss"], sagemaker_session=session).dataframe()
    assert list(only_loss["value"]) == [0.9, 0.6, 0.4, 0.3]


def test_logs_are_the_fallback_with_their_times_and_hosts(aws: FakeSageMaker) -> None:
    session = Session(boto_session=aws.boto_session)
    started_job(aws, session)
    first = aws.log(JOB, "algo-1", "step 0 loss=0.8", "step 0 acc=0.5")
    second = aws.log(JOB, "algo-2", "step 0 loss=0.7")
    third = aws.log(JOB, "algo-1", "step 1 loss=0.4")
    aws.complete(JOB)
    frame = TrainingJobAnalytics(JOB, sagemaker_session=session).dataframe()
    columns = ["timestamp", "metric_name", "value", "host"]
    assert frame.to_dict("records") == [
        dict(zip(columns, row, strict=True))
        for row in [
            (0.0, "train:loss", 0.8, "algo-1"),
            ((second[0] - first[0]) / 1000, "train:loss", 0.7, "algo-2"),
            ((third[0] - first[0]) / 1000, "train:loss", 0.4, "algo-1"),
            (0.0, "validation:accuracy", 0.5, "algo-1"),
        ]
    ]


def test_rows_follow_the_sdk_rules() -> None:
    t0 = datetime(2026, 11, 24, tzinfo=timezone.utc)
    records = [
        MetricRecord("acc", 0.5, t0 + timedelta(seconds=30), "algo-1"),
        MetricRecord("loss", 0.9, t0 + timedelta(seconds=20), "algo-2"),
        MetricRecord("loss", 1.0, t0 + timedelta(seconds=10), "algo-1"),
        MetricRecord("other", 7.0, t0, "algo-1"),
    ]
    assert metric_rows(records, ["loss", "acc"]) == {
        "timestamp": [0.0, 10.0, 0.0],
        "metric_name": ["loss", "loss", "acc"],
        "value": [1.0, 0.9, 0.5],
        "host": ["algo-1", "algo-2", "algo-1"],
    }


def test_missing_pandas_or_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    analytics = object.__new__(TrainingJobAnalytics)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtraError, match=r"needs pandas.*pip install 'smlaunch\[analytics\]'"):
        analytics.dataframe()
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"needs matplotlib.*smlaunch\[analytics\]"):
        analytics.plot("x.png")


class _Session:
    """A session whose backend holds fixed metric records (two hosts, two metrics)."""

    class _Backend:
        def describe(self, job_name: str) -> dict:
            return {
                "AlgorithmSpecification": {
                    "MetricDefinitions": [
                        {"Name": "loss", "Regex": "loss=(.*)"},
                        {"Name": "acc", "Regex": "acc=(.*)"},
                    ]
                }
            }

        def metric_records(self, job_name: str, metric_names: list[str]) -> list[MetricRecord]:
            t0 = datetime(2026, 11, 24, tzinfo=timezone.utc)
            return [
                MetricRecord("loss", 1.0 / (i + h), t0 + timedelta(seconds=i), f"algo-{h}")
                for i in range(3)
                for h in (1, 2)
            ] + [MetricRecord("acc", 0.5 + i / 10, t0 + timedelta(seconds=i), "algo-1") for i in range(3)]

    def backend(self) -> _Backend:
        return self._Backend()


def test_plot_one_panel_per_metric_and_a_picture_in_notebooks(tmp_path) -> None:
    image = pytest.importorskip("matplotlib.image")
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    analytics = TrainingJobAnalytics("job", sagemaker_session=_Session())
    figure = analytics.plot(tmp_path / "m.png")
    assert [ax.get_title() for ax in figure.axes] == ["loss", "acc"]
    assert [len(ax.get_lines()) for ax in figure.axes] == [2, 1]  # hosts differ in loss only
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["algo-1", "algo-2"]
    assert list(figure.axes[0].get_lines()[1].get_xdata()) == [0.0, 1.0, 2.0]
    assert image.imread(tmp_path / "m.png").shape[2] == 4  # a real RGBA PNG
    shell = interactiveshell.InteractiveShell.instance()
    try:
        formats, _ = shell.display_formatter.format(analytics.plot())
    finally:
        interactiveshell.InteractiveShell.clear_instance()
    assert "image/png" in formats  # a notebook cell shows the picture, not "<Figure size ...>"
