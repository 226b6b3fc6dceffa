"""AWS credentials that are missing or rejected, as one clear error: :func:`aws_errors`.

Shared by the SageMaker session, its backend and :mod:`smlaunch.sdk.roles`, which all call AWS
through boto3 and must say the same thing when the credentials are the problem.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

from smlaunch.sdk.errors import ConfigurationError

CREDENTIALS_FIX = (
    "configure AWS credentials (`aws configure`, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY; `aws sso login` for SSO profiles), or run on this machine with "
    "sagemaker_session=LocalSession()"
)
"""What to do when the credentials are missing or rejected."""


@contextlib.contextmanager
def aws_errors(action: str) -> Iterator[None]:
    """Turn missing or unusable credentials into one clear :class:`ConfigurationError`.

    botocore reports them as ``NoCredentialsError`` with a long trace from deep inside the credential
    chain; the user needs to know only that credentials are missing and how to provide them. Other
    errors pass through unchanged.
    """
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError) as error:
        raise ConfigurationError(
            "credentials", None, f"no usable AWS credentials to {action} ({error})", CREDENTIALS_FIX
        ) from None
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in (
            "ExpiredToken",
            "ExpiredTokenException",
            "InvalidClientTokenId",
            "UnrecognizedClientException",
        ):
            raise ConfigurationError(
                "credentials",
                None,
                f"AWS rejected the credentials used to {action} ({code})",
                CREDENTIALS_FIX,
            ) from None
        raise
