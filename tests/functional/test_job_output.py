"""What a person reads while ``fit()`` runs a local job, in order: the SDK's ``Creating training-job``
line, each status line where the job went through it, one line per host before its ranks' output,
the training seconds, and one closing line (``Completed in N s; model: <uri>`` / ``Failed: <reason>``
/ ``Stopped by user``). Each host's whole topology is in ``describe()["HostTopology"]``, and
``LocalSession(verbose=True)`` logs it too."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import LocalSession, PyTorch
from smlaunch.sdk.errors import JobFailedError
from tests.functional._local_helpers import kill_leftover_jobs, wait_for_line

SCRIPT = """
import os, sys, time
print("first line of", os.environ["SM_CURRENT_HOST"], flush=True)
open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w").write("w")
if os.environ.get("EXIT_CODE"):
    sys.exit(int(os.environ["EXIT_CODE"]))
if os.environ.get("RAISE"):
    raise ValueError(os.environ["RAISE"])
if os.environ.get("SLEEP"):
    print("sleeping", flush=True)
    time.sleep(float(os.environ["SLEEP"]))
"""

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _estimator(tmp_path: Path, hosts: int = 1, verbose: bool = False, **environment: str) -> PyTorch:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(SCRIPT)
    return PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::000000000000:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=hosts,
        framework_version="2.1.0",
        py_version="py310",
        environment=environment,
        sagemaker_session=LocalSession(tmp_path / "jobs", verbose=verbose),
    )


def _statuses(lines: list[str]) -> list[tuple[int, str]]:
    """(index, status) of each status line, SageMaker's ``<date> <time> <Status> - <message>``."""
    found = [(i, re.match(r"\[smlaunch\] \S+ \S+ (\w+) - ", line)) for i, line in enumerate(lines)]
    return [(i, match.group(1)) for i, match in found if match]


def _host_lines(lines: list[str], host: str) -> list[str]:
    """The lines a host's runtime wrote itself (not its ranks')."""
    return [line for line in lines if line.startswith(f"[{host}] ")]


def test_a_two_host_job_reads_in_order_with_one_line_per_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    estimator = _estimator(tmp_path, hosts=2)
    estimator.fit(job_name="in-order")
    lines = capsys.readouterr().out.splitlines()

    assert lines[0] == "Creating training-job with name: in-order"
    statuses = _statuses(lines)
    assert [s for _, s in statuses] == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    training, uploading = statuses[2][0], statuses[3][0]
    hosts = [i for i, line in enumerate(lines) if line.startswith("[algo-")]
    assert hosts and training < min(hosts) and max(hosts) < uploading  # every host line while training
    for number, host in enumerate(("algo-1", "algo-2"), 1):
        # One line before the ranks' output, one at the end, and no path of this machine.
        assert _host_lines(lines, host) == [
            f"[{host}] launcher: process, train.py on host {number} of 2",
            f"[{host}] training succeeded",
        ]
        assert lines.index(f"[{host}/rank 0] first line of {host}") > lines.index(_host_lines(lines, host)[0])
    model = f"{(tmp_path / 'jobs').as_uri()}/in-order/output/model.tar.gz"
    assert estimator.model_data == model
    job = estimator.latest_training_job
    assert job is not None
    seconds = job.describe()["TrainingTimeInSeconds"]
    assert lines[-2] == f"[smlaunch] Training seconds: {2 * seconds}"  # the SDK's line: per host, summed
    assert re.fullmatch(rf"\[smlaunch\] Completed in \d+ s; model: {re.escape(model)}", lines[-1]), lines[-1]
    assert sum("model.tar.gz" in line for line in lines) == 1  # said once, at the end
    # The whole topology is in describe() instead: each host's launch plan.
    plans = job.describe()["HostTopology"]
    assert sorted(plans) == ["algo-1", "algo-2"]
    assert (
        plans["algo-2"]["launcher"] == "process" and plans["algo-2"]["summary"] == "train.py on host 2 of 2"
    )
    assert plans["algo-2"]["topology"]["hosts"] == "algo-1, algo-2"
    assert [p["label"] for p in plans["algo-2"]["processes"]] == ["rank 0"]
    assert plans["algo-2"]["processes"][0]["argv"][1:] == ["train.py"]
    assert not [line for line in lines if " ended " in line]


def test_a_failed_job_ends_with_its_reason_and_names_no_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(JobFailedError):
        _estimator(tmp_path, EXIT_CODE="3").fit(job_name="fails")
    lines = capsys.readouterr().out.splitlines()
    assert [s for _, s in _statuses(lines)][-1] == "Failed"
    assert _statuses(lines)[-1][0] == len(lines) - 2
    assert lines[-1] == "[smlaunch] Failed: AlgorithmError: rank 0 on host algo-1 exited with code 3"
    assert _host_lines(lines, "algo-1")[-1] == "[algo-1] training failed: exit code 3"
    assert not [line for line in lines if "model.tar.gz" in line or "Training seconds" in line]


def test_a_failed_job_closes_with_its_exception_and_shows_the_traceback_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(JobFailedError) as raised:
        _estimator(tmp_path, RAISE="the loss went to nan").fit(job_name="raises")
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "[smlaunch] Failed: ValueError: the loss went to nan"
        " (AlgorithmError: rank 0 on host algo-1 exited with code 1)"
    )
    # The rank's own lines show the traceback; the closing line does not repeat it...
    assert sum("Traceback (most recent call last)" in line for line in lines) == 1
    # A lone host with a lone rank has no other process or host to end: nothing says it does.
    assert not [line for line in lines if "ending the other" in line or "ending every host" in line], lines
    # ...and the exception (as the SDK's) and describe() keep the whole reason.
    assert "Traceback (most recent call last)" in str(raised.value)


def test_a_stopped_job_says_its_hosts_were_stopped(tmp_path: Path) -> None:
    estimator = _estimator(tmp_path, hosts=2, SLEEP="300")
    estimator.fit(job_name="stopped", wait=False)
    job = estimator.latest_training_job
    assert job is not None
    for host in ("algo-1", "algo-2"):
        wait_for_line(job.backend, "stopped", f"[{host}/rank 0] sleeping")
    job.stop()
    out = io.StringIO()
    job.wait(out=out)
    lines = out.getvalue().splitlines()

    statuses = [s for _, s in _statuses(lines)]
    assert statuses[-4:] == ["Training", "Stopping", "Uploading", "Stopped"]
    for host in ("algo-1", "algo-2"):
        assert _host_lines(lines, host)[-1] == f"[{host}] stopped by SIGTERM"
    assert not [line for line in lines if "training failed" in line or "model.tar.gz" in line]
    assert lines[-1] == "[smlaunch] Stopped by user"
    assert _statuses(lines)[-1][0] == len(lines) - 2


def test_verbose_hosts_log_their_whole_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _estimator(tmp_path, hosts=2, verbose=True).fit(job_name="verbose")
    lines = capsys.readouterr().out.splitlines()
    for host in ("algo-1", "algo-2"):
        said = _host_lines(lines, host)
        assert said[0].startswith(f"[{host}] code from file://") and said[1] == f"[{host}] launcher: process"
        assert f"[{host}]   hosts: algo-1, algo-2" in said and f"[{host}]   current host: {host}" in said
        assert said[-1] == f"[{host}] training succeeded"
