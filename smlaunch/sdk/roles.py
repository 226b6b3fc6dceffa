"""How ``get_execution_role()`` (the first cell of most SageMaker notebooks, on every session; in
:mod:`smlaunch.sdk.sessions.sagemaker`, as the SDK's is in ``sagemaker.session``) finds the role.

With a SageMaker :class:`~smlaunch.sdk.sessions.sagemaker.Session` it resolves the role as SDK v2's
``sagemaker.get_execution_role`` and ``Session.get_caller_identity_arn`` do (2.257.x):

1. on a SageMaker notebook instance or Studio, the role of ``/opt/ml/metadata/resource-metadata.json``
   (its ``ExecutionRoleArn``, else the notebook instance's, the user profile's or the domain's);
2. else the caller's STS identity: an assumed role (``arn:aws:sts::<account>:assumed-role/<name>/<session>``)
   becomes its IAM role ARN, path included (IAM ``GetRole``; when that is denied, a name holding
   ``AmazonSageMaker-ExecutionRole`` is assumed to be under ``service-role/``, as the SDK assumes);
3. an identity that is not a role (an IAM user) is refused with a ``ValueError`` unless
   ``use_default``, which creates (or reuses) ``AmazonSageMaker-DefaultRole`` as the SDK does.

Locally (a ``LocalSession``, or no session and no AWS credentials) no role is needed: it returns a
placeholder ARN, and says so once per process, so the notebook's next cells run unchanged.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from smlaunch.sdk.backends.sagemaker.credentials import aws_errors
from smlaunch.sdk.sessions.local import PLACEHOLDER_ROLE_ARN

logger = logging.getLogger(__name__)

NOTEBOOK_METADATA_FILE = "/opt/ml/metadata/resource-metadata.json"
"""Where SageMaker notebook instances and Studio describe themselves (the SDK's constant)."""
DEFAULT_ROLE_NAME = "AmazonSageMaker-DefaultRole"
_DEFAULT_ROLE_POLICY = "arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"
_DEFAULT_ROLE_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": ["sagemaker.amazonaws.com"]},
            "Action": "sts:AssumeRole",
        }
    ],
}
_ASSUMED_ROLE = re.compile(r"^(.+)sts::(\d+):assumed-role/(.+?)/.*$")


class RoleClients(Protocol):
    """What resolving the role reads of a SageMaker session: its boto3 clients."""

    def sts_client(self) -> Any: ...

    def iam_client(self) -> Any: ...

    def sagemaker_client(self) -> Any: ...


def placeholder_role(why: str) -> str:
    """The placeholder role ARN for local jobs, saying ``why`` once per process."""
    _note_once(why)
    return PLACEHOLDER_ROLE_ARN


@functools.cache
def _note_once(why: str) -> None:
    logger.warning(
        "get_execution_role(): %s, so it returns the placeholder role %s (local jobs need no role; "
        "pass a real role ARN to run on SageMaker).",
        why,
        PLACEHOLDER_ROLE_ARN,
    )


def caller_identity_arn(session: RoleClients) -> str:
    """SDK v2's ``Session.get_caller_identity_arn``: the role (or user) ARN whose credentials the
    session uses (the notebook's :data:`NOTEBOOK_METADATA_FILE` first, where it exists)."""
    metadata_path = Path(NOTEBOOK_METADATA_FILE)
    if metadata_path.exists():
        role = _notebook_role(session, json.loads(metadata_path.read_bytes()))
        if role is not None:
            return role
    with aws_errors("look up the caller's identity (sts:GetCallerIdentity)"):
        assumed_role = str(session.sts_client().get_caller_identity()["Arn"])
    role = _ASSUMED_ROLE.sub(r"\1iam::\2:role/\3", assumed_role)
    role_name = role[role.rfind("/") + 1 :]
    try:
        with aws_errors(f"look up the IAM role {role_name!r}"):
            return str(session.iam_client().get_role(RoleName=role_name)["Role"]["Arn"])
    except ClientError:
        logger.warning(
            "Couldn't call 'get_role' to get Role ARN from role name %s to get Role path.", role_name
        )
        if "AmazonSageMaker-ExecutionRole" in assumed_role:
            # The SDK's guess: roles the SageMaker console creates live under service-role/.
            logger.warning(
                "Assuming role was created in SageMaker AWS console, as the name contains "
                "`AmazonSageMaker-ExecutionRole`. Defaulting to Role ARN with service-role in path."
            )
            role = _ASSUMED_ROLE.sub(r"\1iam::\2:role/service-role/\3", assumed_role)
    return role


def _notebook_role(session: RoleClients, metadata: dict[str, Any]) -> str | None:
    """The notebook instance's or Studio user's role, or None when the service will not say."""
    if metadata.get("ExecutionRoleArn") is not None:
        return str(metadata["ExecutionRoleArn"])
    client = session.sagemaker_client()
    try:
        if metadata.get("DomainId") is None:
            instance = client.describe_notebook_instance(NotebookInstanceName=metadata.get("ResourceName"))
            return str(instance["RoleArn"])
        profile = client.describe_user_profile(
            DomainId=metadata["DomainId"], UserProfileName=metadata.get("UserProfileName")
        )
        if profile.get("UserSettings", {}).get("ExecutionRole"):
            return str(profile["UserSettings"]["ExecutionRole"])
        domain = client.describe_domain(DomainId=metadata["DomainId"])
        return str(domain["DefaultUserSettings"]["ExecutionRole"])
    except ClientError:
        logger.debug("Couldn't describe the notebook %s to get its role.", metadata.get("ResourceName"))
        return None


def default_role(session: RoleClients) -> str:
    """``AmazonSageMaker-DefaultRole``, created when missing, with SageMaker's managed policy."""
    logger.warning("Using default role: %s", DEFAULT_ROLE_NAME)
    iam = session.iam_client()
    with aws_errors(f"create or reuse the IAM role {DEFAULT_ROLE_NAME}"):
        try:
            iam.get_role(RoleName=DEFAULT_ROLE_NAME)
        except iam.exceptions.NoSuchEntityException:
            iam.create_role(
                RoleName=DEFAULT_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_DEFAULT_ROLE_TRUST)
            )
            logger.warning("Created new sagemaker execution role: %s", DEFAULT_ROLE_NAME)
        iam.attach_role_policy(PolicyArn=_DEFAULT_ROLE_POLICY, RoleName=DEFAULT_ROLE_NAME)
        return str(iam.get_role(RoleName=DEFAULT_ROLE_NAME)["Role"]["Arn"])
