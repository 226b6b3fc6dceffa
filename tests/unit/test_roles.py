"""``get_execution_role()`` against SDK v2's (the oracle) on the same moto STS/IAM/SageMaker: an
assumed role becomes its IAM role ARN (path included), an IAM user is refused unless
``use_default``, a notebook's metadata names its role; locally, a placeholder role and one note."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from smlaunch import LocalSession, Session, get_execution_role
from smlaunch.sdk import roles
from smlaunch.sdk.errors import ConfigurationError
from tests.functional._sagemaker_moto import ACCOUNT, REGION, ROLE_ARN, TRUST_POLICY, aws_test_env, fake_aws

sdk_session = pytest.importorskip("sagemaker.session")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[boto3.Session]:
    # No notebook metadata unless a test writes it, for the SDK and for us alike.
    metadata = tmp_path / "resource-metadata.json"
    monkeypatch.setattr(sdk_session, "NOTEBOOK_METADATA_FILE", str(metadata))
    monkeypatch.setattr(roles, "NOTEBOOK_METADATA_FILE", str(metadata))
    with fake_aws(monkeypatch) as fake:
        yield fake.boto_session


def _assumed(boto_session: boto3.Session, role_arn: str) -> boto3.Session:
    """A session with the credentials of ``role_arn`` assumed (as on a notebook instance)."""
    credentials = boto_session.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="notebook")
    keys = credentials["Credentials"]
    return boto3.Session(
        aws_access_key_id=keys["AccessKeyId"],
        aws_secret_access_key=keys["SecretAccessKey"],
        aws_session_token=keys["SessionToken"],
        region_name=REGION,
    )


def _both(boto_session: boto3.Session, **kwargs: Any) -> tuple[Any, Any]:
    """(the SDK's result, ours): the role ARN, or ``("ValueError", identity ARN)`` when refused."""
    results = []
    for resolve in (
        lambda: sdk_session.get_execution_role(sdk_session.Session(boto_session=boto_session), **kwargs),
        lambda: get_execution_role(Session(boto_session=boto_session), **kwargs),
    ):
        try:
            results.append(resolve())
        except ConfigurationError as error:  # ours: a ValueError naming the identity
            results.append(("ValueError", error.value))
        except ValueError as error:  # the SDK's: "The current AWS identity is not a role: <arn>, ..."
            match = re.search(r"is not a role: (\S+),", str(error))
            results.append(("ValueError", match.group(1) if match else str(error)))
    return results[0], results[1]


def test_an_iam_user_is_refused_as_by_the_sdk(aws: boto3.Session) -> None:
    identity = aws.client("sts").get_caller_identity()["Arn"]
    assert ":user/" in identity
    assert _both(aws) == (("ValueError", identity), ("ValueError", identity))
    with pytest.raises(ConfigurationError) as error:
        get_execution_role(Session(boto_session=aws))
    assert (error.value.field, error.value.value) == ("role", identity) and error.value.fix


def test_an_assumed_role_becomes_its_role_arn_with_its_path(aws: boto3.Session) -> None:
    created = aws.client("iam").create_role(
        RoleName="Trainer", Path="/teams/ml/", AssumeRolePolicyDocument=TRUST_POLICY
    )["Role"]["Arn"]
    assert created == f"arn:aws:iam::{ACCOUNT}:role/teams/ml/Trainer"
    assert _both(_assumed(aws, f"arn:aws:iam::{ACCOUNT}:role/Trainer")) == (created, created)


def test_a_console_role_iam_cannot_describe_is_guessed_under_service_role(aws: boto3.Session) -> None:
    name = "AmazonSageMaker-ExecutionRole-20260101T000000"  # assumed, but unknown to IAM here
    expected = f"arn:aws:iam::{ACCOUNT}:role/service-role/{name}"
    assert _both(_assumed(aws, f"arn:aws:iam::{ACCOUNT}:role/{name}")) == (expected, expected)


@pytest.fixture
def managed_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS's managed policies in moto's IAM (``AmazonSageMakerFullAccess``); set before ``aws``."""
    monkeypatch.setenv("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")


@pytest.mark.slow  # moto loads every AWS managed policy
def test_use_default_creates_or_reuses_the_sdks_default_role(
    managed_policies: None, aws: boto3.Session
) -> None:
    def sdk() -> str:
        return str(sdk_session.get_execution_role(sdk_session.Session(boto_session=aws), use_default=True))

    def ours() -> str:
        return get_execution_role(Session(boto_session=aws), use_default=True)

    # Ours creates the role, the SDK's reuses it, and ours reuses it too.
    arns = [ours(), sdk(), ours()]
    assert arns == [f"arn:aws:iam::{ACCOUNT}:role/AmazonSageMaker-DefaultRole"] * 3
    iam = aws.client("iam")
    policies = iam.list_attached_role_policies(RoleName="AmazonSageMaker-DefaultRole")["AttachedPolicies"]
    assert [p["PolicyArn"] for p in policies] == ["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"]
    trust = iam.get_role(RoleName="AmazonSageMaker-DefaultRole")["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": ["sagemaker.amazonaws.com"]}


def test_a_notebooks_metadata_names_its_role(aws: boto3.Session, tmp_path: Path) -> None:
    metadata = Path(roles.NOTEBOOK_METADATA_FILE)
    other = f"arn:aws:iam::{ACCOUNT}:role/service-role/StudioRole"
    metadata.write_text(json.dumps({"ResourceName": "nb-1", "ExecutionRoleArn": other}))
    assert _both(aws) == (other, other)
    # A notebook instance without ExecutionRoleArn: the instance's role, from the service.
    aws.client("sagemaker").create_notebook_instance(
        NotebookInstanceName="nb-1", InstanceType="ml.t3.medium", RoleArn=ROLE_ARN
    )
    metadata.write_text(json.dumps({"ResourceName": "nb-1"}))
    assert _both(aws) == (ROLE_ARN, ROLE_ARN)
    # One the service does not know: the caller's identity, as the SDK falls back (here a user).
    metadata.write_text(json.dumps({"ResourceName": "nb-gone"}))
    assert _both(aws)[0][0] == _both(aws)[1][0] == "ValueError"


# --- locally ------------------------------------------------------------------------------------


def test_locally_a_placeholder_role_and_one_note(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    roles._note_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.roles"):
        first = get_execution_role(LocalSession(root=tmp_path))
        again = get_execution_role(LocalSession(root=tmp_path))
    assert first == again == LocalSession(root=tmp_path).expand_role(None)
    notes = [record.getMessage() for record in caplog.records]
    assert len(notes) == 1 and "placeholder role" in notes[0] and "\n" not in notes[0]


def test_without_a_session_or_credentials_a_placeholder_role(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    aws_test_env(monkeypatch, credentials=False)
    roles._note_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.roles"):
        assert get_execution_role() == roles.PLACEHOLDER_ROLE_ARN
    assert "no AWS credentials" in caplog.text


def test_without_a_session_but_with_credentials_the_sdks_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_aws(monkeypatch) as fake:
        role = f"arn:aws:iam::{ACCOUNT}:role/Trainer"
        fake.boto_session.client("iam").create_role(RoleName="Trainer", AssumeRolePolicyDocument=TRUST_POLICY)
        keys = _assumed(fake.boto_session, role).get_credentials()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys.secret_key)
        monkeypatch.setenv("AWS_SESSION_TOKEN", keys.token)
        assert get_execution_role() == sdk_session.get_execution_role() == role
