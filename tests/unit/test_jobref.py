"""Job references (``local:NAME``, ``slurm:DIR:NAME``, ``sagemaker:NAME``, a bare name): parsed,
refused with the accepted forms, and resolved by the one rule the CLI and ``attach`` share."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch import LocalSession, Session, SlurmSession
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs import jobref
from smlaunch.sdk.jobs.jobref import JobRef


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "jobs" / "here").mkdir(parents=True)
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("job-1", JobRef("job-1")),
        ("local:job-1", JobRef("job-1", "local")),
        ("local:/srv/jobs:job-1", JobRef("job-1", "local", "/srv/jobs")),
        ("slurm:/fsx/smlaunch:job-1", JobRef("job-1", "slurm", "/fsx/smlaunch")),
        ("slurm:/mnt/a:b:job-1", JobRef("job-1", "slurm", "/mnt/a:b")),
        ("sagemaker:job-1", JobRef("job-1", "sagemaker")),
    ],
)
def test_forms(text: str, ref: JobRef) -> None:
    assert jobref.parse(text) == ref
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("torchx:job-1", "unknown place 'torchx'"),
        ("slurm:job-1", "slurm: needs the cluster's shared directory"),
        ("sagemaker:us-east-1:job-1", "sagemaker: takes a job name only"),
        ("local::job-1", "the store directory is empty"),
        ("local:job_1", "job names must be"),
        ("local:", "job names must be"),
    ],
)
def test_malformed_references_name_the_forms(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        jobref.parse(text)
    assert problem in str(raised.value) and f"JOB={text!r}" in str(raised.value)


def test_where_each_reference_is(home: Path, tmp_path: Path) -> None:
    local = jobref.session_for(jobref.parse("local:nowhere"))
    assert isinstance(local, LocalSession) and local.root == home / "jobs"
    other = jobref.session_for(jobref.parse(f"local:{tmp_path / 'other'}:x"))
    assert isinstance(other, LocalSession) and other.root == tmp_path / "other"
    (tmp_path / "fsx").mkdir()
    slurm = jobref.session_for(jobref.parse(f"slurm:{tmp_path / 'fsx'}:x"))
    assert isinstance(slurm, SlurmSession) and slurm.root == tmp_path / "fsx" / "jobs"
    assert isinstance(jobref.session_for(jobref.parse("sagemaker:here")), Session)
    # A bare name: the local store when it has a directory of that name, else SageMaker.
    assert isinstance(jobref.session_for(jobref.parse("here")), LocalSession)
    assert isinstance(jobref.session_for(jobref.parse("elsewhere")), Session)
    store = LocalSession(root=tmp_path / "store")
    (tmp_path / "store" / "mine").mkdir(parents=True)
    assert jobref.session_for(jobref.parse("mine"), default_local=store) is store


def test_a_session_given_keeps_its_place(home: Path) -> None:
    session = LocalSession()
    assert jobref.resolve("local:x", session) == (session, "x")
    assert jobref.resolve("x", session) == (session, "x")
    with pytest.raises(
        ConfigurationError, match="names a job of sagemaker, but sagemaker_session is a Local"
    ):
        jobref.resolve("sagemaker:x", session)
    with pytest.raises(ConfigurationError, match="names a job of local:/elsewhere"):
        jobref.resolve("local:/elsewhere:x", session)


def test_attach_and_analytics_find_jobs_as_the_cli(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a session, a name in the local store is the local job's (it used to go to SageMaker)."""
    from smlaunch import PyTorch, TrainingJobAnalytics

    seen = []

    def describe(self: object, name: str) -> dict[str, object]:
        seen.append((type(self).__name__, name))
        raise ConfigurationError("JOB", name, "stop here", "-")

    from smlaunch.sdk.backends.emulated.backend import LocalBackend

    monkeypatch.setattr(LocalBackend, "describe", describe)
    for reference in ("here", "local:here"):
        with pytest.raises(ConfigurationError, match="stop here"):
            PyTorch.attach(reference)
    assert seen == [("LocalBackend", "here")] * 2
    analytics = TrainingJobAnalytics("local:here")
    assert analytics.name == "here"
