"""The real SageMaker SDK (v2) against moto, capturing the request one operation sends: the oracle
side of the request tests (tests/unit/test_plan_oracle.py, test_tuner_oracle.py)."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from typing import Any

_AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN")


@contextlib.contextmanager
def sdk_session(
    region: str, operation: str, buckets: tuple[str, ...]
) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    """``(sagemaker.Session, captured)`` under ``moto.mock_aws()``: every ``operation`` call the
    session's SageMaker client makes is appended to ``captured`` (a deep copy) before moto answers.
    ``buckets`` are created first; the SDK's telemetry never reaches the network. Restores the
    environment it changed."""
    import boto3
    import moto
    import sagemaker
    import sagemaker.telemetry.telemetry_logging as telemetry

    saved_env = {k: os.environ.get(k) for k in _AWS_KEYS}
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": region}
    )
    os.environ.pop("AWS_SESSION_TOKEN", None)
    saved_helper = telemetry._requests_helper
    telemetry._requests_helper = lambda url, timeout: None  # no network from the oracle
    try:
        with moto.mock_aws():
            boto_session = boto3.Session(region_name=region)
            sm_session = sagemaker.Session(boto_session=boto_session)
            captured: list[dict[str, Any]] = []
            sm_session.sagemaker_client.meta.events.register(
                f"provide-client-params.sagemaker.{operation}",
                lambda params, **_: captured.append(copy.deepcopy(params)),
            )
            for bucket in buckets:
                boto_session.client("s3").create_bucket(
                    Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region}
                )
            yield sm_session, captured
    finally:
        telemetry._requests_helper = saved_helper
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
