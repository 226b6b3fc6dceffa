"""The Slurm backend on the real two-node test cluster (``conftest.py``): SlurmSession end to end.

Covered: the quickstart example, 2 nodes x 2 ranks with torch_distributed, trains to a correct
``model.tar.gz`` with one ``srun`` step per node; smddp all-reduces across the nodes; the smp
model-parallel example pipelines across them and its model loads in one process; literal
``/opt/ml`` paths are each host's own tree on its node; a crash on one rank fails the job naming
the host and rank, and ends the other node's ranks; ``smlaunch stop --slurm`` reaches the script
with SIGTERM on both nodes and ends Stopped (``smlaunch list --slurm`` shows it); ``max_run`` ends
Stopped/MaxRuntimeExceeded; a job waiting behind another says "Pending in queue" and can be
stopped there; another process attaches to a running job; a managed-spot job that Slurm requeues
(``scontrol requeue``, as a preemption arrives) goes on as a second attempt from its checkpoint.
After every test no process of the job is left on either node and Slurm runs nothing of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.sdk.cli import main as cli
from smlaunch.sdk.request.spec import CheckpointConfig, StoppingCondition
from smlaunch.sdk.sessions.slurm import SlurmSession
from tests.functional._local_helpers import job_request, make_spec, wait_for_line, wait_terminal
from tests.slurm._cluster import Cluster
from tests.slurm.conftest import JOB_TIMEOUT, squeue

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]


@pytest.mark.slow
def test_quickstart_two_nodes_two_ranks_trains_a_model(
    session: SlurmSession, capfd: pytest.CaptureFixture[str]
) -> None:
    from smlaunch import PyTorch

    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(REPO / "examples" / "quickstart"),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        instance_type="ml.c5.xlarge",
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
        distribution={"torch_distributed": {"enabled": True}},
        base_job_name="slurm-quickstart",
        hyperparameters={"epochs": 30, "batch-size": 32, "lr": 3e-3},
    )
    estimator.fit()  # waits, streaming every host's lines as they come
    streamed = capfd.readouterr().out
    assert "[algo-1/rank 0]" in streamed and "[algo-2] " in streamed, streamed[-3000:]
    job = estimator.latest_training_job.name
    described = estimator.latest_training_job.describe()
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        assert "model.pt" in archive.getnames()
    output = model.with_name("output.tar.gz")
    with tarfile.open(output) as archive:
        handle = archive.extractfile("metrics.json")
        assert handle is not None
        metrics = json.loads(handle.read())
    assert metrics["world_size"] == 4 and metrics["test_accuracy"] >= 0.95, metrics
    log = (session.root / job / "logs" / "job.log").read_text()
    assert "algo-1=node1(127.0.0.1), algo-2=node2(127.0.0.1)" in log, log[:3000]
    slurm = json.loads((session.root / job / "slurm.json").read_text())
    assert "--nodes=2" in slurm["sbatch"] and "--ntasks-per-node=1" in slurm["sbatch"]
    resources = json.loads(
        (session.root / job / "hosts" / "algo-2" / "input" / "config" / "resourceconfig.json").read_text()
    )
    assert resources["current_host"] == "algo-2" and resources["hosts"] == ["algo-1", "algo-2"]


LITERAL_SCRIPT = """
import json, os
config = json.load(open("/opt/ml/input/config/resourceconfig.json"))
with open(f"/opt/ml/model/{config['current_host']}.txt", "w") as handle:
    handle.write(os.environ["SLURMD_NODENAME"])
"""


def test_literal_opt_ml_paths_are_each_hosts_own_tree_on_its_node(
    session: SlurmSession, tmp_path: Path
) -> None:
    backend = session.backend()
    name = f"slurm-literal-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, name, LITERAL_SCRIPT)))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        files = [m for m in archive.getmembers() if m.isfile()]
        written = {m.name: archive.extractfile(m).read().decode() for m in files}  # type: ignore[union-attr]
    assert written == {"algo-1.txt": "node1", "algo-2.txt": "node2"}, written


SMDDP_SCRIPT = """
import json, os
import smdistributed.dataparallel.torch.distributed as dist
import torch
dist.init_process_group()
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
if dist.get_local_rank() == 0:
    result = {"world": dist.get_world_size(), "sum": total.item(), "node": os.environ["SLURMD_NODENAME"]}
    with open(os.path.join(os.environ["SM_MODEL_DIR"], os.environ["SM_CURRENT_HOST"] + ".json"), "w") as out:
        json.dump(result, out)
"""


@pytest.mark.slow
def test_smddp_all_reduce_across_the_two_nodes(session: SlurmSession, tmp_path: Path) -> None:
    backend = session.backend()
    name = f"slurm-smddp-{os.getpid()}"
    spec = make_spec(tmp_path, name, SMDDP_SCRIPT, instance_type="ml.p3.16xlarge")
    assert spec.HyperParameters is not None
    spec.HyperParameters.update(
        {
            contract.HP_SMDDP_ENABLED: "true",
            contract.HP_INSTANCE_TYPE: json.dumps("ml.p3.16xlarge"),
            contract.HP_SMDDP_CUSTOM_MPI_OPTIONS: json.dumps(""),
        }
    )
    backend.submit(job_request(spec))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        files = {m.name: archive.extractfile(m) for m in archive.getmembers() if m.isfile()}
        results = {n: json.loads(f.read()) for n, f in files.items() if f is not None}
    assert results == {
        "algo-1.json": {"world": 4, "sum": 6.0, "node": "node1"},
        "algo-2.json": {"world": 4, "sum": 6.0, "node": "node2"},
    }, results


@pytest.mark.slow
def test_smp_model_parallel_example_pipelines_across_the_two_nodes(
    session: SlurmSession, capfd: pytest.CaptureFixture[str]
) -> None:
    """The model-parallel example's notebook cell with the session swapped: 2 nodes x 2 ranks, 2
    pipeline partitions spread over the nodes (ranks 0+2, 1+3); the model loads in one process."""
    from smlaunch import PyTorch

    example = REPO / "examples" / "model_parallel"
    sys.path.insert(0, str(example))
    try:
        from load_check import check  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(example))
    estimator = PyTorch(
        entry_point="train_smp.py",
        source_dir=str(example),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        instance_type="ml.c5.xlarge",
        framework_version="2.0.0",
        py_version="py310",
        sagemaker_session=session,
        distribution={
            "smdistributed": {
                "modelparallel": {
                    "enabled": True,
                    "parameters": {
                        "partitions": 2,
                        "microbatches": 4,
                        "pipeline": "interleaved",
                        "placement_strategy": "spread",
                        "ddp": True,
                    },
                }
            },
            "mpi": {"enabled": True, "processes_per_host": 2},
        },
        base_job_name="slurm-smp",
        hyperparameters={"epochs": 1, "batch-size": 32, "lr": 3e-3},
    )
    estimator.fit()
    streamed = capfd.readouterr().out
    assert "smp: world=4 pp=2 dp=2 microbatches=4" in streamed, streamed[-3000:]
    assert "[algo-2] launcher: smp" in streamed, streamed[-3000:]
    described = estimator.latest_training_job.describe()
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, described.get("FailureReason")
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    unpacked = model.parent / "unpacked"
    with tarfile.open(model) as archive:
        archive.extractall(unpacked, filter="data")
    assert check(unpacked) > 0.1  # same predictions as in training, in one plain process


CRASH_SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} on {os.environ['SLURMD_NODENAME']} as {os.environ['SM_CURRENT_HOST']}", flush=True)
if rank == 3:
    time.sleep(1)
    sys.exit("rank 3 crashes now")
time.sleep(600)
"""


@pytest.mark.slow
def test_a_crash_on_one_rank_fails_the_job_naming_host_and_rank(
    session: SlurmSession, tmp_path: Path
) -> None:
    backend = session.backend()
    name = f"slurm-crash-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, name, CRASH_SCRIPT, ddp=True)))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = described["FailureReason"]
    assert "algo-2" in reason and "rank 3" in reason and "crashes now" in reason, reason
    log = "\n".join(backend.log_lines(name))
    assert "rank 3 on node2 as algo-2" in log and "rank 0 on node1 as algo-1" in log, log[-3000:]


STOP_SCRIPT = """
import os, signal, sys, time
def on_term(signum, frame):
    print(f"got SIGTERM on {os.environ['SM_CURRENT_HOST']}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(f"{os.environ['SM_CURRENT_HOST']} ready", flush=True)
time.sleep(600)
"""


def test_stop_from_the_cli_reaches_the_script_on_both_nodes(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = session.backend()
    name = f"slurm-stop-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, name, STOP_SCRIPT)))
    wait_for_line(backend, name, "algo-1 ready", timeout=JOB_TIMEOUT)
    wait_for_line(backend, name, "algo-2 ready", timeout=JOB_TIMEOUT)
    assert squeue(slurm_cluster, name) == "RUNNING"
    assert cli.main(["stop", f"slurm:{session.shared_dir}:{name}"]) == 0  # as from a terminal
    described = wait_terminal(backend, name, timeout=120)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED, described.get("FailureReason")
    log = "\n".join(backend.log_lines(name))
    assert "got SIGTERM on algo-1" in log and "got SIGTERM on algo-2" in log, log[-3000:]
    capsys.readouterr()
    assert cli.main(["list", "--slurm", str(session.shared_dir), "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["TrainingJobSummaries"]
    assert [(r["TrainingJobName"], r["TrainingJobStatus"]) for r in rows] == [(name, contract.STATUS_STOPPED)]


@pytest.mark.slow
def test_max_run_stops_the_job_as_sagemaker_reports_it(session: SlurmSession, tmp_path: Path) -> None:
    backend = session.backend()
    name = f"slurm-maxrun-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, name, STOP_SCRIPT, max_run=4)))
    described = wait_terminal(backend, name, timeout=JOB_TIMEOUT)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert described["SecondaryStatus"] == contract.SECONDARY_MAX_RUNTIME_EXCEEDED
    assert described["FailureReason"].startswith("MaxRuntimeExceeded:")


def test_a_job_waiting_behind_another_says_so_and_attach_sees_it(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster
) -> None:
    backend = session.backend()
    first, second = f"slurm-first-{os.getpid()}", f"slurm-second-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, first, STOP_SCRIPT)))
    wait_for_line(backend, first, "algo-2 ready", timeout=JOB_TIMEOUT)
    backend.submit(job_request(make_spec(tmp_path, second, STOP_SCRIPT)))
    deadline = time.monotonic() + 30
    message = ""
    while time.monotonic() < deadline:
        described = backend.describe(second)
        message = described["SecondaryStatusTransitions"][-1]["StatusMessage"]
        if message.startswith("Pending in queue: Resources"):
            break
        time.sleep(0.5)
    assert described["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS
    assert described["SecondaryStatus"] == contract.SECONDARY_STARTING
    assert message == "Pending in queue: Resources", message
    attached = _attach_from_another_process(session, first)
    assert attached["status"] == contract.STATUS_IN_PROGRESS and attached["secondary"] == "Training", attached
    backend.stop(second)  # still queued: cancelled, never started
    described = wait_terminal(backend, second, timeout=60)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED
    assert "TrainingStartTime" not in described
    backend.stop(first)
    assert wait_terminal(backend, first, timeout=120)["TrainingJobStatus"] == contract.STATUS_STOPPED


def _attach_from_another_process(session: SlurmSession, name: str) -> dict[str, Any]:
    code = (
        "import json, sys\n"
        "from smlaunch import Estimator, SlurmSession\n"
        "est = Estimator.attach(sys.argv[2], sagemaker_session=SlurmSession(shared_dir=sys.argv[1]), "
        "wait=False)\n"
        "d = est.latest_training_job.describe()\n"
        "print(json.dumps({'status': d['TrainingJobStatus'], 'secondary': d['SecondaryStatus']}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(session.shared_dir), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


SPOT_SCRIPT = """
import argparse, json, os, signal, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=24)
args = parser.parse_args()
host = os.environ["SM_CURRENT_HOST"]
checkpoint = "/opt/ml/checkpoints/step.json"
def on_term(signum, frame):
    print(f"{host} got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
start = json.load(open(checkpoint))["step"] + 1 if os.path.exists(checkpoint) else 0
print(f"{host} resuming at step {start}", flush=True)
for step in range(start, args.steps):
    time.sleep(0.5)
    if host == "algo-1":
        with open(checkpoint + ".tmp", "w") as out:
            json.dump({"step": step}, out)
        os.replace(checkpoint + ".tmp", checkpoint)
    print(f"{host} step {step}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w") as out:
    json.dump({"start": start, "node": os.environ["SLURMD_NODENAME"]}, out)
"""


@pytest.mark.slow
def test_a_requeued_spot_job_resumes_from_its_checkpoint_as_a_second_attempt(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster
) -> None:
    backend = session.backend()
    name = f"slurm-spot-{os.getpid()}"
    spec = make_spec(tmp_path, name, SPOT_SCRIPT, hyperparameters={"steps": 24}).model_copy(
        update={
            "EnableManagedSpotTraining": True,
            "StoppingCondition": StoppingCondition(MaxRuntimeInSeconds=300, MaxWaitTimeInSeconds=600),
            "CheckpointConfig": CheckpointConfig(S3Uri=(tmp_path / "checkpoints").as_uri()),
        }
    )
    backend.submit(job_request(spec))
    wait_for_line(backend, name, "algo-1 step 4", timeout=JOB_TIMEOUT)
    job_id = json.loads((session.root / name / "slurm.json").read_text())["job_id"]
    requeue = slurm_cluster.run("scontrol", "requeue", job_id)  # how Slurm delivers a preemption
    assert requeue.returncode == 0, requeue.stderr
    statuses = set()
    deadline = time.monotonic() + JOB_TIMEOUT
    while True:  # the job is never seen Stopped (nor Failed) between the attempts
        described = backend.describe(name)
        statuses.add((described["TrainingJobStatus"], described["SecondaryStatus"]))
        if described["TrainingJobStatus"] in contract.TERMINAL_STATUSES or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    log = "\n".join(backend.log_lines(name))
    assert described["TrainingJobStatus"] == contract.STATUS_COMPLETED, (
        described.get("FailureReason"),
        log[-4000:],
    )
    seen = {status for status, _ in statuses}
    assert seen == {contract.STATUS_IN_PROGRESS, contract.STATUS_COMPLETED}, statuses
    assert (contract.STATUS_IN_PROGRESS, contract.SECONDARY_INTERRUPTED) in statuses, statuses
    attempts = described["Attempts"]
    assert [a["Outcome"] for a in attempts] == [contract.SECONDARY_INTERRUPTED, contract.SECONDARY_COMPLETED]
    assert attempts[0]["EndTime"] <= attempts[1]["StartTime"], attempts
    assert 0 < described["BillableTimeInSeconds"] <= described["TrainingTimeInSeconds"], described
    transitions = [t["Status"] for t in described["SecondaryStatusTransitions"]]
    assert contract.SECONDARY_STOPPED not in transitions and contract.SECONDARY_STOPPING not in transitions
    interrupted = transitions.index(contract.SECONDARY_INTERRUPTED)
    assert transitions[interrupted + 1 : interrupted + 4] == [
        contract.SECONDARY_STARTING,
        contract.SECONDARY_DOWNLOADING,
        contract.SECONDARY_TRAINING,
    ], transitions
    assert f"Slurm requeued job {job_id} (SLURM_RESTART_COUNT=1)" in log, log[-4000:]
    # The second attempt resumed after the last checkpoint the first one saved and synced.
    saved = json.loads((tmp_path / "checkpoints" / "step.json").read_text())
    assert saved == {"step": 23}
    first_tree = session.root / name / "hosts-attempt-1" / "algo-1" / "checkpoints" / "step.json"
    resumed_at = json.loads(first_tree.read_text())["step"] + 1
    assert resumed_at >= 5, log[-4000:]
    model = Path(described["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        files = {m.name: archive.extractfile(m) for m in archive.getmembers() if m.isfile()}
        results = {n: json.loads(f.read()) for n, f in files.items() if f is not None}
    assert results == {
        "algo-1.json": {"start": resumed_at, "node": "node1"},
        "algo-2.json": {"start": resumed_at, "node": "node2"},
    }, results
    assert f"algo-1 resuming at step {resumed_at}" in log, log[-4000:]


def test_a_job_stopped_as_soon_as_slurm_runs_it_ends_stopped(
    session: SlurmSession, tmp_path: Path, slurm_cluster: Cluster
) -> None:
    # Before its agent takes SIGTERM over, SIGTERM would kill it: Slurm would say FAILED
    # (JobLaunchFailure). A tuning job stops its trials at any moment, this one included.
    backend = session.backend()
    name = f"slurm-early-stop-{os.getpid()}"
    backend.submit(job_request(make_spec(tmp_path, name, "import time\ntime.sleep(60)\n")))
    deadline = time.monotonic() + JOB_TIMEOUT
    while squeue(slurm_cluster, name) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    backend.stop(name)
    described = wait_terminal(backend, name, timeout=120)
    assert described["TrainingJobStatus"] == contract.STATUS_STOPPED, described.get("FailureReason")
