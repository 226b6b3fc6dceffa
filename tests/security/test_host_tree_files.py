"""What a rank leaves in place of the runtime's own files in its host tree neither blocks the job
nor redirects a write.

The runtime writes ``output/success``, ``output/failure``, ``output/failure.json`` and the
watchdog's ``output/data/smlaunch-stacks-<host>.txt`` into a tree the ranks can write, and reads a
``failure`` a script wrote itself (its reason wins, as on SageMaker). A rank that leaves a FIFO
there (opening it blocked the host's runtime, so the job never ended), a link to ``/dev/zero``
(read to the end of memory) or a link out of the tree (followed: the runtime wrote, or truncated,
the file it names) must not make the job hang, nor make the runtime write outside the tree. Real
local jobs (process executor), run side by side to keep the suite fast; the pytest timeout only
guards the hangs these cases used to cause.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import PyTorch, contract
from smlaunch.contract.artifact_tree import write_file
from smlaunch.rank.boot import register
from smlaunch.runtime.report import OWN_FAILURE_MAX_BYTES, write_failure, write_success
from smlaunch.runtime.supervision.hooks import RankRegistry
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import kill_leftover_jobs

SCRIPT = """
import argparse, os, sys

parser = argparse.ArgumentParser()
parser.add_argument("--case")
parser.add_argument("--outside")
args = parser.parse_args()
output = os.environ["SM_OUTPUT_DIR"]
data = os.environ["SM_OUTPUT_DATA_DIR"]
outside = args.outside
if args.case == "fifo-failure":
    os.mkfifo(os.path.join(output, "failure"))
    os.mkfifo(os.path.join(output, "failure.json"))
elif args.case == "fifo-success":
    os.mkfifo(os.path.join(output, "success"))
elif args.case == "zero-failure":
    os.symlink("/dev/zero", os.path.join(output, "failure"))
elif args.case == "links-failure":
    os.symlink(os.path.join(outside, "failure"), os.path.join(output, "failure"))
    os.symlink(os.path.join(outside, "failure.json"), os.path.join(output, "failure.json"))
elif args.case == "links-success":
    os.symlink(os.path.join(outside, "success"), os.path.join(output, "success"))
    os.symlink(os.path.join(outside, "created"), os.path.join(output, "failure.json"))
print("planted", args.case, flush=True)
sys.exit(0 if args.case.endswith("success") else 1)
"""

CASES = {
    # case: the status the job ends in
    "fifo-failure": contract.STATUS_FAILED,
    "zero-failure": contract.STATUS_FAILED,
    "links-failure": contract.STATUS_FAILED,
    "fifo-success": contract.STATUS_COMPLETED,
    "links-success": contract.STATUS_COMPLETED,
}
ORIGINAL = "the original content of a file outside the host tree\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every host tree, holding files a planted link names."""
    directory = tmp_path / "outside"
    directory.mkdir()
    for name in ("failure", "failure.json", "success"):
        (directory / name).write_text(ORIGINAL)
    os.utime(directory / "success", (1, 1))  # touch() through the link would change it
    return directory


@pytest.fixture
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _untouched(outside: Path) -> None:
    assert sorted(os.listdir(outside)) == ["failure", "failure.json", "success"], "nothing created"
    for name in ("failure", "failure.json", "success"):
        assert (outside / name).read_text() == ORIGINAL, name
    assert os.stat(outside / "success").st_mtime == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("_no_leftovers")
def test_planted_fifos_and_links_neither_block_nor_redirect(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    session = LocalSession(tmp_path / "jobs", stop_grace_seconds=5)
    estimators = {}
    for case in CASES:
        estimators[case] = PyTorch(
            entry_point="train.py",
            source_dir=str(tmp_path / "code"),
            role="arn:aws:iam::111122223333:role/r",
            instance_type="ml.c5.xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            hyperparameters={"case": case, "outside": str(outside)},
            output_path=(tmp_path / "out").as_uri(),
            sagemaker_session=session,
        )
        estimators[case].fit(job_name=f"planted-{case}", wait=False)
    for case, status in CASES.items():
        job = estimators[case].latest_training_job
        assert job is not None
        with contextlib.suppress(JobFailedError):
            job.wait(logs=False)  # ends on its own; the timeout above only guards a hang
        description = job.describe()
        log = (tmp_path / "jobs" / f"planted-{case}" / "logs" / "job.log").read_text()
        assert f"planted {case}" in log, (case, log)
        assert description["TrainingJobStatus"] == status, (case, description.get("FailureReason"), log)
        if status == contract.STATUS_FAILED:
            assert "exited with code 1" in description["FailureReason"], (case, description)
    _untouched(outside)


def test_the_runtime_writes_its_files_without_following_a_planted_link(tmp_path: Path, outside: Path) -> None:
    """The same rule without a job: the runtime's report functions on a tree a rank has prepared."""
    paths = contract.Paths(tmp_path / "host")
    paths.output_dir.mkdir(parents=True)
    paths.success_file.symlink_to(outside / "success")
    (paths.output_dir / contract.FAILURE_DETAILS_FILE).symlink_to(outside / "failure.json")
    paths.failure_file.symlink_to(outside / "failure")
    write_success(paths)
    assert paths.success_file.is_file() and not paths.success_file.is_symlink()
    reason = write_failure(paths, "rank 0 failed", host="algo-1", kind="failed", exit_code=1)
    assert reason == "rank 0 failed"  # a link is not the script's own reason: never followed
    assert not (paths.output_dir / contract.FAILURE_DETAILS_FILE).is_symlink()
    _untouched(outside)


BOUNDED = """
import resource, sys
from smlaunch import contract
from smlaunch.runtime.report import write_failure

resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # the whole file would not fit
paths = contract.Paths(sys.argv[1])
reason = write_failure(paths, "rank 0 failed", host="algo-1", kind="failed", exit_code=1)
print(len(reason), reason.startswith("my own reason"))
"""


@pytest.mark.timeout(60)
def test_a_huge_failure_file_is_read_bounded(tmp_path: Path) -> None:
    paths = contract.Paths(tmp_path / "host")
    paths.output_dir.mkdir(parents=True)
    with open(paths.failure_file, "wb") as handle:  # sparse: 4 GiB that take no room
        handle.write(b"my own reason\n")
        handle.truncate(4 << 30)
    ran = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(paths.base)], capture_output=True, text=True, timeout=50
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(OWN_FAILURE_MAX_BYTES), "True"], ran.stdout


@pytest.mark.timeout(60)
def test_write_file_replaces_what_a_rank_left_and_follows_no_link(tmp_path: Path, outside: Path) -> None:
    """The writer behind ``success``, ``failure.json`` and the watchdog's stacks file."""
    data = tmp_path / "output" / "data"
    data.mkdir(parents=True)
    (data / "smlaunch-stacks-algo-1.txt").symlink_to(outside / "failure")
    os.mkfifo(data / "pipe")  # opening it to write would block until a reader came
    write_file(data, "smlaunch-stacks-algo-1.txt", b"stacks\n")
    write_file(data, "pipe", b"x")
    assert (data / "smlaunch-stacks-algo-1.txt").read_bytes() == b"stacks\n"
    assert (data / "pipe").read_bytes() == b"x"
    assert sorted(os.listdir(data)) == ["pipe", "smlaunch-stacks-algo-1.txt"]  # no temporary left
    (data / "new").symlink_to(outside / "absent")
    with pytest.raises(FileExistsError):
        write_file(data, "new", b"x", exclusive=True)
    (tmp_path / "linked").symlink_to(outside)  # the directory itself replaced by a link
    with pytest.raises(OSError) as refused:
        write_file(tmp_path / "linked", "success", b"")
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    _untouched(outside)


@pytest.mark.timeout(60)
def test_the_rank_registry_reads_no_fifo_nor_link(tmp_path: Path) -> None:
    """The ranks write their registrations (``<pid>.json``) where the host's supervisor reads them on
    every poll of the stall watchdog: a FIFO or ``/dev/zero`` there would block or exhaust it."""
    registry = RankRegistry(tmp_path, host="algo-1")
    register(str(registry.dir))  # this process, as a rank registers at start
    os.mkfifo(registry.dir / "1.json")
    (registry.dir / "2.json").symlink_to("/dev/zero")
    (registry.dir / "3.json").symlink_to(registry.dir / f"{os.getpid()}.json")
    assert [info.pid for info in registry.ranks()] == [os.getpid()]
    (registry.dir / "7.fault").symlink_to(tmp_path / "planted")  # a fault for rank pid 7, redirected
    registry.write_fault(7, {"action": "exit"})
    assert not (tmp_path / "planted").exists() and (registry.dir / "7.fault").is_file()
    registry.close()
