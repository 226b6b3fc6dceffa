"""``smlaunch`` on real local jobs, through subprocesses as a user types it: run, list, describe, logs
(-f on a running job), stop, metrics (table, JSON, PNG), rm and gc. One finished two-host job serves
the read-only checks; the running job and the failing job are their own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs

SCRIPT = """\
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--fail", type=str, default="false")
parser.add_argument("--forever", type=str, default="false")
parser.add_argument("--model_version")
args, _ = parser.parse_known_args()
if args.model_version is not None:
    print(f"model_version={args.model_version}", flush=True)
host = os.environ["SM_CURRENT_HOST"]
index = int(host.split("-")[1])
for step in range(args.steps):
    print(f"step {step} loss={1.0 / (step + index):.6f}", flush=True)
    if host == "algo-1":
        print(f"step {step} accuracy={step / 10:.2f}", flush=True)
if args.fail.lower() == "true":  # --hp fail=true arrives as "True", as SageMaker's toolkit passes it
    sys.exit(3)
while args.forever.lower() == "true":
    print("tick", flush=True)
    time.sleep(0.2)
"""
METRICS = ["--metric", "train:loss=loss=([0-9.]+)", "--metric", "accuracy=accuracy=([0-9.]+)"]
STEPS = 4


def expected_values() -> dict[tuple[str, str], list[float]]:
    """What the script prints, per (metric, host)."""
    return {
        ("train:loss", "algo-1"): [round(1.0 / (s + 1), 6) for s in range(STEPS)],
        ("train:loss", "algo-2"): [round(1.0 / (s + 2), 6) for s in range(STEPS)],
        ("accuracy", "algo-1"): [s / 10 for s in range(STEPS)],
    }


class Cli:
    """``smlaunch ...`` in a subprocess with its own job store."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.home = home
        self.cwd = cwd
        # This checkout, not whatever is installed: the commands run from the test's directory.
        self.env = dict(
            os.environ, SMLAUNCH_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2])
        )

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "smlaunch.sdk.cli.main", *args]

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("cli")
    (base / "src").mkdir()
    (base / "src" / "train.py").write_text(SCRIPT)
    runner = Cli(base / "home", base)
    yield runner
    kill_leftover_jobs(base / "home" / "jobs")


@pytest.fixture(scope="module")
def done(cli: Cli) -> tuple[str, subprocess.CompletedProcess[str]]:
    """A finished two-host job with metrics, run by ``smlaunch run``."""
    result = cli(
        "run",
        "train.py",
        "--source-dir",
        "src",
        "--instance-count",
        "2",
        "--hp",
        f"steps={STEPS}",
        *METRICS,
        "--job-name",
        "cli-done",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return "cli-done", result


def test_run_list_describe_logs(cli: Cli, done: tuple[str, subprocess.CompletedProcess[str]]) -> None:
    name, run = done
    assert run.stdout == "cli-done\n"  # the data: the job's name; its progress and logs on stderr
    assert "Creating training-job with name: cli-done" in run.stderr
    assert "[algo-2/rank 0] step 3 loss=0.200000" in run.stderr
    statuses = [
        line.split(" ", 3)[3].split(" - ")[0]
        for line in run.stderr.splitlines()
        if line.startswith("[smlaunch] 20")
    ]  # each transition as it happened, SageMaker's words
    assert statuses == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    model = f"{(cli.home / 'jobs' / name).as_uri()}/output/model.tar.gz"
    *_, seconds, closing = run.stderr.splitlines()
    assert seconds.startswith("[smlaunch] Training seconds: ")
    assert re.fullmatch(rf"\[smlaunch\] Completed in \d+ s; model: {re.escape(model)}", closing), closing

    listed = cli("list")
    assert listed.returncode == 0
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "INSTANCE", "STARTED", "DURATION"]
    assert rows[0].split()[:5] == ["cli-done", "Completed", "local", "x", "2"]
    as_json = json.loads(cli("list", "--output", "json", "--status", "Completed").stdout)
    assert [row["TrainingJobName"] for row in as_json["TrainingJobSummaries"]] == ["cli-done"]

    described = json.loads(cli("describe", name).stdout)
    assert described["TrainingJobStatus"] == "Completed"
    final = {m["MetricName"]: m["Value"] for m in described["FinalMetricDataList"]}
    expected = expected_values()
    assert final["accuracy"] == expected[("accuracy", "algo-1")][-1]
    last_losses = (expected[("train:loss", "algo-1")][-1], expected[("train:loss", "algo-2")][-1])
    assert final["train:loss"] in last_losses

    host2 = cli("logs", name, "--host", "algo-2").stdout.splitlines()
    assert host2 and all(line.startswith(("[algo-2]", "[algo-2/")) for line in host2)
    assert "[algo-2/rank 0] step 0 loss=0.500000" in host2
    rank0 = cli("logs", name, "--host", "algo-1", "--rank", "0").stdout.splitlines()
    assert [line for line in rank0 if "accuracy=" in line] == [
        f"[algo-1/rank 0] step {s} accuracy={s / 10:.2f}" for s in range(STEPS)
    ]


def test_logs_refuses_a_host_or_rank_the_job_lacks(
    cli: Cli, done: tuple[str, subprocess.CompletedProcess[str]]
) -> None:
    name, _ = done
    # Silence would read as "that host printed nothing": exit 2, naming what the job has.
    host = cli("logs", name, "--host", "algo-9")
    assert (host.returncode, host.stdout) == (2, "")
    assert host.stderr == (
        f"error: --host='algo-9': {name} has no such host (its hosts: algo-1, algo-2)."
        " Fix: pass e.g. --host algo-2\n"
    )
    rank = cli("logs", name, "--host", "algo-2", "--rank", "7")
    assert (rank.returncode, rank.stdout) == (2, "")
    assert rank.stderr == (
        f"error: --rank=7: {name} has no rank 7 on algo-2 (its ranks on algo-2: 0). Fix: pass --rank 0\n"
    )


def test_metrics_table_json_and_plot(
    cli: Cli, done: tuple[str, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    pandas = pytest.importorskip("pandas")
    image = pytest.importorskip("matplotlib.image")
    name, _ = done
    plot = tmp_path / "metrics.png"
    result = cli("metrics", name, "--output", "json", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert f"wrote {plot}" in result.stderr
    found: dict[tuple[str, str], list[float]] = {}
    for record in records:
        found.setdefault((record["metric_name"], record["host"]), []).append(record["value"])
    assert found == expected_values()  # every value the script printed, per host, in order
    loss_times = [r["timestamp"] for r in records if r["metric_name"] == "train:loss"]
    assert loss_times[0] == 0 and loss_times == sorted(loss_times)

    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = image.imread(plot).shape
    assert width > 300 and height > 300

    from smlaunch import LocalSession, TrainingJobAnalytics

    analytics = TrainingJobAnalytics(name, sagemaker_session=LocalSession(root=cli.home / "jobs"))
    frame = analytics.dataframe()
    assert list(frame.columns) == ["timestamp", "metric_name", "value", "host"]
    assert list(frame["metric_name"].unique()) == ["train:loss", "accuracy"]
    pandas.testing.assert_frame_equal(frame, pandas.DataFrame.from_records(records))
    figure = analytics.plot()
    assert [ax.get_title() for ax in figure.axes] == ["train:loss", "accuracy"]
    assert [len(ax.get_lines()) for ax in figure.axes] == [2, 1]  # loss differs between the hosts

    table = cli("metrics", name, "--metric", "accuracy").stdout.splitlines()
    assert table[0].split() == ["timestamp", "metric_name", "value", "host"]
    assert len(table) == 1 + STEPS


def test_failed_run_exits_1_and_usage_errors_exit_2(cli: Cli) -> None:
    failed = cli("run", "train.py", "--source-dir", "src", "--hp", "fail=true", "--job-name", "cli-failed")
    assert failed.returncode == 1, failed.stdout[-2000:]
    assert "Error for Training job cli-failed: Failed. Reason: " in failed.stderr
    assert "rank 0 on host algo-1 exited with code 3" in failed.stderr
    assert failed.stderr.endswith(  # one line, not the FailureReason's stderr tail again
        "error: Error for Training job cli-failed: Failed."
        " Reason: AlgorithmError: rank 0 on host algo-1 exited with code 3.\n"
    )
    assert " Failed - Training job failed" in failed.stderr
    assert failed.stdout == "cli-failed\n"  # `smlaunch logs "$JOB"` can follow
    # A job without metric definitions: an ended job has no values "yet"; a plot names the cause.
    metrics = cli("metrics", "cli-failed")
    assert (metrics.returncode, metrics.stdout) == (0, "")
    assert metrics.stderr == (
        "no metric values for cli-failed"
        " (it defines no metrics; smlaunch run --metric NAME=REGEX defines them)\n"
    )
    plot = cli("metrics", "cli-failed", "--plot", "m.png")
    assert plot.returncode == 2 and plot.stderr.startswith(
        "error: --plot='m.png': cli-failed defines no metrics, so there is nothing to plot. Fix: "
    )
    stopped = cli(
        "run",
        "train.py",
        "--source-dir",
        "src",
        "--hp",
        "forever=true",
        "--max-run",
        "1",
        "--job-name",
        "cli-stopped",
    )
    assert stopped.returncode == 1, stopped.stdout[-2000:]
    assert "Error for Training job cli-stopped: Stopped. Reason: MaxRuntimeExceeded" in stopped.stderr
    for args in (
        ["describe", "no-such-job"],
        ["run", "train.py", "--hp", "novalue"],
        ["gc", "--older-than", "soon"],
        ["rm", "no-such-job"],
        ["logs"],
        ["describe", "sagemaker:x", "--slurm", str(cli.cwd)],
        ["run", "train.py", "--region", "us-west-2"],
        ["list", "--query", "TrainingJobSummaries[?"],
    ):
        result = cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.startswith("error: ") and result.stdout == "", args


@pytest.mark.slow
def test_follow_stop_rm_and_gc_of_a_running_job(cli: Cli) -> None:
    cli = Cli(cli.home.with_name("home-running"), cli.cwd)  # gc below must not see the other tests' jobs
    started = cli(
        "run",
        "train.py",
        "--source-dir",
        "src",
        "--hp",
        "forever=true",
        "--no-wait",
        "--job-name",
        "cli-running",
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout == "cli-running\n"
    follower = cli.popen("logs", "cli-running", "-f")
    try:
        assert follower.stdout is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = follower.stdout.readline()
            seen.append(line)
            if "tick" in line:
                break
        assert any("tick" in line for line in seen), seen

        refused = cli("rm", "cli-running")
        assert refused.returncode == 2 and "still running" in refused.stderr
        kept = cli("gc", "--older-than", "0s")
        assert kept.returncode == 0 and "kept 1 running" in kept.stdout
        assert (cli.home / "jobs" / "cli-running").is_dir()

        stopped = cli("stop", "cli-running")
        assert stopped.returncode == 0 and "Stopping cli-running" in stopped.stderr
        follower.communicate(timeout=150)  # -f ends once the job has ended
        assert follower.returncode == 0
    finally:
        if follower.poll() is None:
            follower.kill()
    assert json.loads(cli("describe", "cli-running").stdout)["TrainingJobStatus"] == "Stopped"
    assert_no_job_processes("cli-running", cli.home / "jobs" / "cli-running")
    assert cli("stop", "cli-running").stderr.strip() == "cli-running already ended Stopped"

    assert cli("rm", "--last").returncode == 0  # the newest (and only) job of this store
    assert not (cli.home / "jobs" / "cli-running").exists()
    dry = cli("gc", "--older-than", "0s", "--dry-run")
    assert "would remove" in dry.stdout and (cli.home / "jobs").iterdir()
    removed = cli("gc", "--older-than", "0s")
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert [p.name for p in (cli.home / "jobs").iterdir()] == [".requirements"]  # the cache stays


def _check_shape(value: object, shape: object, where: str) -> None:
    """``value`` as the AWS CLI prints a value of botocore ``shape`` (timestamps as ISO 8601 text)."""
    from datetime import datetime

    kind = shape.type_name  # type: ignore[attr-defined]
    if kind == "structure":
        assert isinstance(value, dict), where
        members = shape.members  # type: ignore[attr-defined]
        assert set(value) <= set(members), (where, set(value) - set(members))
        assert set(shape.required_members) <= set(value), where  # type: ignore[attr-defined]
        for key, item in value.items():
            _check_shape(item, members[key], f"{where}.{key}")
    elif kind == "list":
        assert isinstance(value, list), where
        for index, item in enumerate(value):
            _check_shape(item, shape.member, f"{where}[{index}]")  # type: ignore[attr-defined]
    elif kind == "timestamp":
        assert isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None, where
    elif kind == "string":
        assert isinstance(value, str), where
        if shape.enum:  # type: ignore[attr-defined]
            assert value in shape.enum, where  # type: ignore[attr-defined]
        pattern = shape.metadata.get("pattern")  # type: ignore[attr-defined]
        if pattern:
            import re

            assert re.fullmatch(pattern, value), (where, value, pattern)
    else:
        raise AssertionError(f"{where}: unexpected shape {kind}")


def test_list_json_is_list_training_jobs(
    cli: Cli, done: tuple[str, subprocess.CompletedProcess[str]]
) -> None:
    """``list --output json`` is ListTrainingJobs' response: checked member by member against
    botocore's SageMaker service model."""
    import botocore.session

    from smlaunch.sdk.cli.output import SUMMARY_FIELDS

    model = botocore.session.get_session().get_service_model("sagemaker")
    response = model.operation_model("ListTrainingJobs").output_shape
    assert list(SUMMARY_FIELDS) == list(response.members["TrainingJobSummaries"].member.members)
    listed = cli("list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    _check_shape(data, response, "ListTrainingJobsResponse")
    (done_summary,) = [s for s in data["TrainingJobSummaries"] if s["TrainingJobName"] == done[0]]
    described = json.loads(cli("describe", done[0]).stdout)
    assert done_summary == {k: described[k] for k in SUMMARY_FIELDS if k in described}


def test_scripting_conventions(cli: Cli, done: tuple[str, subprocess.CompletedProcess[str]]) -> None:
    """``JOB=$(smlaunch run --no-wait ...)`` holds the name; --last, references, --query, --output
    text; --hp values arrive as typed; an unknown metric exits 2 naming the job's metrics."""
    command = " ".join(f"'{part}'" for part in cli.command())
    script = (
        f"JOB=$({command} run train.py --source-dir src --no-wait --hp steps=1 --hp model_version=1.10"
        f" --base-job-name cli-script) && printf '%s' \"$JOB\""
    )
    started = subprocess.run(
        ["bash", "-c", script], cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=120
    )
    assert started.returncode == 0, started.stderr
    name = started.stdout
    assert name.startswith("cli-script-") and "\n" not in name and " " not in name
    assert f"Creating training-job with name: {name}" in started.stderr

    assert cli("logs", "--last", "-f").returncode == 0  # the newest job: the one just started
    logs = cli("logs", f"local:{name}")
    assert "[algo-1/rank 0] model_version=1.10" in logs.stdout.splitlines()  # not 1.1
    described = json.loads(cli("describe", "--last").stdout)
    assert described["TrainingJobName"] == name and described["TrainingJobStatus"] == "Completed"
    assert described["HyperParameters"]["model_version"] == '"1.10"'
    store = cli(
        "describe", f"local:{cli.home / 'jobs'}:{name}", "--query", "TrainingJobName", "--output", "text"
    )
    assert store.stdout == f"{name}\n"

    completed = cli(
        "list",
        "--query",
        "TrainingJobSummaries[?TrainingJobStatus=='Completed'].TrainingJobName",
        "--output",
        "text",
    )
    assert completed.returncode == 0, completed.stderr
    assert set(completed.stdout.split()) >= {name, done[0]}
    metric = cli("describe", done[0], "--query", "FinalMetricDataList[?MetricName=='accuracy'].Value | [0]")
    assert json.loads(metric.stdout) == expected_values()[("accuracy", "algo-1")][-1]

    unknown = cli("metrics", done[0], "--metric", "nope")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert (
        "--metric='nope': cli-done defines no such metric (its metrics: train:loss, accuracy)"
        in unknown.stderr
    )
