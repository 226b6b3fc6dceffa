"""``smlaunch`` on a job store that is not as smlaunch left it, through subprocesses as a user types it.

- ``rm X`` acts on the directory named: a copy of job A's directory (``cp -r jobs/A jobs/a-backup``)
  is refused (its record names A), never A; ``gc`` afterwards ends cleanly.
- Damaged records (a truncated ``state.json``, a ``spec.json`` that is not text, a missing one) are
  listed and described as ``damaged: <file>: <why>`` (``attach`` raises that), and ``rm`` removes them.
- A claim whose submitter was killed while packaging is ``Abandoned``: listed, collected by ``gc``,
  and its name free again; a live submitter's claim is never collected, whatever ``gc`` runs meanwhile.
- On a read-only store (a read-only bind mount: root ignores file modes) and on a store that is a
  file, every command ends with a message, never a traceback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional._local_helpers import kill_leftover_jobs

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """\
import os, sys, time
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as handle:
    handle.write("weights")
print("loss=0.5", flush=True)
while "--forever" in sys.argv:
    time.sleep(0.2)
"""
SUBMITTER = """\
import pathlib, sys, time
from smlaunch import LocalSession, PyTorch
from smlaunch.sdk import estimator as module

job_name, reached, release = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
real = module.build_and_stage

def packaging(*args, **kwargs):  # the notebook is packaging the code: hold it there until released
    reached.touch()
    while not release.exists():
        time.sleep(0.05)
    return real(*args, **kwargs)

module.build_and_stage = packaging
estimator = PyTorch(entry_point="train.py", source_dir="src", framework_version="2.1.0", py_version="py310",
                    instance_type="local", instance_count=1, sagemaker_session=LocalSession())
estimator.fit(job_name=job_name, logs=False)
"""


class Cli:
    """``smlaunch ...`` in a subprocess with its own job store (``$SMLAUNCH_HOME/jobs``)."""

    def __init__(self, base: Path) -> None:
        self.cwd = base
        self.home = base / "home"
        self.jobs = self.home / "jobs"
        # This checkout, whatever is installed: the commands run from the test's directory.
        self.env = dict(os.environ, SMLAUNCH_HOME=str(self.home), PYTHONPATH=str(REPO))

    def __call__(self, *args: str, wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        command = [*wrap, sys.executable, "-m", "smlaunch.sdk.cli.main", *args]
        return subprocess.run(
            command, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120
        )

    def run_job(self, name: str, *extra: str) -> None:
        result = self("run", "train.py", "--source-dir", "src", "--job-name", name, *extra)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]

    def statuses(self) -> dict[str, str]:
        # The table: --output json is ListTrainingJobs' response, jobs only, not the store's others
        listed = self("list", "--limit", "100")
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        return {row[0]: row[1] for row in rows if not row[0].endswith(":")}  # not "NAME: why" lines


def clean(result: subprocess.CompletedProcess[str], returncode: int) -> str:
    """The stderr of a command that ended with ``returncode`` and no traceback."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == returncode, (result.returncode, result.stdout, result.stderr)
    return result.stderr


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    runner = Cli(tmp_path)
    yield runner
    kill_leftover_jobs(runner.jobs)


def test_rm_acts_on_the_directory_named_never_on_the_job_its_copy_names(cli: Cli) -> None:
    cli.run_job("job-a")
    shutil.copytree(cli.jobs / "job-a", cli.jobs / "a-backup", symlinks=True)

    refused = clean(cli("rm", "a-backup"), 2)
    assert "record of job 'job-a'" in refused and "rm -r" in refused
    assert (cli.jobs / "job-a" / "output" / "model.tar.gz").is_file()
    assert (cli.jobs / "a-backup").is_dir()
    assert cli.statuses() == {"job-a": "Completed", "a-backup": "Foreign"}  # job-a listed once
    assert "record of job 'job-a'" in clean(cli("describe", "a-backup"), 2)
    assert "record of job 'job-a'" in clean(cli("stop", "a-backup"), 2)

    removed = cli("gc", "--older-than", "0s")
    clean(removed, 0)
    assert "removed job-a" in removed.stdout
    assert not (cli.jobs / "job-a").exists() and (cli.jobs / "a-backup").is_dir()
    clean(cli("gc", "--older-than", "0s"), 0)
    assert cli.statuses() == {"a-backup": "Foreign"}


def test_damaged_records_are_listed_described_and_removed(cli: Cli) -> None:
    for name in ("truncated", "garbled", "no-spec", "bad-time", "fine"):
        cli.run_job(name)
    state = cli.jobs / "truncated" / "state.json"
    state.write_bytes(state.read_bytes()[:40])
    (cli.jobs / "garbled" / "spec.json").write_bytes(b"\xff\xfe\x00garbage")
    (cli.jobs / "no-spec" / "spec.json").unlink()
    bad_time = cli.jobs / "bad-time" / "state.json"
    bad_time.write_text(bad_time.read_text().replace('"CreationTime": ', '"CreationTime": 1e300, "x": '))
    with open(cli.jobs / "fine" / "logs" / "metrics.jsonl", "a") as metrics:
        metrics.write('{"name": "loss"}\n[1]\n{"name": "loss", "value": 1, "time": 1e300}\n')

    listed = cli("list")
    clean(listed, 0)
    assert f"truncated: damaged: {state}: not valid JSON" in listed.stdout
    assert f"garbled: damaged: {cli.jobs / 'garbled' / 'spec.json'}: not UTF-8 text" in listed.stdout
    assert f"no-spec: damaged: {cli.jobs / 'no-spec' / 'spec.json'}: missing" in listed.stdout
    assert f"bad-time: damaged: {bad_time}: a time is not a timestamp" in listed.stdout
    assert cli.statuses() == {
        "truncated": "Damaged",
        "garbled": "Damaged",
        "no-spec": "Damaged",
        "bad-time": "Damaged",
        "fine": "Completed",
    }

    clean(cli("describe", "fine"), 0)  # damaged metric lines are skipped
    for command in ("describe", "logs", "stop", "metrics"):
        assert clean(cli(command, "truncated"), 2).startswith(f"error: damaged: {state}: not valid JSON")
    attach = subprocess.run(
        [
            sys.executable,
            "-c",
            "from smlaunch import LocalSession, PyTorch\n"
            "from smlaunch.sdk.backends.emulated.store import DamagedRecordError\n"
            "try:\n"
            "    PyTorch.attach('truncated', sagemaker_session=LocalSession())\n"
            "except DamagedRecordError as exc:\n"
            "    print(exc)\n",
        ],
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert attach.stdout.startswith(f"damaged: {state}: not valid JSON"), attach.stdout + attach.stderr

    kept = cli("gc", "--older-than", "1h")  # gc leaves damaged records to the user
    assert "kept 4 damaged" in kept.stdout and clean(kept, 0) == ""
    removed = cli("rm", "truncated", "garbled", "no-spec", "bad-time")
    clean(removed, 0)
    assert sorted(p.name for p in cli.jobs.iterdir() if p.name != ".requirements") == ["fine"]


def _submitter(cli: Cli, name: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A notebook submitting ``name``, held while it packages the code; (process, reached, release)."""
    reached, release = cli.cwd / f"{name}.reached", cli.cwd / f"{name}.release"
    process = subprocess.Popen(
        [sys.executable, "-c", SUBMITTER, name, str(reached), str(release)], cwd=cli.cwd, env=cli.env
    )
    deadline = time.monotonic() + 60
    while not reached.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the submitter never packaged"
        time.sleep(0.05)
    return process, reached, release


@pytest.mark.slow
def test_abandoned_claim_is_collected_and_a_live_one_never(cli: Cli) -> None:
    live, _, release = _submitter(cli, "live-claim")
    try:
        assert cli.statuses() == {"live-claim": "Claimed"}
        assert "kept 1 running" in cli("gc", "--older-than", "0s").stdout
        assert "Claimed" in clean(cli("rm", "live-claim"), 2)
        assert (cli.jobs / "live-claim").is_dir()
        release.touch()
        assert live.wait(timeout=120) == 0
    finally:
        live.kill()
    assert cli.statuses() == {"live-claim": "Completed"}

    dead, _, _ = _submitter(cli, "dead-claim")
    dead.send_signal(signal.SIGKILL)  # the notebook dies while packaging
    dead.wait(timeout=30)
    assert cli.statuses()["dead-claim"] == "Abandoned"
    assert "Abandoned" in clean(cli("describe", "dead-claim"), 2)
    taken = cli("run", "train.py", "--source-dir", "src", "--job-name", "dead-claim")
    assert "Abandoned" in clean(taken, 2)
    collected = cli("gc")  # an abandoned claim goes whatever --older-than says
    clean(collected, 0)
    assert "removed dead-claim" in collected.stdout
    assert not (cli.jobs / "dead-claim").exists()
    cli.run_job("dead-claim")  # the name is free again
    assert cli.statuses() == {"live-claim": "Completed", "dead-claim": "Completed"}


def test_a_submitter_killed_while_starting_the_agent_leaves_a_record_gc_keeps(cli: Cli) -> None:
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal\n"
            "from smlaunch.sdk.backends.emulated.backend import LocalBackend\n"
            "LocalBackend._start_agent = lambda self, job: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from smlaunch import LocalSession, PyTorch\n"
            "PyTorch(entry_point='train.py', source_dir='src', framework_version='2.1.0',\n"
            "        py_version='py310', instance_type='local', instance_count=1,\n"
            "        sagemaker_session=LocalSession()).fit(job_name='half-started', logs=False)\n",
        ],
        cwd=cli.cwd,
        env=cli.env,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL
    assert cli.statuses() == {"half-started": "Damaged"}  # its agent might run: never Abandoned
    assert "which may run" in cli("list").stdout
    assert "kept 1 damaged" in cli("gc").stdout
    clean(cli("rm", "half-started"), 0)
    assert not (cli.jobs / "half-started").exists()


@pytest.mark.slow
def test_gc_running_all_the_time_never_collects_a_submit_under_way(cli: Cli) -> None:
    stop = threading.Event()
    failures: list[str] = []

    def collect() -> None:
        while not stop.is_set():
            result = cli("gc", "--older-than", "1h")
            if result.returncode != 0 or "removed 0" not in result.stdout:
                failures.append(result.stdout + result.stderr)

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        for index in range(4):
            cli.run_job(f"raced-{index}")
    finally:
        stop.set()
        collector.join()
    assert failures == []
    assert cli.statuses() == {f"raced-{i}": "Completed" for i in range(4)}


def _read_only(path: Path) -> tuple[str, ...]:
    """A command prefix under which ``path`` is read-only: a read-only bind mount in a private mount
    namespace for root (which ignores file modes); file modes for anyone else."""
    if os.geteuid() != 0:
        for directory, _, files in os.walk(path):
            for name in [directory, *(os.path.join(directory, f) for f in files)]:
                os.chmod(name, os.stat(name).st_mode & ~0o222)
        return ()
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no mount namespace for a read-only bind mount")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return ("unshare", "-m", "sh", "-c", script, str(path))


@pytest.mark.slow
def test_every_command_on_a_read_only_store_ends_with_a_message(cli: Cli) -> None:
    cli.run_job("ended")
    started = cli(
        "run", "train.py", "--source-dir", "src", "--job-name", "running", "--hp", "forever=1", "--no-wait"
    )
    assert started.returncode == 0, started.stderr
    ro = _read_only(cli.home)
    try:
        probe = cli("list", wrap=ro)
        clean(probe, 0)
        if os.geteuid() == 0:
            check = subprocess.run([*ro, "touch", str(cli.jobs / "probe")], capture_output=True, text=True)
            assert check.returncode != 0 and "Read-only" in check.stderr, "the store is not read-only"
        assert "ended" in probe.stdout
        clean(cli("describe", "ended", wrap=ro), 0)
        clean(cli("logs", "ended", wrap=ro), 0)
        assert "ended" in clean(cli("rm", "ended", wrap=ro), 2)
        gc = cli("gc", "--older-than", "0s", wrap=ro)
        assert "cannot remove ended" in clean(gc, 2)
        assert "Read-only file system" in clean(cli("stop", "running", wrap=ro), 2) or os.geteuid() != 0
        assert "--output-path=" in clean(cli("run", "train.py", "--source-dir", "src", wrap=ro), 2)
        assert (cli.jobs / "ended" / "output" / "model.tar.gz").is_file()
    finally:
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+w", str(cli.home)], check=True)
    assert cli.statuses()["running"] == "InProgress"
    clean(cli("stop", "running"), 0)


def test_every_command_on_a_store_that_is_a_file_ends_with_a_message(cli: Cli) -> None:
    cli.home.mkdir()
    cli.jobs.write_text("not a directory")
    for args in (["list"], ["gc"], ["describe", "some-job"], ["rm", "some-job"], ["stop", "some-job"]):
        result = cli(*args)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode == 2 and result.stderr.startswith("error: "), (args, result.stderr)
    assert "--output-path=" in clean(cli("run", "train.py", "--source-dir", "src"), 2)
