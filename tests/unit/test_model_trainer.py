"""``ModelTrainer`` (SDK v3's API): its request on the emulated platform, its argument checks, its
drivers channel, and what the host runtime makes of a ModelTrainer job's tree. (Equality with SDK
v3's own request and drivers is ``test_model_trainer_oracle.py``.)"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, contract
from smlaunch.contract import v3 as v3_contract
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.train.drivers import driver_files, train_script
from smlaunch.train import Mode, ModelTrainer
from smlaunch.train.configs import (
    CheckpointConfig,
    Compute,
    FileSystemDataSource,
    InputData,
    S3DataSource,
    SourceCode,
    StoppingCondition,
)
from smlaunch.train.distributed import MPI, SMP, Torchrun

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311"
NOW = datetime(2026, 1, 2, 3, 4, 5)


@pytest.fixture
def session(tmp_path: Path) -> LocalSession:
    return LocalSession(root=tmp_path / "jobs")


def trainer(session: LocalSession, src: Path, **kwargs: Any) -> ModelTrainer:
    kwargs.setdefault("source_code", SourceCode(source_dir=str(src), entry_script="train.py"))
    return ModelTrainer(training_image=IMAGE, sagemaker_session=session, **kwargs)


def test_importable_where_v3_code_imports_it() -> None:
    import smlaunch.modules.configs
    import smlaunch.modules.distributed
    import smlaunch.modules.train
    import smlaunch.train.model_trainer

    assert smlaunch.modules.train.ModelTrainer is ModelTrainer is smlaunch.ModelTrainer
    assert smlaunch.train.model_trainer.Mode is Mode
    assert smlaunch.modules.configs.SourceCode is SourceCode is smlaunch.SourceCode
    assert smlaunch.modules.distributed.Torchrun is Torchrun is smlaunch.Torchrun


def test_local_request_has_v3_shape(session: LocalSession, src: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    spec = trainer(
        session, src, hyperparameters={"lr": 0.1, "name": "x", "layers": [1, 2]}, distributed=Torchrun()
    ).plan([InputData(channel_name="train", data_source=str(data))], now=NOW)
    assert spec.TrainingJobName == "pytorch-training-job-20260102030405"
    assert spec.AlgorithmSpecification.ContainerEntrypoint == ["/bin/bash"]
    assert spec.AlgorithmSpecification.ContainerArguments == v3_contract.CONTAINER_ARGUMENTS
    assert spec.HyperParameters == {"lr": "0.1", "name": "x", "layers": "[1, 2]"}
    assert [c.ChannelName for c in spec.InputDataConfig or []] == ["train", "code", "sm_drivers"]
    uris = {c.ChannelName: c.DataSource.S3DataSource.S3Uri for c in spec.InputDataConfig or []}  # type: ignore[union-attr]
    assert uris["train"] == data.resolve().as_uri()
    assert uris["code"] == src.resolve().as_uri()  # read in place, as every local input
    drivers = Path(uris["sm_drivers"].removeprefix("file://"))
    assert drivers.parent == session.root.parent / "sm_drivers"  # beside the store, never in it
    assert spec.OutputDataConfig.S3OutputPath == session.default_output_path()
    assert spec.OutputDataConfig.CompressionType == "GZIP"
    assert spec.StoppingCondition.MaxRuntimeInSeconds == 3600
    assert (spec.ResourceConfig.InstanceType, spec.ResourceConfig.InstanceCount) == ("ml.m5.xlarge", 1)


def test_smp_adds_mp_parameters_and_checkpoints_default(session: LocalSession, src: Path) -> None:
    spec = trainer(
        session,
        src,
        compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=1),
        distributed=Torchrun(smp=SMP(hybrid_shard_degree=4)),
        checkpoint_config=CheckpointConfig(),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=60),
    ).plan(now=NOW)
    assert json.loads(spec.HyperParameters["mp_parameters"]) == {"hybrid_shard_degree": 4}
    assert spec.CheckpointConfig is not None
    assert spec.CheckpointConfig.S3Uri == f"{session.root.as_uri()}/{spec.TrainingJobName}/checkpoints"
    assert spec.CheckpointConfig.LocalPath == "/opt/ml/checkpoints"
    assert spec.StoppingCondition.MaxRuntimeInSeconds == 60


def test_s3_data_source_is_sent_as_given(session: LocalSession, src: Path) -> None:
    source = S3DataSource(
        s3_data_type="S3Prefix", s3_uri="s3://b/val", s3_data_distribution_type="ShardedByS3Key"
    )
    spec = trainer(session, src).plan([InputData(channel_name="val", data_source=source)], now=NOW)
    channel = spec.channel("val")
    assert channel is not None and channel.InputMode is None
    assert channel.DataSource.S3DataSource is not None
    assert channel.DataSource.S3DataSource.S3DataDistributionType == "ShardedByS3Key"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"training_image": None}, "training_image"),
        ({"algorithm_name": "xgboost"}, "algorithm_name"),
        ({"source_code": SourceCode(entry_script="train.py")}, "source_code.source_dir"),
        ({"source_code": "SRC:missing.py"}, "source_code.entry_script"),
        ({"source_code": "SRC:train.py:reqs.txt"}, "source_code.requirements"),
        ({"source_code": SourceCode(source_dir="/no/such/dir", command="echo")}, "source_code.source_dir"),
        ({"source_code": SourceCode(source_dir="x.tar.gz", command="echo")}, "source_code.source_dir"),
        ({"source_code": SourceCode(command="echo"), "distributed": Torchrun()}, "distributed"),
        ({"distributed": {"process_count_per_node": 2}}, "distributed"),
        ({"compute": Compute(instance_type="ml.nope.xlarge")}, "compute.instance_type"),
        ({"compute": Compute(instance_count=0)}, "instance_count"),
        ({"compute": {"instance_typo": "ml.m5.xlarge"}}, "compute.instance_typo"),
        ({"input_data_config": [InputData(channel_name="code", data_source="s3://b/c")]}, "channel_name"),
        ({"input_data_config": [InputData(channel_name="x", data_source="/no/such")]}, "data_source"),
        ({"hyperparameters": "/no/such/file.json"}, "hyperparameters"),
        ({"environment": {"A": 1}}, "environment['A']"),
        ({"training_input_mode": "Stream"}, "training_input_mode"),
    ],
)
def test_bad_arguments_name_the_field(
    session: LocalSession, src: Path, kwargs: dict[str, Any], field: str
) -> None:
    (src / "reqs.txt").write_text("numpy\n")
    if isinstance(kwargs.get("source_code"), str):
        _, entry, *requirements = kwargs["source_code"].split(":")
        kwargs["source_code"] = SourceCode(
            source_dir=str(src), entry_script=entry, requirements=requirements[0] if requirements else None
        )
    kwargs.setdefault("training_image", IMAGE)
    kwargs.setdefault("source_code", SourceCode(source_dir=str(src), entry_script="train.py"))
    with pytest.raises(ConfigurationError) as error:
        ModelTrainer(sagemaker_session=session, **kwargs)
    assert field in error.value.field
    assert "Fix:" in str(error.value)


def test_sagemaker_needs_a_role(src: Path) -> None:
    class SageMakerShaped:
        is_local = False
        instance_count_quota = None
        processes_per_host = None
        sagemaker_config: dict[str, Any] = {}

    with pytest.raises(ConfigurationError, match="role"):
        ModelTrainer(training_image=IMAGE, sagemaker_session=SageMakerShaped())  # type: ignore[arg-type]


def test_hyperparameters_from_a_json_file(session: LocalSession, src: Path, tmp_path: Path) -> None:
    path = tmp_path / "hps.json"
    path.write_text(json.dumps({"epochs": 3, "name": "run"}))
    spec = trainer(session, src, hyperparameters=str(path)).plan(now=NOW)
    assert spec.HyperParameters == {"epochs": "3", "name": "run"}


def test_drivers_files_and_train_script() -> None:
    code = SourceCode(source_dir="src", command="python train.py --x", args=["a b", 3], requirements="r.txt")
    files = driver_files(code, MPI(process_count_per_node=2))
    assert json.loads(files["sourcecode.json"]) == code.model_dump()
    assert json.loads(files["distributed.json"]) == {
        "process_count_per_node": 2,
        "mpi_additional_options": None,
    }
    assert files["sm_driver.py"] == Path(v3_contract.__file__).read_bytes()
    script = train_script(code, None)
    assert "python train.py --x 'a b' 3\nSAGEMAKER_BASE_COMMAND_EOF" in script
    assert 'cd "$SM_BASE/input/data/code"' in script and "pip install -r r.txt" in script


def test_driver_script_renders_the_environment_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver uploaded to SageMaker (``sm_driver.py env``) writes v3's variables, quoted for bash."""
    config = tmp_path / "input/config"
    config.mkdir(parents=True)
    resource = {"current_host": "algo-1", "current_instance_type": "ml.m5.xlarge", "hosts": ["algo-1"]}
    (config / "resourceconfig.json").write_text(json.dumps({**resource, "network_interface_name": "eth0"}))
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {}}))
    (config / "hyperparameters.json").write_text(json.dumps({"name": "it's"}))
    drivers = tmp_path / "input/data/sm_drivers"
    drivers.mkdir(parents=True)
    (drivers / "sourcecode.json").write_text(json.dumps({"entry_script": "train.py"}))
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))
    assert v3_contract.main(["env"]) == 0
    text = (tmp_path / "input/sm_training.env").read_text()
    assert "export SM_HP_NAME='it'\"'\"'s'\n" in text
    assert f"export SM_SOURCE_DIR={tmp_path}/input/data/code\n" in text
    assert "export SM_MASTER_ADDR=algo-1\n" in text and "export SM_MASTER_PORT=7777\n" in text  # v3's
    monkeypatch.setenv(contract.SMLAUNCH_MASTER_PORT, "41234")  # the Docker executor's free port
    assert v3_contract.main(["env"]) == 0
    assert "export SM_MASTER_PORT=41234\n" in (tmp_path / "input/sm_training.env").read_text()


# --- the host runtime ------------------------------------------------------------------------------


def write_tree(base: Path, source_code: dict[str, Any], distributed: dict[str, Any], hosts: int = 2) -> None:
    from tests.functional._runtime_tree import write_host_tree

    names = [f"algo-{i + 1}" for i in range(hosts)]
    write_host_tree(
        base,
        "algo-2" if hosts > 1 else "algo-1",
        names,
        {"lr": "0.1", "batch-size": "8"},
        channels={"train": {}, "code": {}, "sm_drivers": {}},
    )
    drivers = base / "input/data/sm_drivers"
    (drivers / "sourcecode.json").write_text(json.dumps(source_code))
    (drivers / "distributed.json").write_text(json.dumps(distributed))
    (base / "input/data/code/train.py").write_text("print('x')\n")


def environment(base: Path, **extra: str) -> Any:
    from smlaunch.runtime.environment import Environment

    return Environment.from_files(base, {"TRAINING_JOB_NAME": "j", "SMLAUNCH_NUM_GPUS": "0", **extra})


def test_runtime_gives_a_v3_job_v3s_variables_only(tmp_path: Path) -> None:
    from smlaunch.runtime.env_vars import process_env

    write_tree(tmp_path, {"entry_script": "train.py"}, {})
    env = environment(tmp_path)
    variables = process_env(env)
    assert variables["SM_HP_BATCH_SIZE"] == "8" and variables["SM_HPS"] == '{"lr": 0.1, "batch-size": 8}'
    assert variables["SM_HOSTS"] == '["algo-1", "algo-2"]' and variables["SM_CURRENT_HOST_RANK"] == "1"
    assert variables["SM_SOURCE_DIR"] == str(tmp_path / "input/data/code")
    assert "SM_MODULE_DIR" not in variables and "SM_USER_ARGS" not in variables  # the toolkit's
    assert env.code_dir == tmp_path / "input/data/code"


@pytest.mark.parametrize(
    ("source_code", "distributed", "launcher", "ranks"),
    [
        ({"entry_script": "train.py"}, {}, "process", 1),
        ({"command": "echo hi", "args": ["a b"]}, {}, "process", 1),
        ({"entry_script": "train.py"}, {"process_count_per_node": 3, "smp": None}, "torchrun", 3),
        (
            {"entry_script": "train.py"},
            {"process_count_per_node": 2, "mpi_additional_options": ["-x", "A"]},
            "mpi",
            2,
        ),
    ],
    ids=["script", "command", "torchrun", "mpi"],
)
def test_runtime_picks_v3s_launcher(
    tmp_path: Path, source_code: dict[str, Any], distributed: dict[str, Any], launcher: str, ranks: int
) -> None:
    from smlaunch.runtime import v3
    from smlaunch.runtime.launchers import launcher_name

    write_tree(tmp_path, source_code, distributed)
    env = environment(tmp_path, SMLAUNCH_PROCESSES_PER_HOST="1")
    assert launcher_name(env) == launcher
    assert env.processes_per_host == ranks
    argv = v3.program_argv(env, "python")
    if "command" in source_code:
        assert argv == ["/bin/bash", "-c", "echo hi 'a b'"]
    else:
        assert argv == ["python", "train.py", "--lr", "0.1", "--batch-size", "8"]


def test_estimator_jobs_keep_the_toolkit_contract(tmp_path: Path) -> None:
    from tests.functional._runtime_tree import write_host_tree

    write_host_tree(tmp_path, "algo-1", ["algo-1"], {"sagemaker_program": '"train.py"'})
    env = environment(tmp_path)
    assert env.v3 is None and env.code_dir == tmp_path / "code"
    assert os.path.basename(env.user_entry_point) == "train.py"


def test_dry_run_checks_and_submits_nothing(session: LocalSession, src: Path) -> None:
    made = trainer(session, src)
    made.train(dry_run=True)
    assert made.latest_training_job is None
    assert not session.root.exists() or list(session.root.iterdir()) == []
    efs = FileSystemDataSource(
        file_system_id="fs-1", file_system_access_mode="ro", file_system_type="EFS", directory_path="/d"
    )
    with pytest.raises(ConfigurationError):  # the emulated platform serves S3 channels only
        made.train([InputData(channel_name="efs", data_source=efs)], dry_run=True)


def test_local_container_mode_keeps_its_jobs_below_local_container_root(src: Path, tmp_path: Path) -> None:
    made = ModelTrainer(
        training_image=IMAGE,
        training_mode=Mode.LOCAL_CONTAINER,
        local_container_root=str(tmp_path),
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
    )
    assert isinstance(made.sagemaker_session, LocalSession)
    assert made.sagemaker_session.root == tmp_path / "smlaunch-jobs"


def test_a_cluster_session_gets_code_and_drivers_staged_below_its_output(src: Path) -> None:
    """A session that runs jobs off this machine without a local job store (Kubernetes on a claim):
    the code and drivers are staged below its default output path, for the pods to read."""
    from smlaunch.sdk.train import request

    class ClusterShaped:
        is_local = True
        instance_count_quota = None
        processes_per_host = None
        sagemaker_config: dict[str, Any] = {}

        def default_output_path(self) -> str:
            return "file:///mnt/claim/jobs/"

        def expand_role(self, role: str | None) -> str:
            return role or "arn:aws:iam::000000000000:role/placeholder"

    made = ModelTrainer(
        training_image=IMAGE,
        sagemaker_session=ClusterShaped(),  # type: ignore[arg-type]
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
    )
    plan = request.build(made, [], NOW)
    job = plan.spec.TrainingJobName
    uris = {c.ChannelName: c.DataSource.S3DataSource.S3Uri for c in plan.spec.InputDataConfig or []}  # type: ignore[union-attr]
    assert uris == {
        "code": f"file:///mnt/claim/jobs/{job}/input/code",
        "sm_drivers": f"file:///mnt/claim/jobs/{job}/input/sm_drivers",
    }
    assert [(u.channel, u.source, u.local) for u in plan.uploads] == [
        ("code", src.resolve(), None),
        ("sm_drivers", None, None),
    ]


def test_a_cluster_session_on_s3_gets_local_inputs_uploaded_as_v3_does(src: Path, tmp_path: Path) -> None:
    """Kubernetes with S3 storage: a local ``InputData`` path is uploaded below the bucket with the
    code and drivers (the pods cannot read this machine), not refused."""
    from smlaunch.sdk.train import request
    from smlaunch.train.configs import InputData

    class ClusterOnS3:
        is_local = True
        instance_count_quota = None
        processes_per_host = None
        sagemaker_config: dict[str, Any] = {}

        def default_output_path(self) -> str:
            return "s3://bucket/"

        def expand_role(self, role: str | None) -> str:
            return role or "arn:aws:iam::000000000000:role/placeholder"

        def stage_local_input(self, path: Path, job: str, channel: str) -> str:
            raise AssertionError("an S3 session's local inputs are uploaded")

    made = ModelTrainer(
        training_image=IMAGE,
        sagemaker_session=ClusterOnS3(),  # type: ignore[arg-type]
        source_code=SourceCode(source_dir=str(src), entry_script="train.py"),
    )
    data = tmp_path / "data"
    data.mkdir()
    plan = request.build(made, [InputData(channel_name="train", data_source=str(data))], NOW)
    job = plan.spec.TrainingJobName
    uris = {c.ChannelName: c.DataSource.S3DataSource.S3Uri for c in plan.spec.InputDataConfig or []}  # type: ignore[union-attr]
    assert uris == {name: f"s3://bucket/{job}/input/{name}" for name in ("train", "code", "sm_drivers")}
    assert plan.spec.OutputDataConfig.S3OutputPath == "s3://bucket/"
    assert [(u.channel, u.source) for u in plan.uploads] == [
        ("train", data.resolve()),
        ("code", src.resolve()),
        ("sm_drivers", None),
    ]


def test_a_base_job_name_sagemaker_would_refuse_is_named(session: LocalSession, src: Path) -> None:
    with pytest.raises(ConfigurationError, match="base_job_name"):
        trainer(session, src, base_job_name="bad name!").plan(now=NOW)
    # v3's rule: '_' becomes '-'
    assert (
        trainer(session, src, base_job_name="my_job").plan(now=NOW).TrainingJobName == "my-job-20260102030405"
    )
