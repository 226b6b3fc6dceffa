"""The SageMaker SDK's ``config.yaml`` defaults, against the SDK itself (the oracle).

For each key the SDK reads for training jobs, the same config file is given to both (through
``SAGEMAKER_USER_CONFIG_OVERRIDE``): the real ``sagemaker.pytorch.PyTorch(...).fit(wait=False)``
runs against moto and its CreateTrainingJob request is captured, and ours is ``plan()`` on a real
``Session`` on the same moto. The two requests must be equal, field by field; then again with the
argument the key defaults given explicitly, which must win in both.
"""

# ruff: noqa: F811  (the test functions take the imported sdk_capture and src fixtures)

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path
from typing import Any

import boto3
import jsonschema
import pytest
import yaml

from smlaunch import LocalSession, PyTorch, Session
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import sdk_config
from tests.unit.test_plan_oracle import (  # noqa: F401  (sdk_capture and src are fixtures)
    ACCOUNT,
    INPUTS,
    ROLE,
    _differences,
    _normalise,
    sdk_capture,
    src,
)

sagemaker_config = pytest.importorskip("sagemaker.config")
sagemaker_utils = pytest.importorskip("sagemaker.utils")
from sagemaker.pytorch import PyTorch as SdkPyTorch  # noqa: E402

CONFIG_ROLE = f"arn:aws:iam::{ACCOUNT}:role/service-role/ConfigRole"
TRAINING_JOB: dict[str, Any] = {
    "RoleArn": CONFIG_ROLE,
    "OutputDataConfig": {"KmsKeyId": "cfg-output-key"},
    "ResourceConfig": {"VolumeKmsKeyId": "cfg-volume-key"},
    "VpcConfig": {"Subnets": ["subnet-cfg"], "SecurityGroupIds": ["sg-cfg"]},
    "EnableNetworkIsolation": True,
    "EnableInterContainerTrafficEncryption": True,
    "ProfilerConfig": {"DisableProfiler": True},
    "Environment": {"CFG_VAR": "from-config"},
    "Tags": [{"Key": "team", "Value": "cfg"}, {"Key": "cost-center", "Value": "cfg"}],
}
# key -> (its config section, the explicit arguments that must beat it)
KEYS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "RoleArn": ({"TrainingJob": {"RoleArn": CONFIG_ROLE}}, {"role": ROLE}),
    "OutputDataConfig.KmsKeyId": (
        {"TrainingJob": {"OutputDataConfig": TRAINING_JOB["OutputDataConfig"]}},
        {"output_kms_key": "my-output-key"},
    ),
    "ResourceConfig.VolumeKmsKeyId": (
        {"TrainingJob": {"ResourceConfig": TRAINING_JOB["ResourceConfig"]}},
        {"volume_kms_key": "my-volume-key"},
    ),
    "VpcConfig": (
        {"TrainingJob": {"VpcConfig": TRAINING_JOB["VpcConfig"]}},
        {"subnets": ["subnet-mine"], "security_group_ids": ["sg-mine"]},
    ),
    "EnableNetworkIsolation": (
        {"TrainingJob": {"EnableNetworkIsolation": True}},
        {"enable_network_isolation": False},
    ),
    "EnableInterContainerTrafficEncryption": (
        {"TrainingJob": {"EnableInterContainerTrafficEncryption": True}},
        {"encrypt_inter_container_traffic": False},
    ),
    "ProfilerConfig.DisableProfiler": (
        {"TrainingJob": {"ProfilerConfig": {"DisableProfiler": True}}},
        {"disable_profiler": False},
    ),
    "Environment": (
        {"TrainingJob": {"Environment": TRAINING_JOB["Environment"]}},
        {"environment": {"MINE": "1"}},
    ),
    "Tags": (
        {"TrainingJob": {"Tags": TRAINING_JOB["Tags"]}},
        {"tags": [{"Key": "team", "Value": "mine"}]},  # kept; cost-center still appended
    ),
    "Modules.Estimator.DebugHookConfig": (
        {"PythonSDK": {"Modules": {"Estimator": {"DebugHookConfig": False}}}},
        {"debugger_hook_config": True},
    ),
    "Modules.Session.DefaultS3Bucket": (
        {"PythonSDK": {"Modules": {"Session": {"DefaultS3Bucket": "cfg-bucket"}}}},
        {"output_path": "s3://out-bucket/mine/"},
    ),
    "Modules.Session.DefaultS3ObjectKeyPrefix": (
        {"PythonSDK": {"Modules": {"Session": {"DefaultS3ObjectKeyPrefix": "cfg/prefix"}}}},
        {"output_path": "s3://out-bucket/mine/"},
    ),
    "every key": ({"TrainingJob": TRAINING_JOB}, {}),
}
BASE = {
    "entry_point": "train.py",
    "framework_version": "2.1.0",
    "py_version": "py310",
    "instance_type": "ml.p3.2xlarge",
    "instance_count": 1,
    "hyperparameters": {"epochs": 1},
}


def _write(tmp_path: Path, section: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": section}))
    return path


def _requests(
    sdk_capture: Any, src: Path, monkeypatch: pytest.MonkeyPatch, config: Path, arguments: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the SDK's CreateTrainingJob request, our plan) for the same config file and arguments."""
    monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, str(config))
    monkeypatch.setenv(sdk_config.ADMIN_OVERRIDE_ENV, str(config.with_name("no-admin.yaml")))
    config.with_name("no-admin.yaml").write_text(yaml.safe_dump({"SchemaVersion": "1.0"}))
    kwargs = {**BASE, "source_dir": str(src), **arguments}
    job = "config-oracle"
    boto_session = sdk_capture.session.boto_session
    s3 = boto_session.client("s3")
    for bucket in ("cfg-bucket", "out-bucket"):
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})

    import sagemaker

    # The SDK re-validates the whole config against its JSON schema on every lookup (about a second
    # each on a busy machine, 20 per fit); it was validated when loaded, so lookups skip it here.
    monkeypatch.setattr(sagemaker_utils, "validate_sagemaker_config", lambda config=None: None)
    sdk_session = sagemaker.Session(boto_session=boto_session)  # loads (and validates) the files
    captured: list[dict[str, Any]] = []
    sdk_session.sagemaker_client.meta.events.register(
        "provide-client-params.sagemaker.CreateTrainingJob",
        lambda params, **_: captured.append(copy.deepcopy(params)),
    )
    SdkPyTorch(sagemaker_session=sdk_session, **copy.deepcopy(kwargs)).fit(
        INPUTS["default"], wait=False, job_name=job
    )
    ours = PyTorch(sagemaker_session=Session(boto_session=boto_session), **kwargs)
    return _normalise(captured[0]), _normalise(ours.plan(INPUTS["default"], job_name=job).to_request())


def _plain_plan(src: Path) -> dict[str, Any]:
    """Our request without any config, for the same arguments (on an empty config)."""
    session = Session(boto_session=boto3.Session(region_name="us-west-2"), sagemaker_config={})
    est = PyTorch(sagemaker_session=session, role=ROLE, **{**BASE, "source_dir": str(src)})
    return _normalise(est.plan(INPUTS["default"], job_name="config-oracle").to_request())


@pytest.mark.slow  # the SDK's fit() twice per key
@pytest.mark.parametrize("key", sorted(KEYS))
def test_each_key_as_the_sdk_resolves_it(
    key: str, sdk_capture: Any, src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section, explicit = KEYS[key]
    config = _write(tmp_path, section)
    role = {} if "RoleArn" in section.get("TrainingJob", {}) else {"role": ROLE}
    sdk, ours = _requests(sdk_capture, src, monkeypatch, config, role)
    assert _differences(sdk, ours) == []
    assert (
        sdk != _requests(sdk_capture, src, monkeypatch, _write(tmp_path, {}), {"role": ROLE})[0]
    )  # it applied
    # An explicit argument beats the config, in both.
    if explicit:
        sdk_explicit, ours_explicit = _requests(sdk_capture, src, monkeypatch, config, {**role, **explicit})
        assert _differences(sdk_explicit, ours_explicit) == []
        assert sdk_explicit != sdk


def test_no_volume_key_for_types_without_a_volume(
    sdk_capture: Any, src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _write(tmp_path, {"TrainingJob": {"ResourceConfig": TRAINING_JOB["ResourceConfig"]}})
    p4d = {"role": ROLE, "instance_type": "ml.p4d.24xlarge"}
    sdk, ours = _requests(sdk_capture, src, monkeypatch, config, p4d)
    assert _differences(sdk, ours) == [] and "VolumeKmsKeyId" not in ours["ResourceConfig"]


def test_volume_kms_support_is_the_sdks() -> None:
    from smlaunch.sdk.request import catalog

    for name in catalog.names():
        assert sdk_config.supports_volume_kms(name) is sagemaker_utils.instance_supports_kms(name), name


# --- loading ------------------------------------------------------------------------------------


def test_admin_then_user_merged_as_the_sdk_merges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = tmp_path / "admin"
    admin.mkdir()  # a directory: its config.yaml
    (admin / "config.yaml").write_text(
        yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": TRAINING_JOB}})
    )
    user = tmp_path / "user.yaml"
    user.write_text(
        yaml.safe_dump(
            {
                "SchemaVersion": "1.0",
                "SageMaker": {"TrainingJob": {"RoleArn": ROLE, "VpcConfig": {"Subnets": ["subnet-user"]}}},
            }
        )
    )
    monkeypatch.setenv(sdk_config.ADMIN_OVERRIDE_ENV, str(admin))
    monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, str(user))
    ours = sdk_config.load()
    assert ours == sagemaker_config.load_sagemaker_config()
    assert sdk_config.value(ours, "SageMaker.TrainingJob.RoleArn") == ROLE  # the user's file wins
    assert sdk_config.value(ours, "SageMaker.TrainingJob.VpcConfig") == {
        "Subnets": ["subnet-user"],
        "SecurityGroupIds": ["sg-cfg"],
    }


def test_default_locations_are_the_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDG_CONFIG_DIRS", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    from sagemaker.config import config as sdk_module

    assert sdk_config.default_locations() == (
        sdk_module._DEFAULT_ADMIN_CONFIG_FILE_PATH,
        sdk_module._DEFAULT_USER_CONFIG_FILE_PATH,
    )


def test_an_empty_file_is_no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (sdk_config.ADMIN_OVERRIDE_ENV, sdk_config.USER_OVERRIDE_ENV):
        monkeypatch.setenv(variable, os.devnull)
    assert sdk_config.load() == sagemaker_config.load_sagemaker_config() == {}


def test_an_override_naming_nothing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigurationError) as error:
        sdk_config.load()
    assert error.value.field == sdk_config.USER_OVERRIDE_ENV and error.value.fix
    with pytest.raises(ValueError):
        sagemaker_config.load_sagemaker_config()


def test_a_config_in_s3_is_read_as_the_sdk_reads_it(
    sdk_capture: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = sdk_capture.session.boto_session.client("s3")
    s3.create_bucket(Bucket="cfg-store", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    body = yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": {"RoleArn": CONFIG_ROLE}}})
    s3.put_object(Bucket="cfg-store", Key="team/config.yaml", Body=body)
    s3.put_object(Bucket="cfg-store", Key="team/README", Body="not the config")
    monkeypatch.setenv(sdk_config.ADMIN_OVERRIDE_ENV, str(_write(tmp_path, {})))
    for location in ("s3://cfg-store/team", "s3://cfg-store/team/config.yaml"):
        monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, location)
        ours = sdk_config.load(s3_client=lambda: s3)
        assert ours == sagemaker_config.load_sagemaker_config(
            s3_resource=sdk_capture.session.boto_session.resource("s3")
        )
        assert sdk_config.value(ours, "SageMaker.TrainingJob.RoleArn") == CONFIG_ROLE


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"TrainingJob": {"RoleArn": "not-an-arn"}}, "SageMaker.TrainingJob.RoleArn"),
        ({"TrainingJob": {"EnableNetworkIsolation": "yes"}}, "SageMaker.TrainingJob.EnableNetworkIsolation"),
        ({"TrainingJob": {"Environment": {"A": 1}}}, "SageMaker.TrainingJob.Environment"),
        ({"TrainingJob": {"Tags": [{"Key": "a"}]}}, "SageMaker.TrainingJob.Tags"),
    ],
)
def test_a_bad_value_names_the_file_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: dict[str, Any], field: str
) -> None:
    config = _write(tmp_path, section)
    monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, str(config))
    monkeypatch.setenv(sdk_config.ADMIN_OVERRIDE_ENV, str(config))
    with pytest.raises(ConfigurationError) as error:
        sdk_config.load()
    assert error.value.field == f"{config}: {field}"
    with pytest.raises(jsonschema.ValidationError):  # the SDK refuses it too
        sagemaker_config.load_sagemaker_config()


def test_local_sessions_take_environment_and_tags_only(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = json.loads(json.dumps({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": TRAINING_JOB}}))
    session = LocalSession(root=tmp_path / "jobs", sagemaker_config=config)
    est = PyTorch(sagemaker_session=session, **{**BASE, "instance_type": "local", "source_dir": str(src)})
    request = est.plan(job_name="local-config").to_request()
    assert request["Environment"] == {"CFG_VAR": "from-config"}
    assert request["Tags"] == TRAINING_JOB["Tags"]
    assert "VpcConfig" not in request and not request.get("EnableNetworkIsolation")
    assert request["RoleArn"] != CONFIG_ROLE and "KmsKeyId" not in request["OutputDataConfig"]
