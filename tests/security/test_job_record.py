"""The job record is out of the ranks' reach (process executor).

A rank is a script as SageMaker scripts are written (``SM_MODEL_DIR``, literal ``/opt/ml`` paths),
run through the public API with the default store layout. It tries to forge its own job's record,
or to read and stop another job that runs beside it, by paths it walks to and by absolute paths it
is told: on SageMaker the record belongs to the service and jobs are separate machines.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, contract
from smlaunch.sdk.backends.emulated.executors.process.spawn import PrivateOptMl
from smlaunch.sdk.backends.emulated.state import HOST_REPORT_BYTES, host_report
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.pytorch import PyTorch
from tests.functional._local_helpers import kill_leftover_jobs

FORGE = """
import json, os, sys
from pathlib import Path

FORGED = {"TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
          "ModelArtifacts": {"S3ModelArtifacts": "s3://forged/model.tar.gz"}}

def forge(start):
    for directory in [Path(start), *Path(start).parents]:
        for state in [directory / "state.json", *directory.glob("*/state.json")]:
            try:
                data = json.loads(state.read_text())
                data.update(FORGED)
                state.write_text(json.dumps(data))
                print("forged", state, flush=True)
            except OSError as error:
                print("could not forge", state, error, flush=True)

forge(os.environ["SM_MODEL_DIR"])
forge("/opt/ml/model")
sys.exit(3)
"""

VICTIM = """
import os, time
from pathlib import Path

signals = Path(os.environ["SIGNALS"])
with open(os.path.join(os.environ["SM_MODEL_DIR"], "secret.pth"), "w") as handle:
    handle.write("weights")
(signals / "victim-ready").touch()
deadline = time.monotonic() + 120
while not (signals / "intruder-done").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("victim done", flush=True)
"""

INTRUDER = """
import json, os, time
from pathlib import Path

signals, victim = Path(os.environ["SIGNALS"]), Path(os.environ["VICTIM_DIR"])
deadline = time.monotonic() + 120
while not (signals / "victim-ready").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
seen = {}

def attempt(what, action):
    try:
        seen[what] = action()
    except OSError as error:
        seen[what] = type(error).__name__

attempt("model files", lambda: sorted(os.listdir(victim / "hosts" / "algo-1" / "model")))
attempt("state", lambda: json.loads((victim / "state.json").read_text())["TrainingJobStatus"])
attempt("log", lambda: (victim / "logs" / "job.log").read_text())
attempt("stop", lambda: (victim / "stop").touch())
store = Path(os.environ["SM_MODEL_DIR"]).parents[3]
attempt("walked to the store", lambda: sorted(os.listdir(store)))
attempt("walked to the victim", lambda: sorted(os.listdir(store / victim.name)))
(Path(os.environ["SM_MODEL_DIR"]) / "seen.json").write_text(json.dumps(seen))
(signals / "intruder-done").touch()
"""

if sys.platform != "linux":
    pytest.skip("the record is hidden in each host's mount namespace (Linux)", allow_module_level=True)


def _estimator(tmp_path: Path, session: LocalSession, name: str, script: str, **kwargs: Any) -> PyTorch:
    source = tmp_path / f"src-{name}"
    source.mkdir()
    (source / "train.py").write_text(script)
    return PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
        **kwargs,
    )


def _require_namespaces(tmp_path: Path) -> None:
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")


@pytest.mark.slow
def test_a_rank_cannot_forge_its_own_job_into_completed(tmp_path: Path) -> None:
    _require_namespaces(tmp_path)
    root = tmp_path / "jobs"
    session = LocalSession(root, stop_grace_seconds=5)
    estimator = _estimator(tmp_path, session, "forge", FORGE)
    try:
        with pytest.raises(JobFailedError):
            estimator.fit(job_name="forger", wait=True, logs=False)
    finally:
        kill_leftover_jobs(root)
    job = estimator.latest_training_job
    assert job is not None
    description = job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert "exited with code 3" in description["FailureReason"], description["FailureReason"]
    assert "forged" not in json.dumps(description.get("ModelArtifacts"))
    on_disk = json.loads((root / "forger" / "state.json").read_text())
    assert on_disk["TrainingJobStatus"] == contract.STATUS_FAILED
    log = (root / "forger" / "logs" / "job.log").read_text()
    assert "forged " not in log and "No private /opt/ml" not in log


@pytest.mark.slow
def test_a_rank_cannot_see_or_stop_another_running_job(tmp_path: Path) -> None:
    _require_namespaces(tmp_path)
    root, signals = tmp_path / "jobs", tmp_path / "signals"
    signals.mkdir()
    session = LocalSession(root, stop_grace_seconds=5)
    environment = {"SIGNALS": str(signals), "VICTIM_DIR": str(root / "victim")}
    victim = _estimator(tmp_path, session, "victim", VICTIM, environment=environment)
    intruder = _estimator(tmp_path, session, "intruder", INTRUDER, environment=environment)
    try:
        victim.fit(job_name="victim", wait=False)
        intruder.fit(job_name="intruder", wait=True, logs=False)
        assert victim.latest_training_job is not None
        victim.latest_training_job.wait(logs=False)
    finally:
        kill_leftover_jobs(root)
    assert victim.latest_training_job.describe()["TrainingJobStatus"] == contract.STATUS_COMPLETED
    assert not (root / "victim" / "stop").exists()
    seen = json.loads((root / "intruder" / "hosts" / "algo-1" / "model" / "seen.json").read_text())
    assert seen["model files"] == "FileNotFoundError", seen
    assert seen["state"] == "FileNotFoundError", seen
    assert seen["log"] == "FileNotFoundError", seen
    assert seen["stop"] in ("FileNotFoundError", "OSError"), seen  # read-only file system: OSError
    assert "intruder" in seen["walked to the store"] and "victim" not in seen["walked to the store"], seen
    assert seen["walked to the victim"] == "FileNotFoundError", seen


def test_a_host_report_is_read_only_as_a_small_regular_file(tmp_path: Path) -> None:
    report = tmp_path / "failure.json"
    report.write_text(json.dumps({"time": 1.0, "reason": "boom"}))
    assert host_report(report) == {"time": 1.0, "reason": "boom"}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert host_report(fifo) is None  # returns at once: a FIFO would block the agent for ever
    link = tmp_path / "link.json"
    link.symlink_to(report)
    assert host_report(link) is None
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"time": 1.0, "reason": "x" * HOST_REPORT_BYTES}))
    assert host_report(huge) is None
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert host_report(listed) is None and host_report(tmp_path / "missing.json") is None


TRAIN = """
import os
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.pth"), "w") as handle:
    handle.write("weights")
print("trained", flush=True)
"""


@pytest.mark.slow
def test_another_user_reads_nothing_of_a_job_on_a_shared_store(tmp_path: Path) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' here")
    if os.geteuid() != 0:
        pytest.skip("becoming another user takes root")
    shared = Path(tempfile.mkdtemp(prefix="smlaunch-shared-", dir="/tmp"))  # as a Slurm shared_dir
    try:
        shared.chmod(0o755)  # others may enter the store and read what it lets them
        root = shared / "jobs"
        estimator = _estimator(tmp_path, LocalSession(root, stop_grace_seconds=5), "train", TRAIN)
        old_umask = os.umask(0)  # the most permissive user: nothing may depend on a umask
        try:
            estimator.fit(job_name="private", wait=True, logs=False)
        finally:
            os.umask(old_umask)
            kill_leftover_jobs(root)
        job = root / "private"
        assert (job / "hosts" / "algo-1" / "model" / "weights.pth").exists()
        assert stat.S_IMODE(job.stat().st_mode) == 0o700
        logs = sorted((job / "logs").glob("*.log"))
        assert {p.name for p in logs} >= {"job.log", "agent.log", "algo-1.log"}
        assert {stat.S_IMODE(p.stat().st_mode) for p in logs} == {0o600}
        readable = [
            job / "logs" / "job.log",
            job / "logs" / "algo-1.log",
            job / "state.json",
            job / "hosts" / "algo-1" / "model" / "weights.pth",
            job / "output" / "model.tar.gz",
        ]
        listable = [job, job / "logs", job / "hosts" / "algo-1" / "model"]
        script = "".join(f'cat "{p}" >/dev/null 2>&1 && echo "read {p}"; ' for p in readable)
        script += "".join(f'ls "{p}" >/dev/null 2>&1 && echo "listed {p}"; ' for p in listable)
        script += f'ls "{root}" >/dev/null && echo "store listed"'

        def become_nobody() -> None:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

        seen = subprocess.run(
            ["/bin/sh", "-c", script], preexec_fn=become_nobody, capture_output=True, text=True, check=False
        )
        assert seen.stdout.splitlines() == ["store listed"], seen.stdout + seen.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.slow
def test_artifacts_delivered_outside_the_store_are_written_as_the_umask_says(tmp_path: Path) -> None:
    """The store keeps a job to its submitter; what the job delivers to the user's own
    ``output_path`` (code, model, output) has the modes any file the user creates there has."""
    root, out = tmp_path / "jobs", tmp_path / "team-share"
    estimator = _estimator(
        tmp_path, LocalSession(root, stop_grace_seconds=5), "train", TRAIN, output_path=out.as_uri()
    )
    old_umask = os.umask(0o027)  # a team directory: the group reads, others nothing
    try:
        estimator.fit(job_name="shared", wait=True, logs=False)
    finally:
        os.umask(old_umask)
        kill_leftover_jobs(root)
    delivered = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert delivered == [
        "shared/output/model.tar.gz",
        "shared/output/output.tar.gz",
        "shared/source/sourcedir.tar.gz",
    ]
    assert {stat.S_IMODE((out / rel).stat().st_mode) for rel in delivered} == {0o640}
    assert stat.S_IMODE((root / "shared").stat().st_mode) == 0o700
