"""SlurmSession's validation, SlurmClient's parsing of recorded Slurm 22.05 output, and the sbatch
arguments and batch script of a job (no cluster needed; tests/slurm runs a real one)."""

from __future__ import annotations

import json
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from smlaunch import SlurmSession, contract
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.executors.slurm.executor import SlurmExecutor, srun_command
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, SlurmSettings
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.backends.slurm.backend import (
    SLURM_FILE,
    SlurmBackend,
    batch_script,
    gpus_per_node,
    sbatch_arguments,
)
from smlaunch.sdk.backends.slurm.client import Partition, SlurmClient, SlurmCommandError, SlurmJob
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

# Recorded from slurm-wlm 22.05.8 (Debian) on the two-node test cluster.
SQUEUE_PENDING = "2|PENDING|Resources|\n"
SQUEUE_RUNNING = "1|RUNNING|None|node[1-2]\n"
SINFO_PARTITION = "debug|up|(null)|2\n"
SINFO_GPU_PARTITION = "gpu|up|gpu:8|2\ngpu|up|gpu:8(S:0-1)|1\n"
SINFO_ADDRESSES = "node1|127.0.0.1\nnode2|127.0.0.1\n"
SCONTROL_CONFIG = (
    "Configuration data as of 2026-11-24T08:23:07\nAccountingStorageType   = accounting_storage/none\n"
)
SACCT_CONFIG = "AccountingStorageType   = accounting_storage/slurmdbd\n"
UNKNOWN_JOB = "slurm_load_jobs error: Invalid job id specified\n"


class Recorded:
    """A runner replaying recorded outputs by command line prefix, remembering what it ran."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], str | None, Mapping[str, str] | None]] = []

    def __call__(
        self, argv: Sequence[str], stdin: str | None, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), stdin, env))
        line = " ".join(argv)
        for prefix, (code, out, err) in self.answers.items():
            if line.startswith(prefix):
                return subprocess.CompletedProcess(list(argv), code, out, err)
        raise AssertionError(f"unexpected command {line}")


def client(answers: dict[str, tuple[int, str, str]]) -> tuple[SlurmClient, Recorded]:
    """A client whose commands answer from ``answers`` (command line prefix -> code, out, err)."""
    runner = Recorded(answers)
    return SlurmClient(runner=runner), runner


# --- SlurmClient ----------------------------------------------------------------------------------


def test_sbatch_parsable_job_id_with_and_without_cluster() -> None:
    slurm, runner = client({"sbatch": (0, "42\n", "")})
    assert slurm.submit("#!/bin/sh\n", ["--nodes=2"], env={"A": "1"}) == "42"
    argv, stdin, env = runner.calls[0]
    assert argv == ["sbatch", "--parsable", "--nodes=2"] and stdin == "#!/bin/sh\n" and env == {"A": "1"}
    slurm, _ = client({"sbatch": (0, "43;cluster-a\n", "")})
    assert slurm.submit("", []) == "43"


@pytest.mark.parametrize("out", ["", "Submitted batch job 42\n", "42\n43\n"])
def test_sbatch_output_not_understood_is_refused(out: str) -> None:
    slurm, _ = client({"sbatch": (0, out, "")})
    with pytest.raises(SlurmCommandError, match="sbatch --parsable"):
        slurm.submit("", [])


def test_sbatch_refusal_carries_its_stderr() -> None:
    slurm, _ = client({"sbatch": (1, "", "sbatch: error: invalid partition specified: nope\n")})
    with pytest.raises(SlurmCommandError, match="exit code 1: sbatch: error: invalid partition specified"):
        slurm.submit("", ["--partition=nope"])


def test_missing_command_names_it_and_the_fix() -> None:
    def missing(
        argv: Sequence[str], stdin: str | None, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(ConfigurationError, match=r"'squeue' is not installed.*apt-get install slurm-client"):
        SlurmClient(runner=missing).job("1")


def test_job_states_from_squeue() -> None:
    slurm, runner = client({"squeue": (0, SQUEUE_PENDING, "")})
    assert slurm.job("2") == SlurmJob(job_id="2", state="PENDING", reason="Resources", nodes="")
    assert runner.calls[0][0] == ["squeue", "--noheader", "--jobs=2", "--states=all", "--format=%i|%T|%r|%N"]
    slurm, _ = client({"squeue": (0, SQUEUE_RUNNING, "")})
    job = slurm.job("1")
    assert job is not None and job.state == "RUNNING" and job.nodes == "node[1-2]" and not job.terminal


def test_unknown_state_or_malformed_line_is_refused() -> None:
    slurm, _ = client({"squeue": (0, "1|DANCING|None|node1\n", "")})
    with pytest.raises(SlurmCommandError, match="unknown job state 'DANCING'"):
        slurm.job("1")
    slurm, _ = client({"squeue": (0, "1 RUNNING None node1\n", "")})
    with pytest.raises(SlurmCommandError, match=r"expected 4 '\|'-separated fields"):
        slurm.job("1")


def test_forgotten_job_without_accounting_is_none() -> None:
    slurm, runner = client({"squeue": (1, "", UNKNOWN_JOB), "scontrol show config": (0, SCONTROL_CONFIG, "")})
    assert slurm.job("7") is None
    assert [call[0][0] for call in runner.calls] == ["squeue", "scontrol"]


def test_forgotten_job_from_accounting() -> None:
    slurm, runner = client(
        {
            "squeue": (1, "", UNKNOWN_JOB),
            "scontrol show config": (0, SACCT_CONFIG, ""),
            "sacct": (0, "7|CANCELLED by 0|None|node[1-2]|0:15\n", ""),
        }
    )
    job = slurm.job("7")
    assert job is not None and job.state == "CANCELLED" and job.terminal and job.exit_code == "0:15"
    assert runner.calls[-1][0][0] == "sacct" and "--parsable2" in runner.calls[-1][0]


def test_cancel_arguments_and_ended_job_tolerated() -> None:
    slurm, runner = client(
        {
            "scancel": (
                1,
                "",
                "scancel: error: Kill job error on job id 3: Job/step already completing or completed\n",
            )
        }
    )
    slurm.cancel("3", signal="TERM", batch=True)
    assert runner.calls[0][0] == ["scancel", "--signal=TERM", "--batch", "3"]
    slurm, _ = client({"scancel": (1, "", "scancel: error: Access/permission denied\n")})
    with pytest.raises(SlurmCommandError, match="permission denied"):
        slurm.cancel("3")


def test_steps_hostnames_addresses_partitions() -> None:
    slurm, _ = client(
        {
            "squeue": (0, "4.0|algo-1\n4.1|algo-2\n4.batch|batch\n", ""),
            "scontrol show hostnames": (0, "node1\nnode2\n", ""),
            "sinfo --noheader --Node": (0, SINFO_ADDRESSES, ""),
            "sinfo --noheader --partition": (0, SINFO_GPU_PARTITION, ""),
        }
    )
    assert slurm.steps("4") == {"algo-1": "4.0", "algo-2": "4.1", "batch": "4.batch"}
    assert slurm.hostnames("node[1-2]") == ["node1", "node2"]
    assert slurm.node_addresses(["node1", "node2"]) == {"node1": "127.0.0.1", "node2": "127.0.0.1"}
    partition = slurm.partition("gpu")
    assert partition == Partition(name="gpu", available="up", gres=("gpu:8", "gpu:8(S:0-1)"), nodes=3)
    assert partition.has_gpus


def test_missing_partition_and_node() -> None:
    slurm, _ = client(
        {"sinfo --noheader --partition": (0, "", ""), "sinfo --noheader --Node": (0, "node1|10.0.0.1\n", "")}
    )
    assert slurm.partition("nope") is None
    with pytest.raises(SlurmCommandError, match=r"did not list node\(s\) \['node2'\]"):
        slurm.node_addresses(["node1", "node2"])


# --- SlurmSession ---------------------------------------------------------------------------------


def test_session_defaults(tmp_path: Path) -> None:
    session = SlurmSession(shared_dir=tmp_path)
    assert session.root == tmp_path.resolve() / "jobs"
    assert session.is_local and session.partition is None and session.extra_sbatch_args == ()
    assert session.emulate_cuda is False


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"shared_dir": None}, "shared_dir", "must be str or PathLike"),
        ({"shared_dir": "relative/dir"}, "shared_dir", "absolute path"),
        ({"shared_dir": "/no/such/dir"}, "shared_dir", "not an existing directory"),
        ({"partition": "gpu part"}, "partition", "not a Slurm name"),
        ({"account": 7}, "account", "must be str"),
        ({"qos": "high;rm"}, "qos", "not a Slurm name"),
        ({"python": "python3"}, "python", "absolute path"),
        ({"extra_sbatch_args": "--exclusive"}, "extra_sbatch_args", "list of strings"),
        ({"extra_sbatch_args": ["exclusive"]}, "extra_sbatch_args", "not an sbatch option"),
        ({"extra_sbatch_args": ["--time=10"]}, "extra_sbatch_args", "use max_run instead"),
        ({"extra_sbatch_args": ["-N2"]}, "extra_sbatch_args", "use instance_count instead"),
        ({"extra_sbatch_args": ["--partition=gpu"]}, "extra_sbatch_args", "SlurmSession(partition=...)"),
        ({"gpus_per_node": -1}, "gpus_per_node", ">= 0"),
        ({"gpus_per_node": True}, "gpus_per_node", ">= 0"),
        ({"container_image": "nvcr.io#nvidia/pytorch 24"}, "container_image", "without spaces"),
    ],
)
def test_session_validation_names_field_value_and_fix(
    tmp_path: Path, kwargs: dict[str, object], field: str, text: str
) -> None:
    kwargs = {"shared_dir": tmp_path, **kwargs}
    with pytest.raises(ConfigurationError) as raised:
        SlurmSession(**kwargs)  # type: ignore[arg-type]
    assert raised.value.field == field and text in str(raised.value) and raised.value.fix


# --- sbatch arguments and batch script ------------------------------------------------------------


def spec(
    instance_type: str = "ml.c5.xlarge",
    count: int = 2,
    spot: bool = False,
    name: str = "slurm-job",
    output: str = "file:///shared/out",
) -> TrainingJobSpec:
    return TrainingJobSpec(
        TrainingJobName=name,
        AlgorithmSpecification={"TrainingImage": "smlaunch-local", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": output},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": count},
        StoppingCondition={"MaxRuntimeInSeconds": 3600, **({"MaxWaitTimeInSeconds": 7200} if spot else {})},
        EnableManagedSpotTraining=spot or None,
    )


def job_settings(grace: float = 10) -> JobSettings:
    """A Slurm job's ``settings.json``: one rank per host, ``grace`` seconds to stop."""
    executor = SlurmSettings(python="/venv/python", shared_dir="/shared")
    return JobSettings(executor=executor, processes_per_host=1, stop_grace_seconds=grace)


def test_sbatch_arguments(tmp_path: Path) -> None:
    session = SlurmSession(
        shared_dir=tmp_path,
        partition="debug",
        account="ml",
        qos="normal",
        extra_sbatch_args=["--constraint=a100"],
    )
    job = JobDir(session.root / "slurm-job")
    debug = Partition(name="debug", available="up", gres=(), nodes=2)
    args = sbatch_arguments(spec(), session, debug, job, 120)
    assert args == [
        "--job-name=slurm-job",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--exclusive",
        "--time=72",  # 3600 s max_run + 120 s grace + 600 s margin = 72 minutes
        f"--output={job.path}/logs/agent.log",
        "--open-mode=append",
        f"--chdir={job.path}",
        "--no-requeue",
        "--partition=debug",
        "--account=ml",
        "--qos=normal",
        "--constraint=a100",
    ]
    assert "--requeue" in sbatch_arguments(spec(spot=True), session, None, job, 120)


def test_gpus_per_node_from_catalog_on_gpu_partitions_or_override(tmp_path: Path) -> None:
    gpu = Partition(name="gpu", available="up", gres=("gpu:8",), nodes=4)
    cpu = Partition(name="cpu", available="up", gres=(), nodes=4)
    session = SlurmSession(shared_dir=tmp_path)
    assert gpus_per_node(spec("ml.p4d.24xlarge"), session, gpu) == 8
    assert gpus_per_node(spec("ml.p4d.24xlarge"), session, cpu) is None
    assert gpus_per_node(spec("ml.c5.xlarge"), session, gpu) == 0
    job = JobDir(session.root / "slurm-job")
    assert "--gpus-per-node=8" in sbatch_arguments(spec("ml.p4d.24xlarge"), session, gpu, job, 1)
    override = SlurmSession(shared_dir=tmp_path, gpus_per_node=2)
    assert "--gpus-per-node=2" in sbatch_arguments(spec("ml.p4d.24xlarge"), override, cpu, job, 1)


def test_batch_script_execs_the_agent(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "jobs" / "slurm-job")
    script = batch_script("/opt/venv/bin/python", job, "smlaunch.sdk.backends.emulated.agent")
    assert script.startswith("#!/bin/sh\n")
    exec_line = f"exec /opt/venv/bin/python -m smlaunch.sdk.backends.emulated.agent {job.path}"
    assert script.splitlines()[-1] == exec_line


def test_srun_command_one_task_on_its_node_with_pyxis_arguments() -> None:
    tree = "/shared/jobs/j/hosts/algo-2"
    plain = srun_command("node2", "algo-2", "/venv/bin/python", None, "/shared", tree)
    assert plain == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=node2",
        "--job-name=algo-2",
        "--kill-on-bad-exit=0",
        "--export=ALL",
        "/venv/bin/python",
        "-m",
        "smlaunch.sdk.backends.emulated.executors.slurm.host",
    ]
    boxed = srun_command("node2", "algo-2", "python", "nvcr.io#nvidia/pytorch:24.05-py3", "/shared", tree)
    assert boxed[7:] == [
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        f"--container-mounts=/shared:/shared,{tree}:/opt/ml",
        f"--container-workdir={tree}",
        "train",
    ]


# --- the backend's view of Slurm's states (a job directory as the agent leaves it) ----------------


def backend_with(
    tmp_path: Path, answers: dict[str, tuple[int, str, str]], state: dict[str, object] | None = None
) -> tuple[SlurmBackend, Recorded, str]:
    slurm, runner = client(answers)
    backend = SlurmBackend(SlurmSession(shared_dir=tmp_path, slurm_client=slurm))
    job = backend.job_dir("slurm-job")
    job.path.mkdir(parents=True)
    job.logs_dir.mkdir()
    job.job_log.touch()
    write_json_atomic(job.spec_file, spec().to_request())
    write_json_atomic(job.path / SLURM_FILE, {"job_id": "9", "sbatch": []})
    job.write_state(
        state
        or {
            "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
            "SecondaryStatus": contract.SECONDARY_STARTING,
            "SecondaryStatusTransitions": [{"Status": "Starting", "StartTime": 1.0, "StatusMessage": "x"}],
            "CreationTime": 1.0,
            "LastModifiedTime": 1.0,
        }
    )
    return backend, runner, "slurm-job"


def test_a_queued_job_says_why_it_waits(tmp_path: Path) -> None:
    backend, _, name = backend_with(tmp_path, {"squeue": (0, "9|PENDING|Priority|\n", "")})
    described = backend.describe(name)
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("InProgress", "Starting")
    assert described["SecondaryStatusTransitions"][-1]["StatusMessage"] == "Pending in queue: Priority"


@pytest.mark.parametrize(
    ("slurm_state", "status", "secondary", "reason"),
    [
        ("TIMEOUT", "Stopped", "MaxRuntimeExceeded", "MaxRuntimeExceeded: Slurm job 9 ended TIMEOUT"),
        ("CANCELLED", "Stopped", "Stopped", "Stopped: Slurm job 9 ended CANCELLED"),
        ("NODE_FAIL", "Failed", "Failed", "InternalServerError: Slurm job 9 ended NODE_FAIL (NodeDown)"),
        ("OUT_OF_MEMORY", "Failed", "Failed", "InternalServerError: Slurm job 9 ended OUT_OF_MEMORY"),
    ],
)
def test_a_job_slurm_ended_before_its_agent_could_say_so(
    tmp_path: Path, slurm_state: str, status: str, secondary: str, reason: str
) -> None:
    why = "NodeDown" if slurm_state == "NODE_FAIL" else "None"
    backend, _, name = backend_with(tmp_path, {"squeue": (0, f"9|{slurm_state}|{why}|node[1-2]\n", "")})
    described = backend.describe(name)
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == (status, secondary)
    assert described["FailureReason"].startswith(reason), described["FailureReason"]
    kept = json.loads(backend.job_dir(name).state_file.read_text())  # Slurm will forget the job
    assert kept["TrainingJobStatus"] == status


def test_the_agents_own_outcome_wins_over_slurms(tmp_path: Path) -> None:
    failed = {
        "TrainingJobStatus": "Failed",
        "SecondaryStatus": "Failed",
        "FailureReason": "AlgorithmError: algo-2/rank 3 exited with code 1",
        "SecondaryStatusTransitions": [],
        "CreationTime": 1.0,
    }
    completed = {"squeue": (0, "9|COMPLETED|None|node[1-2]\n", "")}
    backend, runner, name = backend_with(tmp_path, completed, failed)
    assert backend.describe(name)["FailureReason"].startswith("AlgorithmError: algo-2/rank 3")
    assert runner.calls == []  # a terminal state needs no Slurm command


def test_stop_cancels_a_queued_job_and_signals_a_running_agent(tmp_path: Path) -> None:
    backend, runner, name = backend_with(
        tmp_path, {"squeue": (0, "9|PENDING|Resources|\n", ""), "scancel": (0, "", "")}
    )
    backend.stop(name)
    assert runner.calls[-1][0] == ["scancel", "9"]
    assert backend.job_dir(name).stop_file.exists()
    running = {"squeue": (0, "9|RUNNING|None|node[1-2]\n", ""), "scancel": (0, "", "")}
    (tmp_path / "b").mkdir()
    # Running, but its agent has not started the job (no TrainingStartTime): SIGTERM would kill
    # the agent before it handles SIGTERM, so the Slurm job is cancelled whole.
    backend, runner, name = backend_with(tmp_path / "b", running)
    backend.stop(name)
    assert runner.calls[-1][0] == ["scancel", "9"]
    (tmp_path / "c").mkdir()
    started = {
        "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
        "SecondaryStatus": contract.SECONDARY_DOWNLOADING,
        "SecondaryStatusTransitions": [],
        "CreationTime": 1.0,
        "TrainingStartTime": 2.0,
    }
    backend, runner, name = backend_with(tmp_path / "c", running, started)
    backend.stop(name)
    assert runner.calls[-1][0] == ["scancel", "--signal=TERM", "--batch", "9"]
    with pytest.raises(ConfigurationError, match="spot interruptions"):
        backend.stop(name, reason="spot")


def test_check_refuses_a_missing_partition_too_many_nodes_and_mpi_in_a_container(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    backend, _, _ = backend_with(
        tmp_path,
        {"sinfo --noheader --partition": (0, "", ""), "sinfo --noheader --format=%P": (0, "debug*\n", "")},
    )
    with pytest.raises(ConfigurationError, match="partition='debug': the cluster has no such partition"):
        backend.partition()
    backend, _, _ = backend_with(tmp_path / "b", {"sinfo --noheader --partition": (0, SINFO_PARTITION, "")})
    backend.session.partition = "debug"
    with pytest.raises(UnsupportedByBackendError, match="instance_count=3: partition debug has 2 node"):
        backend.check(
            JobRequest(spec(count=3).model_copy(update={"TrainingJobName": "other-job"}), Strategy.NONE)
        )
    mpi = spec().model_copy(
        update={
            "TrainingJobName": "mpi-job",
            "HyperParameters": {
                "sagemaker_mpi_enabled": "true",
                "sagemaker_mpi_num_of_processes_per_host": "2",
            },
        }
    )
    backend.check(JobRequest(mpi, Strategy.MPI))  # mpirun starts each host's ranks as a step on its node
    smp = mpi.model_copy(
        update={
            "TrainingJobName": "smp-job",
            "HyperParameters": {
                **(mpi.HyperParameters or {}),
                contract.HP_SMDDP_ENABLED: "true",
                contract.HP_MP_PARAMETERS: json.dumps({"partitions": 2}),
            },
        }
    )
    # smp starts its ranks from each host's runtime, as torch_distributed does
    backend.check(JobRequest(smp, Strategy.MODELPARALLEL))
    backend.session.container_image = "nvcr.io#nvidia/pytorch:24.01-py3"
    backend.check(JobRequest(smp, Strategy.MODELPARALLEL))
    with pytest.raises(UnsupportedByBackendError, match=r"distribution='mpi'.*drop container_image"):
        backend.check(JobRequest(mpi, Strategy.MPI))


def test_sbatch_gets_the_agent_and_the_environment_without_aws_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-key")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "s3cr3t-token")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    backend, runner, name = backend_with(
        tmp_path,
        {
            "sinfo --noheader --format=%P": (0, "debug*\n", ""),
            "sinfo --noheader --partition": (0, SINFO_PARTITION, ""),
            "sbatch": (0, "42\n", ""),
        },
    )
    job = backend.job_dir(name)
    (job.path / SLURM_FILE).unlink()
    write_json_atomic(job.settings_file, job_settings(10).model_dump(mode="json"))
    backend._start_agent(job)
    argv, stdin, env = runner.calls[-1]
    assert argv[:2] == ["sbatch", "--parsable"] and "--nodes=2" in argv and "--job-name=slurm-job" in argv
    assert stdin is not None and stdin.endswith(f" -m smlaunch.sdk.backends.emulated.agent {job.path}\n")
    assert env is not None and env["AWS_REGION"] == "us-west-2"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "AWS_SESSION_TOKEN" not in env
    assert json.loads((job.path / SLURM_FILE).read_text())["job_id"] == "42"
    for path in job.path.rglob("*"):
        assert not path.is_file() or b"s3cr3t" not in path.read_bytes(), path


def test_file_paths_outside_the_shared_dir_are_warned_about(tmp_path: Path) -> None:
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    shared.mkdir()
    elsewhere.mkdir()
    backend, _, _ = backend_with(
        shared,
        {
            "sinfo --noheader --format=%P": (0, "debug*\n", ""),
            "sinfo --noheader --partition": (0, SINFO_PARTITION, ""),
        },
    )
    inside = spec(name="inside-job", output=(shared / "out").as_uri())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.check(JobRequest(inside, Strategy.NONE))
    outside = spec(name="outside-job", output=(elsewhere / "out").as_uri())
    with pytest.warns(UserWarning, match=r"output_path=file://.*outside SlurmSession.shared_dir"):
        backend.check(JobRequest(outside, Strategy.NONE))
    tensorboard = spec(name="tensorboard-job", output=(shared / "out").as_uri()).model_copy(
        update={"TensorBoardOutputConfig": {"S3OutputPath": (elsewhere / "tb").as_uri()}}
    )
    tensorboard = TrainingJobSpec.model_validate(tensorboard.to_request())
    with pytest.warns(UserWarning, match=r"tensorboard_output_config.s3_output_path=file://.*outside"):
        backend.check(JobRequest(tensorboard, Strategy.NONE))


# --- the executor inside the allocation (fake srun processes, recorded Slurm answers) -------------


class FakeSrun:
    """An ``srun`` client process as the agent holds it: running until told otherwise."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def test_executor_maps_hosts_to_nodes_in_order_and_signals_steps_not_srun(tmp_path: Path) -> None:
    import signal as signals

    from smlaunch.sdk.backends.emulated.executors.base import Host, LaunchContext
    from smlaunch.sdk.backends.emulated.executors.slurm.executor import SlurmExecutor

    slurm, runner = client(
        {
            "scontrol show hostnames": (0, "gpu-07\ngpu-03\n", ""),
            "sinfo --noheader --Node": (0, "gpu-03|10.0.0.3\ngpu-07|10.0.0.7\n", ""),
            "squeue --noheader --steps": (0, "12.0|algo-1\n12.batch|batch\n", ""),
            "scancel": (0, "", ""),
        }
    )
    executor = SlurmExecutor(client=slurm, job_id="12", nodelist="gpu-[03,07]")
    hosts = [
        Host(name="algo-2", index=1, base=tmp_path / "algo-2"),
        Host(name="algo-1", index=0, base=tmp_path / "algo-1"),
    ]
    assert executor.nodes(hosts) == {"algo-1": ("gpu-07", "10.0.0.7"), "algo-2": ("gpu-03", "10.0.0.3")}
    for host in hosts:
        host.proc = FakeSrun()  # type: ignore[assignment]
    said: list[str] = []
    context = LaunchContext(spec(), job_settings(), JobDir(tmp_path), hosts, 10.0, said.append)
    executor.signal(context, hosts, signals.SIGTERM)
    assert runner.calls[-1][0] == ["scancel", "--signal=TERM", "12.0"]  # algo-1's step
    assert hosts[1].proc.signals == []  # type: ignore[union-attr]
    assert hosts[0].proc.signals == [signals.SIGTERM]  # type: ignore[union-attr]  # no step yet: srun


@pytest.mark.parametrize(
    ("count", "note"),
    [
        (None, None),
        ("0", None),
        ("junk", None),
        ("2", "Slurm requeued job 42 (SLURM_RESTART_COUNT=2)"),
    ],
)
def test_executor_knows_a_requeued_run_from_slurm_restart_count(
    monkeypatch: pytest.MonkeyPatch, count: str | None, note: str | None
) -> None:
    if count is None:
        monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    else:
        monkeypatch.setenv("SLURM_RESTART_COUNT", count)
    executor = SlurmExecutor(client=SlurmClient(), job_id="42", nodelist="node[1-2]")
    assert SlurmExecutor.requeues
    assert executor.requeued() == note


class _RequeuedExecutor(SlurmExecutor):
    def requeued(self) -> str | None:
        return "Slurm requeued job 42 (SLURM_RESTART_COUNT=1)"


@pytest.mark.parametrize("staged_again", [False, True])
def test_a_requeued_agent_run_takes_the_attempts_over_and_starts_the_next(
    tmp_path: Path, staged_again: bool
) -> None:
    """The previous run was killed (Slurm's KillWait) before it ended its attempt: the requeued
    run ends it when that run last wrote, keeps the first start and moves the old trees aside.
    ``staged_again``: a later run was preempted while staging, before any host started."""
    job = JobDir(tmp_path / "jobs" / "slurm-job")
    job.logs_dir.mkdir(parents=True)
    write_json_atomic(job.spec_file, spec(spot=True).to_request())
    write_json_atomic(job.settings_file, job_settings(10).model_dump(mode="json"))
    job.write_state(
        {
            "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
            "SecondaryStatus": contract.SECONDARY_TRAINING,
            "SecondaryStatusTransitions": [{"Status": contract.SECONDARY_TRAINING, "StartTime": 110.0}],
            "TrainingStartTime": 100.0,
            "LastModifiedTime": 160.0,
            "Attempts": [{"Attempt": 1, "StartTime": 110.0}],
        }
    )
    (job.hosts_dir / "algo-1" / "checkpoints").mkdir(parents=True)
    if staged_again:
        (job.path / "hosts-attempt-1" / "algo-1").mkdir(parents=True)
    agent = Agent(job, _RequeuedExecutor(client=SlurmClient(), job_id="42"))
    assert agent._resume()
    state = job.read_state()
    assert state["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS and state["TrainingStartTime"] == 100.0
    assert state["Attempts"] == [
        {
            "Attempt": 1,
            "StartTime": 110.0,
            "EndTime": 160.0,
            "Seconds": 50.0,
            "Outcome": contract.SECONDARY_INTERRUPTED,
        }
    ]
    assert [t["Status"] for t in state["SecondaryStatusTransitions"]] == [
        contract.SECONDARY_TRAINING,
        contract.SECONDARY_STARTING,
        contract.SECONDARY_DOWNLOADING,
    ]
    assert not job.hosts_dir.exists() and (job.path / "hosts-attempt-1" / "algo-1").is_dir()
    assert (job.path / "hosts-attempt-1" / "algo-1" / "checkpoints").is_dir() is not staged_again
    assert "Slurm requeued job 42 (SLURM_RESTART_COUNT=1)" in job.job_log.read_text()


def test_a_requeued_run_of_a_job_that_already_ended_changes_nothing(tmp_path: Path) -> None:
    """Slurm may requeue the job while its agent packages the artifacts and writes Completed."""
    job = JobDir(tmp_path / "jobs" / "slurm-job")
    job.logs_dir.mkdir(parents=True)
    write_json_atomic(job.spec_file, spec(spot=True).to_request())
    write_json_atomic(job.settings_file, job_settings(10).model_dump(mode="json"))
    ended = {
        "TrainingJobStatus": contract.STATUS_COMPLETED,
        "SecondaryStatus": contract.SECONDARY_COMPLETED,
        "SecondaryStatusTransitions": [],
        "TrainingStartTime": 100.0,
        "LastModifiedTime": 160.0,
    }
    job.write_state(ended)
    assert Agent(job, _RequeuedExecutor(client=SlurmClient(), job_id="42")).run() == 0
    assert job.read_state() == ended
    assert "already ended Completed: nothing to run" in job.job_log.read_text()
