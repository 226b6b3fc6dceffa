"""A source_dir's requirements.txt in local process jobs: installed once into a cached environment
layered over the user's interpreter, never into the interpreter itself; each job runs in a copy of its
own, gone when the job ends, so the next job with the same file installs nothing and sees nothing the
last one wrote; its console scripts are found; skipped with ``LocalSession(install_requirements=False)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import PyTorch, UnexpectedStatusException, contract
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests._wheels import make_wheel
from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs

SCRIPT = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
try:
    import smlaunch_probe
    probe = smlaunch_probe.VALUE
except ImportError:
    probe = None
host = os.environ["SM_CURRENT_HOST"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}.json"), "w") as out:
    json.dump({"probe": probe, "python": sys.executable}, out)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _freeze() -> str:
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    ).stdout


def _estimator(
    tmp_path: Path,
    session: LocalSession,
    instance_count: int,
    hyperparameters: dict[str, object] | None = None,
) -> PyTorch:
    return PyTorch(
        entry_point="train.py",
        source_dir=str(tmp_path / "src"),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=instance_count,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters=hyperparameters or {"epochs": 1},
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )


def _fit(
    tmp_path: Path,
    session: LocalSession,
    job_name: str,
    instance_count: int,
    hyperparameters: dict[str, object] | None = None,
) -> tuple[dict[str, bytes], str]:
    """Run ``tmp_path/src/train.py`` to completion; the files of its model and its log."""
    estimator = _estimator(tmp_path, session, instance_count, hyperparameters)
    estimator.fit(logs=False, job_name=job_name)
    description = session.backend().describe(job_name)
    log = "\n".join(session.backend().log_lines(job_name))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert_no_job_processes(job_name, tmp_path / "jobs" / job_name)
    return files, log


def _reports(files: dict[str, bytes]) -> list[dict]:
    return [json.loads(data) for data in files.values()]


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    wheel = make_wheel(tmp_path / "wheels", "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'v1'\n"})
    (src / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{wheel}\n")
    return wheel


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_requirements_install_once_per_job_never_into_the_interpreter_and_are_reused(tmp_path: Path) -> None:
    wheel = _source(tmp_path)
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    before = _freeze()

    jobs = tmp_path / "jobs" / ".requirements" / "jobs"
    files, log = _fit(tmp_path, session, "reqs-first", instance_count=2)
    reports = _reports(files)
    assert {r["probe"] for r in reports} == {"v1"}
    assert len(reports) == 2
    # Both hosts: the job's own copy of the layered environment, removed when the job ended.
    assert {r["python"] for r in reports} == {str(jobs / "reqs-first" / "bin" / "python")}
    assert log.count("building the environment") == 1, log  # pip ran once for the job, not per host
    assert "pip: Successfully installed smlaunch_probe-1.0" in log.replace("smlaunch-probe", "smlaunch_probe")
    assert _freeze() == before
    assert list(jobs.iterdir()) == []

    wheel.unlink()  # pip would fail now: the second job must install nothing
    files, log = _fit(tmp_path, session, "reqs-second", instance_count=2)
    reports = _reports(files)
    assert {r["probe"] for r in reports} == {"v1"}
    assert {r["python"] for r in reports} == {str(jobs / "reqs-second" / "bin" / "python")}
    assert "pip:" not in log and "building the environment" not in log, log
    assert "reusing the environment" in log, log
    assert _freeze() == before
    assert list(jobs.iterdir()) == []


SAGEMAKER_STYLE = """
import argparse, os, site, subprocess, sys

parser = argparse.ArgumentParser()
parser.add_argument("--downgrade", type=int, default=0)
parser.add_argument("--wheels", type=str)
parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
args, _ = parser.parse_known_args()

import smlaunch_probe

with open(os.path.join(args.model_dir, "seen.txt"), "w") as out:
    out.write(f"{smlaunch_probe.VALUE} {os.environ.get('SMLAUNCH_PLANTED')} {os.environ['VIRTUAL_ENV']}\\n")
if args.downgrade:
    # What SageMaker scripts do at run time: pin another version, and leave a .pth behind.
    pip = [sys.executable, "-m", "pip", "install"]
    subprocess.check_call(pip + ["--no-index", "--find-links", args.wheels, "smlaunch_probe==0.9"])
    with open(os.path.join(site.getsitepackages()[0], "zz-planted.pth"), "w") as pth:
        pth.write("import os; os.environ['SMLAUNCH_PLANTED'] = '1'\\n")
    probe = "import os, smlaunch_probe; print(smlaunch_probe.VALUE, os.environ['SMLAUNCH_PLANTED'])"
    check = subprocess.check_output([sys.executable, "-c", probe])
    assert check.decode().split() == ["v0.9", "1"], check
# After training: a tool that requirements.txt installed, as torch-model-archiver is run.
subprocess.check_call(["smlaunch-archiver", "--export-path", args.model_dir])
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_each_job_gets_its_own_environment_and_finds_its_console_scripts(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SAGEMAKER_STYLE)
    wheels = tmp_path / "wheels"
    probe = make_wheel(wheels, "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'v1'\n"})
    make_wheel(wheels, "smlaunch_probe", "0.9", {"smlaunch_probe.py": "VALUE = 'v0.9'\n"})
    archiver = make_wheel(
        wheels,
        "smlaunch_archiver",
        "1.0",
        {
            "smlaunch_archiver.py": (
                "import os, sys\n"
                "def main():\n"
                "    path = os.path.join(sys.argv[sys.argv.index('--export-path') + 1], 'model.mar')\n"
                "    open(path, 'w').write(sys.prefix)\n"
            ),
            "smlaunch_archiver-1.0.dist-info/entry_points.txt": (
                "[console_scripts]\nsmlaunch-archiver = smlaunch_archiver:main\n"
            ),
        },
    )
    (src / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{probe}\n{archiver}\n")
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    template = tmp_path / "jobs" / ".requirements"
    before = _freeze()

    def fit(job_name: str, downgrade: int) -> dict[str, str]:
        hyperparameters = {"downgrade": downgrade, "wheels": str(wheels)}
        files, _ = _fit(tmp_path, session, job_name, 1, hyperparameters)
        return {name: data.decode() for name, data in files.items()}

    first = fit("own-env-first", downgrade=1)
    own = str(template / "jobs" / "own-env-first")
    assert first == {"seen.txt": f"v1 None {own}\n", "model.mar": own}
    second = fit("own-env-second", downgrade=0)
    own = str(template / "jobs" / "own-env-second")
    assert second == {"seen.txt": f"v1 None {own}\n", "model.mar": own}  # neither 0.9 nor the .pth
    assert _freeze() == before
    assert not any((template / "jobs").iterdir())


@pytest.mark.timeout(120)
def test_install_requirements_false_skips_them(tmp_path: Path) -> None:
    wheel = _source(tmp_path)
    wheel.unlink()  # pip would fail: it must not run
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5, install_requirements=False)
    files, log = _fit(tmp_path, session, "reqs-off", instance_count=1)
    assert json.loads(files["algo-1.json"]) == {"probe": None, "python": sys.executable}
    assert "requirements.txt not installed" in log and "pip:" not in log, log


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_environment_of_a_job_whose_host_was_killed_is_removed_when_the_job_ends(tmp_path: Path) -> None:
    _source(tmp_path)
    (tmp_path / "src" / "train.py").write_text(
        "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(60)\n"
    )
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    estimator = _estimator(tmp_path, session, instance_count=1)
    with pytest.raises(UnexpectedStatusException):
        estimator.fit(logs=False, job_name="reqs-killed")
    log = "\n".join(session.backend().log_lines("reqs-killed"))
    assert "the job's environment" in log, log
    assert list((tmp_path / "jobs" / ".requirements" / "jobs").iterdir()) == []
