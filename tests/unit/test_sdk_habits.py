"""SDK v2 habits the estimator keeps: Stopped vs Failed endings, experiment_config and
keep_alive_period_in_seconds checks (the SDK oracle for the request is in test_plan_oracle)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from smlaunch import JobFailedError, UnexpectedStatusException
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.exceptions import CapacityError
from smlaunch.sdk.request.spec import JobRequest
from tests.unit.test_estimator import FakeSageMakerSession, TestLocalSession, config_error, local, remote


def test_a_stopped_job_ends_fit_with_a_warning(
    src: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    est = local(src, tmp_path)
    session = est.sagemaker_session
    assert isinstance(session, TestLocalSession)
    session.recording.status = "Stopped"
    session.recording.failure_reason = "MaxRuntimeExceeded: Training job exceeded MaxRuntimeInSeconds 60"
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.jobs.job"):
        est.fit(job_name="stopped-job", logs=False)
    assert "stopped-job" in caplog.text and "'Stopped' rather than 'Completed'" in caplog.text
    assert "MaxRuntimeExceeded" in caplog.text
    assert est.latest_training_job is not None and est.latest_training_job.status == "Stopped"
    caplog.clear()
    session.recording.failure_reason = None  # stopped by the user: no reason, no "(Stopped)"
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.jobs.job"):
        est.fit(job_name="stopped-job-2", logs=False)
    assert "'Stopped' rather than 'Completed'. This could mean" in caplog.text, caplog.text


def test_a_failed_job_still_raises(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path)
    est.sagemaker_session.recording.status = "Failed"
    est.sagemaker_session.recording.failure_reason = "AlgorithmError: rank 0 exited with code 1"
    with pytest.raises(JobFailedError, match="rank 0 exited with code 1") as failed:
        est.fit(job_name="failed-job", logs=False)
    assert failed.value.status == "Failed"


def test_experiment_config_is_recorded_in_a_local_describe(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path)
    config = {"ExperimentName": "bert-finetune", "TrialName": "lr-3e-5", "RunName": "run-1"}
    est.fit(job_name="experiment-job", wait=False, experiment_config=config)
    assert est.latest_training_job is not None
    assert est.latest_training_job.describe()["ExperimentConfig"] == config


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"ExperimentName": "has space"}, "experiment_config['ExperimentName']"),
        ({"Experiment": "x"}, "experiment_config['Experiment']"),
        ({"ExperimentName": "x" * 121}, "experiment_config['ExperimentName']"),
        ("bert", "experiment_config"),
    ],
)
def test_bad_experiment_config_is_refused_before_anything_runs(src: Path, config: object, field: str) -> None:
    session = FakeSageMakerSession()
    err = config_error(lambda: remote(src, session).fit(job_name="x-1", experiment_config=config))  # type: ignore[arg-type]
    assert err.field == field
    assert session.recording.jobs == {}


def test_keep_alive_is_sent_and_accepted_locally(src: Path, tmp_path: Path) -> None:
    spec = remote(src, keep_alive_period_in_seconds=1800).plan()
    assert spec.ResourceConfig.KeepAlivePeriodInSeconds == 1800
    assert remote(src).plan().to_request()["ResourceConfig"].get("KeepAlivePeriodInSeconds") is None
    est = local(src, tmp_path, keep_alive_period_in_seconds=600)  # accepted; no warm pools locally
    est.fit(job_name="warm-1", wait=False)
    assert est.latest_training_job is not None
    assert est.latest_training_job.describe()["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600


@pytest.mark.parametrize("value", [-1, 21601, "600", True, 1.5])
def test_bad_keep_alive_is_refused(src: Path, value: object) -> None:
    err = config_error(lambda: remote(src, keep_alive_period_in_seconds=value))
    assert err.field == "keep_alive_period_in_seconds" and err.value == value


def test_attach_restores_keep_alive(src: Path) -> None:
    from smlaunch import PyTorch

    session = FakeSageMakerSession()
    spec = remote(src, session, keep_alive_period_in_seconds=900).plan(job_name="warm-2")
    session.recording.submit(JobRequest(spec, Strategy.NONE))
    assert PyTorch.attach("warm-2", sagemaker_session=session).keep_alive_period_in_seconds == 900


def test_changes_to_the_distribution_dict_are_honoured_and_checked(src: Path) -> None:
    est = remote(
        src,
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
    )
    est.distribution["mpi"]["processes_per_host"] = 4  # as SDK code may do before fit()
    assert est.plan().HyperParameters["sagemaker_mpi_num_of_processes_per_host"] == "4"
    est.distribution["mpi"]["processes_per_host"] = 16
    err = config_error(est.plan)
    assert err.field == "distribution.mpi.processes_per_host" and err.value == 16
    est.distribution = {"torch_distributed": {"enabled": True}}
    assert est.distribution == {"torch_distributed": {"enabled": True}}
    assert est.plan().HyperParameters["sagemaker_torch_distributed_enabled"] == "true"
    with pytest.raises(ConfigurationError, match="unknown key"):
        est.distribution = {"torch_distributd": {"enabled": True}}
    assert est.distribution == {"torch_distributed": {"enabled": True}}  # a refused value changes nothing


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("Completed", "AlgorithmError: rank 0 exited 3"),
        ("Stopped", "AlgorithmError: rank 0 exited 3"),
        ("Failed", "AlgorithmError: rank 0 exited 3"),
        ("Failed", "CapacityError: Unable to provision requested ML compute capacity."),
    ],
)
def test_endings_match_the_sdk(status: str, reason: str) -> None:
    """The SDK's ``_check_job_status`` is the oracle: only Failed raises, and what it raises has the
    SDK's class, attributes and message (but for the SDK's link to its troubleshooting guide)."""
    sdk_session = pytest.importorskip("sagemaker.session")
    sdk_exceptions = pytest.importorskip("sagemaker.exceptions")
    from smlaunch.sdk.jobs.job import TrainingJob
    from tests.unit.test_estimator import RecordingBackend

    description = {"TrainingJobStatus": status, "FailureReason": reason}
    sdk_error = ours = None
    try:
        sdk_session._check_job_status("job-1", description, "TrainingJobStatus")
    except sdk_exceptions.UnexpectedStatusException as error:
        sdk_error = error
    try:
        TrainingJob(RecordingBackend(), "job-1")._outcome(description)
    except ValueError as error:  # the notebook's `except ValueError` catches it
        ours = error
    assert (ours is not None) is (sdk_error is not None) is (status == "Failed")
    if ours is None or sdk_error is None:
        return
    assert isinstance(ours, JobFailedError) and isinstance(ours, UnexpectedStatusException)
    assert (ours.actual_status, ours.allowed_statuses) == (
        sdk_error.actual_status,
        sdk_error.allowed_statuses,
    )
    # The same class tree: CapacityError where the SDK raises its CapacityError.
    assert isinstance(ours, CapacityError) is isinstance(sdk_error, sdk_exceptions.CapacityError)
    sdk_message = str(sdk_error)
    assert str(ours) == sdk_message[: sdk_message.index(" Check troubleshooting guide")]


def test_a_failed_fit_is_caught_as_the_sdk_notebooks_catch_it(src: Path, tmp_path: Path) -> None:
    """``except UnexpectedStatusException`` as notebooks import it (``sagemaker.exceptions`` with
    the import changed), and the cell goes on."""
    from smlaunch.sdk.exceptions import UnexpectedStatusException as imported

    est = local(src, tmp_path)
    est.sagemaker_session.recording.status = "Failed"
    est.sagemaker_session.recording.failure_reason = "AlgorithmError: exit 1"
    try:
        est.fit(job_name="caught-job", logs=False)
    except imported as error:
        assert (error.actual_status, error.allowed_statuses) == ("Failed", ["Completed", "Stopped"])
    else:
        pytest.fail("a Failed job must raise")
