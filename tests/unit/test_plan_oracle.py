"""Oracle: our ``plan()`` equals the CreateTrainingJob request of the real SageMaker SDK v2.

For each configuration the real ``sagemaker.pytorch.PyTorch(...).fit(inputs, wait=False,
job_name=...)`` runs against moto (S3 bucket creation and code upload happen for real); the
keyword arguments of ``create_training_job`` are captured with a botocore
``provide-client-params`` hook. Our ``PyTorch(...).plan(inputs, job_name=...)`` with the same
arguments must give the same dict, field by field. The job name is pinned, so no timestamp
differs. Deliberate differences are listed in ``DELIBERATE_DIFFERENCES`` and asserted exactly, so
an unlisted difference fails.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
sagemaker = pytest.importorskip("sagemaker")
moto = pytest.importorskip("moto")

import boto3  # noqa: E402
from sagemaker.pytorch import PyTorch as SdkPyTorch  # noqa: E402

from smlaunch import PyTorch  # noqa: E402
from tests.unit._sdk_under_moto import sdk_session  # noqa: E402

REGION = "us-west-2"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerRole"
BUCKET = f"sagemaker-{REGION}-{ACCOUNT}"
HPS = {"epochs": 10, "batch_size": 32, "lr": 3e-5, "gamma": 0.7}
MP = {
    "partitions": 4,
    "placement_strategy": "spread",
    "pipeline": "interleaved",
    "optimize": "speed",
    "ddp": True,
    "microbatches": 4,
}


class FakeSageMakerSession:
    """What our estimator asks of a SageMaker session, offline."""

    is_local = False
    instance_count_quota = None
    sagemaker_config: dict[str, Any] = {}  # no config.yaml defaults
    processes_per_host = None
    region_name = REGION

    def default_output_path(self) -> str:
        return f"s3://{BUCKET}/"

    def expand_role(self, role: str | None) -> str:
        assert role
        return role

    def backend(self) -> Any:
        raise AssertionError("plan() must not need a backend")

    def s3_client(self) -> Any:
        raise AssertionError("plan() must not touch S3")

    def bucket_owner_args(self, bucket: str) -> dict[str, str]:
        raise AssertionError("plan() must not write to S3")

    def stage_local_input(self, path: str, job_name: str, channel: str) -> str:
        raise AssertionError("plan() must not stage inputs")


CASES: dict[str, dict[str, Any]] = {
    "single_1.8.0_py3": dict(
        instance_type="ml.p3.2xlarge", instance_count=1, framework_version="1.8.0", py_version="py3"
    ),
    "single_2.1.0_py310": dict(
        instance_type="ml.p3.2xlarge", instance_count=1, framework_version="2.1.0", py_version="py310"
    ),
    "smddp_2x_p3.16xlarge": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="1.8.0",
        py_version="py3",
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
    ),
    "modelparallel_mpi_ppn8": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=1,
        framework_version="1.8.0",
        py_version="py3",
        distribution={
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": MP}},
            "mpi": {"enabled": True, "processes_per_host": 8},
        },
    ),
    "mpi_ppn2_2x": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="1.8.0",
        py_version="py3",
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
    ),
    "torch_distributed_2x_p4d": dict(
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
    ),
    "custom_mpi_options": dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="1.8.0",
        py_version="py3",
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 4,
                "custom_mpi_options": "-verbose -x NCCL_DEBUG=INFO",
            }
        },
    ),
    "smddp_custom_options": dict(
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-verbose"}}},
    ),
    "every_json_type": dict(
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        framework_version="2.2.0",
        py_version="py310",
        hyperparameters={
            "int": 10,
            "float": 3e-5,
            "neg": -1.5,
            "str": "a b",
            "quote": 'say "hi"',
            "true": True,
            "false": False,
            "none": None,
            "list": [1, "two", 3.0],
            "dict": {"a": 1, "b": [True, None]},
            "unicode": "héllo",
        },
    ),
    "cpu_and_options": dict(
        instance_type="ml.c5.xlarge",
        instance_count=3,
        framework_version="2.0.1",
        py_version="py310",
        output_path="s3://out-bucket/prefix/out",
        code_location="s3://code-bucket/codeprefix",
        base_job_name="bert-finetune",
        max_run=3600,
        volume_size=50,
        input_mode="FastFile",
        environment={"NCCL_DEBUG": "INFO"},
        tags=[{"Key": "team", "Value": "ml"}],
        metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        use_spot_instances=True,
        max_wait=7200,
        checkpoint_s3_uri="s3://ckpt-bucket/run1",
        checkpoint_local_path="/opt/ml/checkpoints",
        subnets=["subnet-1"],
        security_group_ids=["sg-1"],
        enable_network_isolation=True,
        encrypt_inter_container_traffic=True,
        max_retry_attempts=2,
        disable_output_compression=True,
        output_kms_key="kms-key-1",
        container_log_level=10,
        volume_kms_key="vol-key",
    ),
    # Types the catalog learned from botocore: the request is the SDK's for each of them.
    "g6e_torch_distributed_2x": dict(
        instance_type="ml.g6e.12xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
    ),
    "p5_4xlarge_single_gpu": dict(
        instance_type="ml.p5.4xlarge", instance_count=1, framework_version="2.2.0", py_version="py310"
    ),
    "m7i_cpu": dict(
        instance_type="ml.m7i.2xlarge", instance_count=2, framework_version="2.1.0", py_version="py310"
    ),
    "trn1_torch_distributed": dict(
        instance_type="ml.trn1.32xlarge",
        instance_count=2,
        framework_version="1.13.1",
        py_version="py38",
        image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:1.13.1-neuronx-py38",
        distribution={"torch_distributed": {"enabled": True}},
    ),
    "warm_pool_keep_alive": dict(
        instance_type="ml.g5.2xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        keep_alive_period_in_seconds=1800,
    ),
    "metrics_off_old_version": dict(
        instance_type="ml.m5.large", instance_count=1, framework_version="1.2.0", py_version="py3"
    ),
}

INPUTS: dict[str, Any] = {"default": {"training": "s3://my-bucket/data/train"}}

# case -> (key path, SDK value, our value). Anything else must be equal.
DELIBERATE_DIFFERENCES: dict[str, list[tuple[tuple[str, ...], Any, Any]]] = {}


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("code") / "src"
    (root / "utils").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "requirements.txt").write_text("")
    (root / "utils" / "helpers.py").write_text("X = 1\n")
    return root


@pytest.fixture(scope="module")
def sdk_capture():
    """A function running the real SDK's fit(wait=False) under moto and returning the request."""
    with sdk_session(
        REGION, "CreateTrainingJob", ("my-bucket", "out-bucket", "code-bucket", "ckpt-bucket")
    ) as (sm_session, captured):

        def run(
            kwargs: dict[str, Any], inputs: Any, job_name: str, sdk_class: Any = SdkPyTorch, **fit_kwargs: Any
        ) -> dict[str, Any]:
            captured.clear()
            # The SDK adds its sagemaker_* keys to the hyperparameters dict it was given: give it a copy.
            kwargs = copy.deepcopy(kwargs)
            estimator = sdk_class(role=ROLE, sagemaker_session=sm_session, **kwargs)
            estimator.fit(inputs, wait=False, job_name=job_name, **fit_kwargs)
            run.estimator = estimator  # type: ignore[attr-defined]  # for the attribute oracles
            assert len(captured) == 1
            return captured[0]

        run.session = sm_session  # type: ignore[attr-defined]  # to build SDK estimators without fit
        yield run


def _ours(kwargs: dict[str, Any], inputs: Any, job_name: str) -> dict[str, Any]:
    estimator = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
    return estimator.plan(inputs, job_name=job_name).to_request()


def _normalise(request: dict[str, Any]) -> Any:
    return json.loads(json.dumps(request, sort_keys=True))


def _differences(sdk: Any, ours: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, Any]]:
    if isinstance(sdk, dict) and isinstance(ours, dict):
        found = []
        for key in sorted(set(sdk) | set(ours)):
            found += _differences(sdk.get(key, "<absent>"), ours.get(key, "<absent>"), (*path, key))
        return found
    return [] if sdk == ours else [(path, sdk, ours)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_equals_sdk_request(case: str, src: Path, sdk_capture: Any) -> None:
    kwargs = {**CASES[case], "entry_point": "train.py", "source_dir": str(src)}
    kwargs.setdefault("hyperparameters", HPS)
    job_name = f"oracle-{case.replace('_', '-').replace('.', '-')}"[:50]
    inputs = INPUTS["default"]
    sdk_raw, ours_raw = sdk_capture(kwargs, inputs, job_name), _ours(kwargs, inputs, job_name)
    sdk, ours = _normalise(sdk_raw), _normalise(ours_raw)
    assert _differences(sdk, ours) == DELIBERATE_DIFFERENCES.get(case, [])
    # The hyperparameter order is part of the wire format (user keys, script-mode keys, distribution).
    assert list(sdk_raw["HyperParameters"]) == list(ours_raw["HyperParameters"])


def test_training_input_channels_equal_sdk(src: Path, sdk_capture: Any) -> None:
    from sagemaker.inputs import ShuffleConfig as SdkShuffle
    from sagemaker.inputs import TrainingInput as SdkInput

    from smlaunch import ShuffleConfig, TrainingInput

    fields = dict(
        distribution="ShardedByS3Key",
        compression="Gzip",
        content_type="text/csv",
        record_wrapping="RecordIO",
        s3_data_type="ManifestFile",
        input_mode="Pipe",
        attribute_names=["source-ref", "class"],
    )
    sdk_inputs = {
        "train": SdkInput("s3://my-bucket/train.manifest", shuffle_config=SdkShuffle(7), **fields),
        "val": SdkInput("s3://my-bucket/val"),
        "test": "s3://my-bucket/test",
    }
    our_inputs = {
        "train": TrainingInput("s3://my-bucket/train.manifest", shuffle_config=ShuffleConfig(7), **fields),
        "val": TrainingInput("s3://my-bucket/val"),
        "test": "s3://my-bucket/test",
    }
    kwargs = {**CASES["single_2.1.0_py310"], "entry_point": "train.py", "source_dir": str(src)}
    sdk = _normalise(sdk_capture(kwargs, sdk_inputs, "oracle-channels"))
    ours = _normalise(_ours(kwargs, our_inputs, "oracle-channels"))
    assert _differences(sdk, ours) == []
    assert sdk_inputs["train"].config == our_inputs["train"].config


def test_pytorchddp_is_the_documented_difference(src: Path, sdk_capture: Any) -> None:
    """The SDK rewrites pytorchddp to smddp; we keep sagemaker_pytorch_ddp_enabled (DESIGN §4)."""
    kwargs = dict(
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"pytorchddp": {"enabled": True}},
        entry_point="train.py",
        source_dir=str(src),
        hyperparameters=HPS,
    )
    sdk = _normalise(sdk_capture(kwargs, INPUTS["default"], "oracle-pytorchddp"))
    ours = _normalise(_ours(kwargs, INPUTS["default"], "oracle-pytorchddp"))
    hp = ("HyperParameters",)
    assert _differences(sdk, ours) == [
        ((*hp, "sagemaker_distributed_dataparallel_custom_mpi_options"), '""', "<absent>"),
        ((*hp, "sagemaker_distributed_dataparallel_enabled"), "true", "<absent>"),
        ((*hp, "sagemaker_pytorch_ddp_enabled"), "<absent>", "true"),
    ]


def test_no_inputs_and_default_job_name_shape(src: Path, sdk_capture: Any) -> None:
    kwargs = {**CASES["single_1.8.0_py3"], "entry_point": "train.py", "source_dir": str(src)}
    sdk = _normalise(sdk_capture(kwargs, None, "oracle-no-inputs"))
    ours = _normalise(_ours(kwargs, None, "oracle-no-inputs"))
    assert _differences(sdk, ours) == []
    generated = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs).plan().TrainingJobName
    assert generated.startswith("pytorch-training-") and len(generated) == len("pytorch-training-") + 23


def test_plan_prints_the_request_as_json(src: Path) -> None:
    kwargs = {**CASES["torch_distributed_2x_p4d"], "entry_point": "train.py", "source_dir": str(src)}
    spec = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs).plan(
        INPUTS["default"], job_name="printed"
    )
    assert json.loads(str(spec)) == spec.to_request()
    assert str(spec).startswith('{\n  "TrainingJobName": "printed"')
    assert spec.ResourceConfig.InstanceType == "ml.p4d.24xlarge"  # attributes still read
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(spec) == str(spec)  # a notebook cell ending in est.plan() shows the JSON


@pytest.mark.parametrize(
    "distribution",
    [
        None,
        {"mpi": {"enabled": True, "processes_per_host": 4, "custom_mpi_options": "-verbose"}},
        {"smdistributed": {"dataparallel": {"enabled": True}}},
    ],
)
def test_sdk_v2_attributes_equal_sdk(
    src: Path,
    sdk_capture: Any,
    distribution: dict[str, Any] | None,
) -> None:
    """``distribution`` (the dict as passed), ``enable_network_isolation()`` (a method) and
    ``latest_training_job.job_name`` read as they do on the SDK's estimator."""
    from tests.unit.test_estimator import FakeSageMakerSession as RecordingSession

    kwargs: dict[str, Any] = dict(
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="1.8.0",
        py_version="py3",
        entry_point="train.py",
        source_dir=str(src),
        enable_network_isolation=True,
        keep_alive_period_in_seconds=600,
    )
    if distribution is not None:
        kwargs["distribution"] = distribution
    sdk_capture(kwargs, INPUTS["default"], "attributes-job")
    sdk = sdk_capture.estimator
    session = RecordingSession(s3=boto3.client("s3", region_name=REGION))
    session.recording.capabilities = session.recording.capabilities.model_copy(
        update={"network_isolation": True}
    )
    ours = PyTorch(role=ROLE, sagemaker_session=session, **kwargs)
    ours.fit(INPUTS["default"], wait=False, job_name="attributes-job")
    assert ours.distribution == sdk.distribution == (distribution or {})
    assert ours.enable_network_isolation() is sdk.enable_network_isolation() is True
    assert ours.keep_alive_period_in_seconds == sdk.keep_alive_period_in_seconds == 600
    assert ours.latest_training_job is not None
    assert ours.latest_training_job.job_name == sdk.latest_training_job.job_name == "attributes-job"


@pytest.mark.parametrize(
    "experiment_config",
    [
        {"ExperimentName": "bert-finetune", "TrialName": "lr-3e-5"},
        {
            "ExperimentName": "bert-finetune",
            "TrialName": "lr-3e-5",
            "TrialComponentDisplayName": "epoch-10",
            "RunName": "run-7",
        },
        {},
    ],
)
def test_experiment_config_equals_sdk(src: Path, sdk_capture: Any, experiment_config: dict[str, str]) -> None:
    kwargs = {**CASES["single_2.1.0_py310"], "entry_point": "train.py", "source_dir": str(src)}
    sdk = _normalise(
        sdk_capture(kwargs, INPUTS["default"], "experiment-job", experiment_config=experiment_config)
    )
    spec = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs).plan(
        INPUTS["default"], job_name="experiment-job", experiment_config=experiment_config
    )
    assert _differences(sdk, _normalise(spec.to_request())) == []
    assert ("ExperimentConfig" in sdk) is bool(experiment_config)
