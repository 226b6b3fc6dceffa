"""``Estimator.attach`` as SDK v2's: its signature, blocking until the job ends without streaming,
the ended job's outcome, and ``model_channel_name`` (oracle: ``sagemaker.estimator.Estimator.attach``
on the same job in moto)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import Estimator, PyTorch, Session, UnexpectedStatusException
from smlaunch.sdk.errors import ConfigurationError
from tests.functional._sagemaker_moto import ROLE_ARN, FakeSageMaker, fake_aws
from tests.unit.test_estimator import RecordingBackend, TestLocalSession, local

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-training:1"


class EndsLater(RecordingBackend):
    """Describes a job as InProgress ``polls`` times, then as ``final``; counts log reads."""

    def __init__(self, polls: int, final: str) -> None:
        super().__init__()
        self.polls, self.final, self.log_reads = polls, final, 0

    def describe(self, job_name: str) -> dict[str, Any]:
        self.status = "InProgress" if self.polls > 0 else self.final
        self.polls -= 1
        return super().describe(job_name)

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        self.log_reads += 1
        return super().log_lines(job_name, follow)


def _submitted(src: Path, tmp_path: Path, backend: RecordingBackend, job: str) -> TestLocalSession:
    est = local(src, tmp_path)
    session = est.sagemaker_session
    assert isinstance(session, TestLocalSession)
    session.recording = backend
    est.fit(job_name=job, wait=False)
    return session


def test_signature_is_the_sdks_plus_wait() -> None:
    sdk = pytest.importorskip("sagemaker.estimator")
    theirs = inspect.signature(sdk.EstimatorBase.attach).parameters
    ours = inspect.signature(Estimator.attach).parameters
    assert [(p.name, p.default) for p in theirs.values()] == [
        (p.name, p.default) for p in list(ours.values())[: len(theirs)]
    ]
    assert ours["wait"].kind is inspect.Parameter.KEYWORD_ONLY and ours["wait"].default is True


def test_attach_blocks_until_the_job_ends_and_streams_nothing(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = EndsLater(polls=0, final="InProgress")
    session = _submitted(src, tmp_path, backend, "running-1")
    capsys.readouterr()
    backend.polls, backend.final = 2, "Completed"  # attach's own describe, one poll, then it ends
    attached = PyTorch.attach("running-1", sagemaker_session=session)
    assert backend.polls < 0  # every InProgress answer was read before attach returned
    assert attached.latest_training_job is not None and attached.latest_training_job.status == "Completed"
    assert backend.log_reads == 0 and capsys.readouterr().out == ""


def test_attach_without_waiting_returns_at_once(src: Path, tmp_path: Path) -> None:
    backend = EndsLater(polls=0, final="InProgress")
    session = _submitted(src, tmp_path, backend, "running-2")
    backend.polls, backend.final = 1000, "Completed"
    attached = PyTorch.attach("running-2", sagemaker_session=session, wait=False)
    assert backend.polls == 999 and attached.latest_training_job is not None


def test_ctrl_c_while_attached_leaves_the_job_running(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = EndsLater(polls=0, final="InProgress")
    session = _submitted(src, tmp_path, backend, "running-3")

    def interrupted(job_name: str) -> dict[str, Any]:
        if backend.polls < 0:
            raise KeyboardInterrupt
        backend.polls -= 1
        return RecordingBackend.describe(backend, job_name)

    backend.polls = 0
    backend.describe = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        PyTorch.attach("running-3", sagemaker_session=session)
    assert backend.stopped == []
    assert "keeps running" in capsys.readouterr().out


def test_model_channel_name_must_be_text(src: Path, tmp_path: Path) -> None:
    session = _submitted(src, tmp_path, RecordingBackend(), "done-1")
    with pytest.raises(ConfigurationError) as error:
        PyTorch.attach("done-1", session, True)  # type: ignore[arg-type]  # the old third argument
    assert error.value.field == "model_channel_name"


def test_a_bare_name_found_nowhere_names_both_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from smlaunch.sdk.backends.emulated.backend import JobNotFoundError
    from tests.functional._sagemaker_moto import aws_test_env

    aws_test_env(monkeypatch, credentials=False)
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path))
    # Not only "no AWS credentials": the newcomer meant a local job and mistyped it.
    with pytest.raises(ConfigurationError) as error:
        PyTorch.attach("tpyo-1")
    assert str(error.value).startswith(
        f"training_job_name='tpyo-1': no local job of that name under {tmp_path / 'jobs'}, and on"
        " SageMaker: no usable AWS credentials"
    )
    with pytest.raises(JobNotFoundError) as missing:
        PyTorch.attach("local:tpyo-1")
    assert str(missing.value) == f"no local training job 'tpyo-1' under {tmp_path / 'jobs'}"  # no quotes


# --- the SDK's attach on the same job -----------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        yield fake


def _sdk_attach(aws: FakeSageMaker, monkeypatch: pytest.MonkeyPatch, job: str, **kwargs: Any) -> Any:
    sdk_session = pytest.importorskip("sagemaker.session")
    sdk_estimator = pytest.importorskip("sagemaker.estimator")
    monkeypatch.setattr(sdk_session.time, "sleep", lambda seconds: None)  # its 5 s poll, skipped
    session = sdk_session.Session(boto_session=aws.boto_session)
    return sdk_estimator.Estimator.attach(job, sagemaker_session=session, **kwargs)


@pytest.mark.parametrize("ending", ["Completed", "Stopped", "Failed"])
def test_an_ended_job_attaches_as_with_the_sdk(
    aws: FakeSageMaker, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    session = Session(boto_session=aws.boto_session)
    channels = {"train": "s3://data-1/train/", "weights": "s3://data-1/pretrained/"}
    est = Estimator(
        IMAGE,
        ROLE_ARN,
        1,
        "ml.m5.xlarge",
        sagemaker_session=session,
        output_path="s3://out-1/",
        output_kms_key="alias/out",  # the SDK's attach reads it; moto leaves out an empty one
    )
    est.fit(channels, job_name="ended-1", wait=False)
    if ending == "Failed":
        aws.fail("ended-1", "AlgorithmError: exit 3")
    else:
        aws.transition("ended-1", ending, ending, status=ending)

    outcomes: list[tuple[Any, ...]] = []
    for attach in (
        lambda **kw: _sdk_attach(aws, monkeypatch, "ended-1", **kw),
        lambda **kw: Estimator.attach("ended-1", sagemaker_session=session, **kw),
    ):
        try:
            attached = attach(model_channel_name="weights")
            outcomes.append(("returned", attached.model_uri, attached.model_channel_name))
        except ValueError as error:  # both SDKs' UnexpectedStatusException
            outcomes.append(("raised", error.actual_status, error.allowed_statuses))  # type: ignore[attr-defined]
    assert outcomes[0] == outcomes[1]
    if ending == "Failed":
        assert outcomes[1] == ("raised", "Failed", ["Completed", "Stopped"])
        with pytest.raises(UnexpectedStatusException):
            Estimator.attach("ended-1", sagemaker_session=session)
    else:
        assert outcomes[1] == ("returned", "s3://data-1/pretrained/", "weights")
