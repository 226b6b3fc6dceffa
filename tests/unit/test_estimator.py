"""Estimator/PyTorch: construction checks, plan(), fit() with a recording backend, attach()."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import Estimator, JobFailedError, LocalSession, PyTorch, TrainingInput
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.base import Backend, Capabilities
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
BUCKET = "sagemaker-us-west-2-123456789012"


class RecordingBackend(Backend):
    """Records submit (the spec and the strategy of each job) and stop; describes a submitted job
    with a settable status."""

    capabilities = Capabilities(
        name="recording", uri_schemes=frozenset({"file", "s3"}), input_modes=frozenset({"File"})
    )

    def __init__(self) -> None:
        self.jobs: dict[str, TrainingJobSpec] = {}
        self.strategies: dict[str, Strategy] = {}
        self.stopped: list[tuple[str, str | None]] = []
        self.status = "Completed"
        self.failure_reason = ""

    def submit(self, request: JobRequest) -> None:
        self.jobs[request.spec.TrainingJobName] = request.spec
        self.strategies[request.spec.TrainingJobName] = request.strategy

    def describe(self, job_name: str) -> dict[str, Any]:
        spec = self.jobs[job_name]
        description = {
            **spec.to_request(),
            "TrainingJobStatus": self.status,
            "SecondaryStatus": self.status,
            "ModelArtifacts": {
                "S3ModelArtifacts": (
                    f"{spec.OutputDataConfig.S3OutputPath.rstrip('/')}/{job_name}/output/model.tar.gz"
                )
            },
        }
        if self.failure_reason:
            description["FailureReason"] = self.failure_reason
        return description

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        yield f"[algo-1] training {job_name}"

    def stop(self, job_name: str, reason: str | None = None) -> None:
        self.stopped.append((job_name, reason))


class TestLocalSession(LocalSession):
    __test__ = False

    def __init__(self, root: Path) -> None:
        super().__init__(root=root)
        self.recording = RecordingBackend()

    def backend(self) -> Backend:
        return self.recording


class FakeSageMakerSession:
    """SageMaker-shaped session: offline, S3 through an injected (moto) client."""

    is_local = False
    instance_count_quota = None
    sagemaker_config: dict[str, Any] = {}  # no config.yaml defaults
    processes_per_host = None
    region_name = "us-west-2"

    def __init__(self, s3: Any = None) -> None:
        self.recording = RecordingBackend()
        self.s3 = s3
        self.staged_inputs: list[tuple[str, str, str]] = []

    def default_output_path(self) -> str:
        return f"s3://{BUCKET}/"

    def expand_role(self, role: str | None) -> str:
        assert role
        return role

    def backend(self) -> Backend:
        return self.recording

    def s3_client(self) -> Any:
        if self.s3 is None:
            raise AssertionError("no S3 expected")
        return self.s3

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        return {"ExpectedBucketOwner": "123456789012"} if bucket == BUCKET else {}

    def stage_local_input(self, path: str, job_name: str, channel: str) -> str:
        self.staged_inputs.append((path, job_name, channel))
        return f"s3://{BUCKET}/{job_name}/input/{channel}/"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    (root / "sub").mkdir()
    (root / "sub" / "main.py").write_text("")
    return root


def local(src: Path, tmp_path: Path, **kwargs: Any) -> PyTorch:
    args: dict[str, Any] = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local",
        instance_count=1,
        sagemaker_session=TestLocalSession(tmp_path / "jobs"),
    )
    args.update(kwargs)
    return PyTorch(**args)


def remote(src: Path, session: Any = None, **kwargs: Any) -> PyTorch:
    args: dict[str, Any] = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.p3.2xlarge",
        instance_count=1,
        role=ROLE,
        sagemaker_session=session or FakeSageMakerSession(),
    )
    args.update(kwargs)
    return PyTorch(**args)


def config_error(build: Any) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        build()
    assert info.value.fix, "the message says how to fix it"
    return info.value


# --- fit ------------------------------------------------------------------------------------------


def test_local_fit_stages_code_and_submits(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir()
    est = local(
        src,
        tmp_path,
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        hyperparameters={"epochs": 3},
        distribution={"torch_distributed": {"enabled": True}},
    )
    est.fit({"train": str(data)}, job_name="job-1")
    session = est.sagemaker_session
    spec = session.recording.jobs["job-1"]
    code = tmp_path / "jobs" / "job-1" / "source" / "sourcedir.tar.gz"
    assert json.loads(spec.HyperParameters["sagemaker_submit_directory"]) == code.as_uri()
    with tarfile.open(code) as tar:
        assert sorted(tar.getnames()) == ["sub/main.py", "train.py"]
    assert spec.HyperParameters["sagemaker_torch_distributed_enabled"] == "true"
    assert spec.InputDataConfig and spec.InputDataConfig[0].DataSource.S3DataSource
    assert spec.InputDataConfig[0].DataSource.S3DataSource.S3Uri == data.as_uri()
    assert spec.AlgorithmSpecification.TrainingImage == "pytorch-training:2.1.0-gpu-py310"
    assert spec.DebugHookConfig is None and spec.ProfilerConfig is None
    assert est.latest_training_job is not None and est.latest_training_job.name == "job-1"
    assert "[algo-1] training job-1" in capsys.readouterr().out
    assert est.model_data == (tmp_path / "jobs").as_uri() + "/job-1/output/model.tar.gz"
    est.stop()
    est.stop(reason="spot")
    assert session.recording.stopped == [("job-1", None), ("job-1", "spot")]
    est.logs()
    assert "training job-1" in capsys.readouterr().out


def test_fit_without_wait_and_failure(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path)
    backend = est.sagemaker_session.recording
    backend.status, backend.failure_reason = "Failed", "algo-1 rank 0 exited 3"
    est.fit(wait=False, job_name="job-2")
    assert "job-2" in backend.jobs
    with pytest.raises(JobFailedError) as info:
        est.fit(job_name="job-3", logs=False)
    assert info.value.job_name == "job-3" and "exited 3" in info.value.reason


def test_backend_refusal_happens_before_staging(src: Path, tmp_path: Path) -> None:
    est = local(src, tmp_path, input_mode="Pipe")
    with pytest.raises(UnsupportedByBackendError, match="input mode"):
        est.fit("s3://b-1/train", job_name="job-4")
    assert not (tmp_path / "jobs" / "job-4").exists()
    assert est.latest_training_job is None
    with pytest.raises(ConfigurationError, match="call fit"):
        _ = est.model_data


def test_sagemaker_shaped_fit_uploads_code_to_the_bucket_root(src: Path, tmp_path: Path) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-west-2", aws_access_key_id="t", aws_secret_access_key="t")
        for bucket in (BUCKET, "out-bucket"):
            s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        session = FakeSageMakerSession(s3)
        data = tmp_path / "data"
        data.mkdir()
        est = remote(src, session, output_path="s3://out-bucket/prefix/out", output_kms_key="key-1")
        spec = est.plan({"train": str(data), "val": "s3://my-bucket/val"}, job_name="job-5")
        assert spec.InputDataConfig and spec.InputDataConfig[0].DataSource.S3DataSource
        assert spec.InputDataConfig[0].DataSource.S3DataSource.S3Uri == f"s3://{BUCKET}/job-5/input/train/"
        assert session.staged_inputs == [], "plan() stages nothing"
        est.fit({"train": str(data), "val": "s3://my-bucket/val"}, job_name="job-5", wait=False)
        head = s3.head_object(Bucket="out-bucket", Key="job-5/source/sourcedir.tar.gz")
        # As the SDK: SSE-KMS, with the output KMS key when the code shares the output bucket.
        assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"].endswith("key-1")
        assert "smlaunch-sha256" in head["Metadata"]
        assert session.staged_inputs == [(str(data.resolve()), "job-5", "train")]
        submitted = session.recording.jobs["job-5"]
        assert (
            json.loads(submitted.HyperParameters["sagemaker_submit_directory"])
            == "s3://out-bucket/job-5/source/sourcedir.tar.gz"
        )
        assert submitted.OutputDataConfig.KmsKeyId == "key-1"


def test_plan_is_pure_and_reports_future_code_location(src: Path) -> None:
    spec = remote(src, code_location="s3://code-bucket/p").plan("s3://b-1/train", job_name="job-6")
    assert (
        json.loads(spec.HyperParameters["sagemaker_submit_directory"])
        == "s3://code-bucket/p/job-6/source/sourcedir.tar.gz"
    )
    assert spec.InputDataConfig and spec.InputDataConfig[0].ChannelName == "training"
    assert spec.TrainingJobName == "job-6"
    generated = remote(src, base_job_name="bert").plan().TrainingJobName
    assert generated.startswith("bert-") and len(generated) == len("bert-") + 23


def test_entry_point_relative_to_source_dir(src: Path) -> None:
    spec = remote(src, entry_point="sub/main.py").plan(job_name="j")
    assert spec.HyperParameters["sagemaker_program"] == '"sub/main.py"'


def test_generic_estimator_without_code(tmp_path: Path) -> None:
    est = Estimator(
        "123.dkr.ecr.us-west-2.amazonaws.com/my-algo:1",
        ROLE,
        1,
        "ml.m5.large",
        sagemaker_session=FakeSageMakerSession(),
        hyperparameters={"k": 1},
    )
    spec = est.plan()
    assert spec.HyperParameters == {"k": "1"}
    assert spec.TrainingJobName.startswith("my-algo-")
    assert spec.AlgorithmSpecification.EnableSageMakerMetricsTimeSeries is None


def test_default_sessions(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path / "home"))
    est = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local_gpu",
        instance_count=1,
    )
    assert isinstance(est.sagemaker_session, LocalSession)
    assert est.plan(job_name="j").OutputDataConfig.S3OutputPath == (tmp_path / "home" / "jobs").as_uri() + "/"
    from smlaunch.sdk.sessions.sagemaker import Session

    est = remote(src, session=None, sagemaker_session=None)
    assert isinstance(est.sagemaker_session, Session)


def test_network_isolation_code_channel(src: Path) -> None:
    spec = remote(src, enable_network_isolation=True).plan("s3://b-1/t", job_name="j")
    assert spec.HyperParameters["sagemaker_submit_directory"] == '"/opt/ml/input/data/code/sourcedir.tar.gz"'
    assert [c.ChannelName for c in spec.InputDataConfig or []] == ["training", "code"]


# --- attach ---------------------------------------------------------------------------------------


def test_attach_restores_distribution_and_metrics(src: Path, tmp_path: Path) -> None:
    metrics = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    distribution = {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}},
        "mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-v"},
    }
    est = local(
        src,
        tmp_path,
        instance_type="ml.p3.16xlarge",
        distribution=distribution,
        metric_definitions=metrics,
        hyperparameters={"lr": 0.1, "layers": [1, 2]},
        base_job_name="smp-run",
        max_run=100,
    )
    est.fit(job_name="smp-run-2026-11-22-02-27-47-316", wait=False)
    session = est.sagemaker_session
    attached = PyTorch.attach("smp-run-2026-11-22-02-27-47-316", sagemaker_session=session)
    assert attached.distribution == est.distribution == distribution
    assert attached.metric_definitions == metrics
    assert attached.hyperparameters() == {"lr": 0.1, "layers": [1, 2]}
    assert (attached.framework_version, attached.py_version) == ("2.1.0", "py310")
    assert (attached.instance_type, attached.instance_count, attached.max_run) == ("ml.p3.16xlarge", 1, 100)
    assert attached.base_job_name == "smp-run" and attached.entry_point == "train.py"
    assert attached.latest_training_job is not None
    assert attached.model_data.endswith("/smp-run-2026-11-22-02-27-47-316/output/model.tar.gz")
    # Re-planning the attached estimator gives the same request.
    again = attached.plan(job_name="smp-run-2026-11-22-02-27-47-316")
    original = session.recording.jobs["smp-run-2026-11-22-02-27-47-316"]
    assert again.HyperParameters == original.HyperParameters
    # fit() handed the backend the distribution's strategy beside the spec.
    assert session.recording.strategies["smp-run-2026-11-22-02-27-47-316"] is Strategy.MODELPARALLEL


def test_attach_sagemaker_image(src: Path) -> None:
    session = FakeSageMakerSession()
    est = remote(
        src,
        session,
        distribution={"torch_distributed": {"enabled": True}},
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
    )
    spec = est.plan(job_name="td-1")
    session.recording.submit(JobRequest(spec, Strategy.TORCH_DISTRIBUTED))
    attached = PyTorch.attach("td-1", sagemaker_session=session)
    assert attached.distribution == {"torch_distributed": {"enabled": True}}
    assert attached.plan(job_name="td-1").to_request() == spec.to_request()


# --- bad input ------------------------------------------------------------------------------------


def test_unknown_instance_type(src: Path) -> None:
    err = config_error(lambda: remote(src, instance_type="ml.p3.2xlarg"))
    assert err.field == "instance_type" and "ml.p3.2xlarge" in str(err)


@pytest.mark.parametrize("count", [0, -1, "2", None, True])
def test_instance_count(src: Path, count: Any) -> None:
    err = config_error(lambda: remote(src, instance_count=count))
    assert err.field == "instance_count" and err.value == count and ">= 1" in str(err)


def test_distribution_typo(src: Path) -> None:
    err = config_error(lambda: remote(src, distribution={"torch_distributed": {"enable": True}}))
    assert err.field == "distribution.torch_distributed.enable" and "did you mean 'enabled'" in str(err)


def test_entry_point_missing_or_not_in_source_dir(src: Path, tmp_path: Path) -> None:
    err = config_error(lambda: remote(src, entry_point=None))
    assert err.field == "entry_point"
    err = config_error(lambda: remote(src, entry_point="nope.py"))
    assert err.field == "entry_point" and err.value == "nope.py" and str(src) in str(err)
    err = config_error(lambda: remote(None, entry_point=str(tmp_path / "absent.py"), source_dir=None))
    assert "no such file" in str(err)


def test_hyperparameters_bad(src: Path) -> None:
    err = config_error(lambda: remote(src, hyperparameters={"fn": print}))
    assert err.field == "hyperparameters['fn']"
    err = config_error(lambda: remote(src, hyperparameters={f"k{i}": i for i in range(101)}))
    assert "at most 100" in str(err)
    # 96 user keys pass alone but not with the 5 script-mode keys added at plan time.
    est = remote(src, hyperparameters={f"k{i}": i for i in range(96)})
    assert "at most 100" in str(config_error(lambda: est.plan(job_name="j")))
    err = config_error(lambda: remote(src, hyperparameters={"v": "x" * 3000}))
    assert "2500" in str(err)


def test_unreadable_source_dir(src: Path, tmp_path: Path) -> None:
    err = config_error(lambda: remote(src, source_dir=str(tmp_path / "missing")))
    assert err.field == "source_dir" and "no such directory" in str(err)
    err = config_error(lambda: remote(src, source_dir=str(src / "train.py")))
    assert "not a directory" in str(err)


def test_bad_channels_and_uris(src: Path) -> None:
    est = remote(src)
    err = config_error(lambda: est.plan({"bad name": "s3://b-1/x"}))
    assert "channel name" in err.field and err.value == "bad name"
    err = config_error(lambda: est.plan({"train": "s3://Bad_Bucket/x"}))
    assert err.field == "inputs['train']" and "malformed S3 URI" in str(err)
    err = config_error(lambda: est.plan({"train": TrainingInput("s3:/b-1/x")}))
    assert err.field == "inputs['train']"
    err = config_error(lambda: remote(src, output_path="s3://x/out"))
    assert err.field == "output_path"
    err = config_error(lambda: remote(src, output_path="file:///tmp/out"))
    assert "only for local runs" in str(err)
    err = config_error(lambda: est.plan(job_name="bad_name"))
    assert err.field == "job_name"


def test_incompatible_distributions(src: Path) -> None:
    err = config_error(
        lambda: remote(
            src,
            instance_type="ml.p3.16xlarge",
            distribution={"mpi": {"enabled": True, "processes_per_host": 16}},
        )
    )
    assert err.field == "distribution.mpi.processes_per_host"
    err = config_error(
        lambda: remote(
            src,
            instance_type="ml.c5.xlarge",
            distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        )
    )
    assert "needs GPUs" in str(err)
    err = config_error(
        lambda: remote(
            src, instance_type="ml.c5.xlarge", distribution={"torch_distributed": {"enabled": True}}
        )
    )
    assert "GPU instance types" in str(err)
    err = config_error(
        lambda: remote(
            src,
            framework_version="2.3.0",
            py_version="py311",
            instance_type="ml.p4d.24xlarge",
            distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        )
    )
    assert err.field == "framework_version" and "2.2.0" in str(err)
    err = config_error(
        lambda: remote(
            src,
            framework_version="1.12.0",
            py_version="py38",
            distribution={"torch_distributed": {"enabled": True}},
        )
    )
    assert err.field == "framework_version"


def test_local_relaxations(src: Path, tmp_path: Path) -> None:
    # torch_distributed on a CPU type, spot and checkpoints: for the backend to accept or refuse.
    est = local(
        src,
        tmp_path,
        instance_type="ml.c5.xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
        use_spot_instances=True,
        checkpoint_s3_uri=(tmp_path / "ckpt").as_uri(),
    )
    spec = est.plan(job_name="j")
    assert spec.EnableManagedSpotTraining is True and spec.CheckpointConfig is not None
    with pytest.raises(UnsupportedByBackendError, match="checkpoints not supported"):
        est.fit(job_name="j")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"instance_type": "local"}, "instance_type"),
        ({"role": None}, "role"),
        ({"subnets": ["s-1"]}, "security_group_ids"),
        ({"max_wait": 100}, "max_wait"),
        ({"use_spot_instances": True}, "max_wait"),
        ({"use_spot_instances": True, "max_wait": 10, "max_run": 100}, "max_wait"),
        ({"checkpoint_local_path": "/opt/ml/checkpoints"}, "checkpoint_local_path"),
        ({"framework_version": "0.9"}, "framework_version"),
        ({"py_version": "py3"}, "py_version"),
        ({"framework_version": None}, "framework_version"),
        ({"input_mode": "file"}, "input_mode"),
        ({"max_run": 0}, "max_run"),
        ({"environment": {"A": 1}}, "environment['A']"),
        ({"metric_definitions": [{"Name": "x", "Regex": "("}]}, "metric_definitions[0].Regex"),
        ({"tags": [{"key": "a"}]}, "tags"),
        ({"base_job_name": "bad_base"}, "base_job_name"),
        ({"max_retry_attempts": 0}, "max_retry_attempts"),
        ({"entry_point": "run.sh", "distribution": {"torch_distributed": {"enabled": True}}}, "entry_point"),
    ],
)
def test_construction_errors(src: Path, kwargs: dict[str, Any], field: str) -> None:
    if kwargs.get("entry_point") == "run.sh":
        (src / "run.sh").write_text("")
    err = config_error(lambda: remote(src, **kwargs))
    assert err.field == field


def test_prebuilt_code_uris(src: Path) -> None:
    spec = remote(src, source_dir="s3://b-1/code/sourcedir.tar.gz").plan(job_name="j")
    assert spec.HyperParameters["sagemaker_submit_directory"] == '"s3://b-1/code/sourcedir.tar.gz"'
    assert "must name a .tar.gz" in str(config_error(lambda: remote(src, source_dir="s3://b-1/code/")))
    assert "only for local runs" in str(config_error(lambda: remote(src, source_dir="file:///x/s.tar.gz")))


def test_output_path_not_writable(src: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    err = config_error(lambda: local(src, tmp_path, output_path=(blocker / "out").as_uri()))
    assert err.field == "output_path" and "not writable" in str(err)
    est = local(src, tmp_path, output_path=str(tmp_path / "new" / "out"))  # created later, by the backend
    assert est.output_path == (tmp_path / "new" / "out").as_uri()
    spec = est.plan(job_name="j")
    assert (
        json.loads(spec.HyperParameters["sagemaker_submit_directory"])
        == (tmp_path / "new" / "out").as_uri() + "/j/source/sourcedir.tar.gz"
    )


# --- TensorBoard output ------------------------------------------------------------------------------


def test_tensorboard_output_config_is_sent_as_the_sdk_sends_it(src: Path) -> None:
    from smlaunch import TensorBoardOutputConfig

    spec = remote(src, tensorboard_output_config=TensorBoardOutputConfig("s3://b-1/run/tb")).plan(
        job_name="j"
    )
    assert spec.to_request()["TensorBoardOutputConfig"] == {"S3OutputPath": "s3://b-1/run/tb"}  # no LocalPath
    spec = remote(
        src, tensorboard_output_config=TensorBoardOutputConfig("s3://b-1/run/tb", "/opt/ml/output/tb")
    ).plan(job_name="j")
    assert spec.to_request()["TensorBoardOutputConfig"] == {
        "S3OutputPath": "s3://b-1/run/tb",
        "LocalPath": "/opt/ml/output/tb",
    }
    assert "TensorBoardOutputConfig" not in remote(src).plan(job_name="j").to_request()


def test_tensorboard_output_config_local_paths_and_attach(src: Path, tmp_path: Path) -> None:
    from smlaunch import TensorBoardOutputConfig

    est = local(src, tmp_path, tensorboard_output_config=TensorBoardOutputConfig(str(tmp_path / "tb")))
    spec = est.plan(job_name="tb-1")
    assert spec.TensorBoardOutputConfig is not None
    assert spec.TensorBoardOutputConfig.S3OutputPath == (tmp_path / "tb").as_uri()  # a path becomes file://
    est.fit(job_name="tb-1", wait=False)
    attached = PyTorch.attach("tb-1", sagemaker_session=est.sagemaker_session)
    assert attached.plan(job_name="tb-1").TensorBoardOutputConfig == spec.TensorBoardOutputConfig


@pytest.mark.parametrize(
    ("build", "field", "problem"),
    [
        (lambda: "s3://b-1/tb", "tensorboard_output_config", "must be a TensorBoardOutputConfig"),
        (
            lambda: _tensorboard("file:///tmp/tb"),
            "tensorboard_output_config.s3_output_path",
            "only for local runs",
        ),
        (lambda: _tensorboard("b-1/tb"), "tensorboard_output_config.s3_output_path", "must start with s3://"),
        (lambda: _tensorboard(""), "tensorboard_output_config.s3_output_path", "must be a URI string"),
        (
            lambda: _tensorboard("s3://b-1/tb", "tb"),
            "tensorboard_output_config.container_local_output_path",
            "must be an absolute path",
        ),
    ],
)
def test_tensorboard_output_config_errors(src: Path, build: Any, field: str, problem: str) -> None:
    err = config_error(lambda: remote(src, tensorboard_output_config=build()))
    assert err.field == field and problem in str(err)


def test_a_metric_regex_without_a_capture_group_is_refused_at_construction(src: Path, tmp_path: Path) -> None:
    # The scraper takes the value from the first group: without one, no value would ever be found.
    err = config_error(
        lambda: local(src, tmp_path, metric_definitions=[{"Name": "loss", "Regex": "loss=[0-9.]+"}])
    )
    assert str(err) == (
        "metric_definitions[0].Regex='loss=[0-9.]+': has no capture group."
        " Fix: put the value in parentheses, e.g. 'loss=([0-9.]+)'"
    )


@pytest.mark.parametrize("field", ["output_path", "checkpoint_s3_uri", "code_location"])
def test_a_mistyped_s3_uri_is_not_taken_for_a_local_directory(src: Path, tmp_path: Path, field: str) -> None:
    # Locally a relative path is a directory: "s3//bucket/out" would quietly become ./s3/bucket/out.
    err = config_error(lambda: local(src, tmp_path, **{field: "s3//bucket/out"}).plan())
    assert str(err) == (
        f"{field}='s3//bucket/out': reads as an S3 URI without its ':', and would be taken as the"
        " local directory s3/. Fix: write s3://bucket/out, or ./s3//bucket/out if a local directory"
        " named s3 is meant"
    )


def _tensorboard(uri: str, local_path: str | None = None) -> Any:
    from smlaunch import TensorBoardOutputConfig

    return TensorBoardOutputConfig(uri, local_path)
