"""Races on job names and artifacts, with real concurrent submitters (forked processes).

- Two processes submit the same ``job_name`` with different code: exactly one is accepted, and the
  accepted job stages and runs ITS code, every round (the name is claimed before code is staged).
- Six processes ``fit(wait=False)`` with one ``base_job_name`` at the same moment: six distinct
  names, six jobs (a generated name another submitter holds is replaced by the next millisecond's).
- A job name whose ``<output_path>/<job>/output/`` already holds artifacts (a job of that name in
  another job store) is refused at check time: nothing is overwritten, no job directory is made.
"""

from __future__ import annotations

import multiprocessing
import re
import tarfile
import textwrap
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, PyTorch, contract
from smlaunch.sdk import estimator as estimator_module
from smlaunch.sdk.backends.emulated.artifacts import ArtifactExistsError, package_artifacts
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError
from tests.functional._local_helpers import (
    kill_leftover_jobs,
    local_pytorch,
    moto_s3_in_process,
    wait_terminal,
)

ROUNDS = 20
SUBMITTERS = 6
FORK = multiprocessing.get_context("fork")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    jobs = tmp_path / "jobs"
    yield jobs
    kill_leftover_jobs(jobs)


def _source(tmp_path: Path, marker: str) -> Path:
    src = tmp_path / f"src-{marker}"
    src.mkdir()
    (src / "train.py").write_text(
        textwrap.dedent(f"""
        import argparse, os
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=1)
        args = parser.parse_args()
        print("code={marker}", flush=True)
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "code.txt"), "w") as handle:
            handle.write("{marker}")
    """)
    )
    return src


def _submit(estimator: PyTorch, job_name: str | None, marker: str, start: Any, results: Any) -> None:
    """A submitter process: wait for the others, then fit(wait=False); report what happened."""
    start.wait()
    try:
        estimator.fit(wait=False, job_name=job_name)
        results.put((marker, "accepted", estimator.latest_training_job.name))
    except JobNameTakenError as error:
        results.put((marker, "refused", str(error)))
    except Exception as error:  # reported, so the test fails naming it
        results.put((marker, "error", f"{type(error).__name__}: {error}"))


def _race(submitters: list[tuple[PyTorch, str | None, str]]) -> list[tuple[str, str, str]]:
    start, results = FORK.Barrier(len(submitters)), FORK.Queue()
    procs = [
        FORK.Process(target=_submit, args=(est, name, marker, start, results))
        for est, name, marker in submitters
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return outcomes


def _staged_marker(root: Path, job_name: str) -> str:
    tarball = root / job_name / "source" / contract.SOURCEDIR_TARBALL
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("train.py")
        assert member is not None
        text = member.read().decode()
    return "A" if "code=A" in text else "B" if "code=B" in text else "?"


@pytest.mark.slow
def test_same_job_name_from_two_processes_runs_the_accepted_submitters_code(
    tmp_path: Path, root: Path
) -> None:
    est_a, est_b = (local_pytorch(_source(tmp_path, marker), root) for marker in "AB")
    winners: dict[str, str] = {}
    for round_ in range(ROUNDS):
        name = f"race-{round_}"
        outcomes = _race([(est_a, name, "A"), (est_b, name, "B")])
        accepted = [marker for marker, what, _ in outcomes if what == "accepted"]
        refused = [detail for _, what, detail in outcomes if what == "refused"]
        assert len(accepted) == 1 and len(refused) == 1, outcomes
        assert refused[0].startswith(f"job_name={name!r}") and "Fix: " in refused[0]
        winners[name] = accepted[0]
        assert _staged_marker(root, name) == accepted[0], f"round {round_}: the other submitter's code"
    backend = LocalSession(root=root).backend()
    for name, marker in winners.items():
        assert wait_terminal(backend, name)["TrainingJobStatus"] == contract.STATUS_COMPLETED
        lines = [line for line in backend.log_lines(name) if "code=" in line]
        assert lines == [f"[algo-1/rank 0] code={marker}"], (name, lines)
        with tarfile.open(root / name / "output" / contract.MODEL_TARBALL) as model:
            code = model.extractfile("code.txt")
            assert code is not None and code.read().decode() == marker


class _StoppedClock(datetime):
    """Every submitter reads the same millisecond: all six first try the same generated name."""

    @classmethod
    def now(cls, tz: Any = None) -> _StoppedClock:
        return cls(2026, 1, 2, 3, 4, 5, 6000, tzinfo=timezone.utc)


@pytest.mark.slow
def test_concurrent_fits_with_one_base_job_name_never_collide(
    tmp_path: Path, root: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(estimator_module, "datetime", _StoppedClock)
    src = _source(tmp_path, "A")
    submitters = [
        (local_pytorch(src, root, base_job_name="same-base"), None, str(i)) for i in range(SUBMITTERS)
    ]
    outcomes = _race(submitters)
    assert [what for _, what, _ in outcomes] == ["accepted"] * SUBMITTERS, outcomes
    names = {name for _, _, name in outcomes}
    # Each submitter that found its name taken moved on to the next millisecond.
    assert names == {f"same-base-2026-01-02-03-04-05-{ms:03d}" for ms in range(6, 6 + SUBMITTERS)}
    assert {p.name for p in root.iterdir() if not p.name.startswith(".")} == names  # .requirements: the cache
    backend = LocalSession(root=root).backend()
    for name in names:
        assert backend.describe(name)["TrainingJobName"] == name
        assert wait_terminal(backend, name)["TrainingJobStatus"] == contract.STATUS_COMPLETED


def test_earlier_artifacts_at_the_output_path_are_never_overwritten(tmp_path: Path) -> None:
    """Job store 1 ran ``shared-name`` into a shared output path; store 2 refuses the same name."""
    src = _source(tmp_path, "A")
    output = tmp_path / "shared-output"
    earlier = output / "shared-name" / "output" / contract.MODEL_TARBALL
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"the first job's model")
    store = tmp_path / "store-2"
    estimator = local_pytorch(src, store, output_path=output.as_uri())
    with pytest.raises(ConfigurationError) as caught:
        estimator.fit(wait=False, job_name="shared-name")
    assert caught.value.field == "output_path" and str(earlier.as_uri()) in str(caught.value)
    assert "Fix: " in str(caught.value)
    assert earlier.read_bytes() == b"the first job's model"
    assert not (store / "shared-name").exists()


def test_earlier_artifacts_in_s3_are_never_overwritten(tmp_path: Path, monkeypatch: Any) -> None:
    with moto_s3_in_process(monkeypatch, "models") as s3:
        s3.put_object(Bucket="models", Key="runs/shared-name/output/model.tar.gz", Body=b"first")
        store = tmp_path / "store"
        estimator = PyTorch(
            entry_point="train.py",
            source_dir=str(_source(tmp_path, "A")),
            framework_version="2.1.0",
            py_version="py310",
            instance_type="local",
            instance_count=1,
            output_path="s3://models/runs",
            sagemaker_session=LocalSession(root=store, s3_client=s3),
        )
        key = "runs/shared-name/output/model.tar.gz"
        with pytest.raises(ConfigurationError, match=re.escape(f"s3://models/{key}")):
            estimator.fit(wait=False, job_name="shared-name")
        assert s3.get_object(Bucket="models", Key=key)["Body"].read() == b"first"
        assert not (store / "shared-name").exists()


def test_artifacts_delivered_meanwhile_by_a_namesake_are_not_overwritten(tmp_path: Path) -> None:
    """Both jobs passed their check; the other one delivered first: this one fails, keeping it."""
    host = tmp_path / "hosts" / "algo-1"
    (host / "model").mkdir(parents=True)
    (host / "model" / "model.pt").write_text("mine")
    output = tmp_path / "out"
    theirs = output / "shared-name" / "output" / contract.MODEL_TARBALL
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"the other job's model")
    with pytest.raises(ArtifactExistsError, match=re.escape(theirs.as_uri())):
        package_artifacts(
            {"algo-1": host},
            "shared-name",
            output.as_uri(),
            tmp_path / "staging",
            s3_client=lambda: pytest.fail("no S3"),
            log=lambda _: None,
        )
    assert theirs.read_bytes() == b"the other job's model"
    assert [p.name for p in theirs.parent.iterdir()] == [contract.MODEL_TARBALL]
