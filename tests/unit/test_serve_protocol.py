"""``smlaunch serve``'s protocol pieces, without a server: the service model's checks, SigV4
verification and ListTrainingJobs' pagination (the real server is in tests/functional/test_serve.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.serve import auth, listing
from smlaunch.serve.validation import validate
from smlaunch.serve.wire import ServiceError

MODEL = botocore.session.get_session().get_service_model("sagemaker")


def _create(**changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingJobName": "job-1",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/R",
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 60},
    }
    request.update(changes)
    return request


def _refusal(operation: str, params: Any) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        validate(MODEL.operation_model(operation).input_shape, params)
    return caught.value


def test_a_valid_request_passes_and_unknown_members_are_ignored() -> None:
    checked = validate(MODEL.operation_model("CreateTrainingJob").input_shape, _create(Bogus=1))
    assert checked == _create()


def test_constraints_the_client_never_checks_are_the_services_messages() -> None:
    error = _refusal(
        "CreateTrainingJob",
        _create(
            TrainingJobName="bad_name!",
            ResourceConfig={"InstanceType": "ml.nope", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 0},
        ),
    )
    assert (error.code, error.status) == ("ValidationException", 400)
    assert error.message.startswith("3 validation errors detected: ")
    assert (
        "Value 'bad_name!' at 'trainingJobName' failed to satisfy constraint: Member must satisfy "
        "regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
    ) in error.message
    assert (
        "Value 'ml.nope' at 'resourceConfig.instanceType' failed to satisfy constraint: "
        "Member must satisfy enum value set: [" in error.message
    )
    assert (
        "Value '0' at 'stoppingCondition.maxRuntimeInSeconds' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1"
    ) in error.message


def test_lengths_and_missing_members() -> None:
    error = _refusal("DescribeTrainingJob", {"TrainingJobName": "a" * 64})
    assert "Member must have length less than or equal to 63" in error.message
    error = _refusal("DescribeTrainingJob", {})
    assert error.message == (
        "1 validation error detected: Value null at 'trainingJobName' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_a_wrong_json_type_is_a_serialization_exception() -> None:
    error = _refusal("ListTrainingJobs", {"MaxResults": "ten"})
    assert error.code == "SerializationException"
    error = _refusal("CreateTrainingJob", _create(ResourceConfig=[1]))
    assert error.code == "SerializationException"


def test_timestamps_are_read_as_numbers_or_iso_text() -> None:
    shape = MODEL.operation_model("ListTrainingJobs").input_shape
    checked = validate(shape, {"CreationTimeAfter": 0, "CreationTimeBefore": "2030-01-01T00:00:00Z"})
    assert checked["CreationTimeAfter"] == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert checked["CreationTimeBefore"].year == 2030


# --- SigV4 ---------------------------------------------------------------------------------------

PAIRS = auth.KeyPairs({"AKTEST": "secret-one"})
TARGET = "SageMaker.ListTrainingJobs"


def _signed(
    secret: str = "secret-one", key: str = "AKTEST", body: bytes = b"{}", when: datetime | None = None
) -> dict[str, str]:
    request = AWSRequest(
        method="POST",
        url="http://127.0.0.1:8080/",
        data=body,
        headers={
            "X-Amz-Target": TARGET,
            "Content-Type": "application/x-amz-json-1.1",
            "Host": "127.0.0.1:8080",
        },
    )
    signer = SigV4Auth(Credentials(key, secret), "sagemaker", "us-west-2")
    if when is None:
        signer.add_auth(request)
    else:
        request.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
        signer._modify_request_before_signing(request)
        canonical = signer.canonical_request(request)
        signature = signer.signature(signer.string_to_sign(request, canonical), request)
        request.headers["Authorization"] = signer._inject_signature_to_request(request, signature).headers[
            "Authorization"
        ]
    return {name.lower(): value for name, value in request.headers.items()}


def test_a_signature_made_with_the_key_pair_is_accepted() -> None:
    assert auth.verify(PAIRS, "POST", "/", _signed(), b"{}") == "AKTEST"


@pytest.mark.parametrize(
    ("headers", "body", "code"),
    [
        (lambda: {"host": "127.0.0.1:8080"}, b"{}", "MissingAuthenticationTokenException"),
        (lambda: _signed(key="AKOTHER"), b"{}", "UnrecognizedClientException"),
        (lambda: _signed(secret="wrong"), b"{}", "InvalidSignatureException"),
        (lambda: _signed(), b'{"MaxResults": 5}', "InvalidSignatureException"),  # body altered
        (
            lambda: {**_signed(), "x-amz-target": "SageMaker.StopTrainingJob"},
            b"{}",
            "InvalidSignatureException",
        ),
        (
            lambda: _signed(when=datetime.now(timezone.utc) - timedelta(minutes=20)),
            b"{}",
            "InvalidSignatureException",
        ),
    ],
)
def test_any_other_signature_is_refused_as_the_service_refuses_it(
    headers: Any, body: bytes, code: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        auth.verify(PAIRS, "POST", "/", headers(), body)
    assert caught.value.code == code
    assert "secret-one" not in caught.value.message


def test_the_key_pair_file_must_be_private_and_its_secret_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    made = auth.create_key_pair_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert auth.load_key_pairs(path) == made
    (secret,) = made.secrets.values()
    assert secret not in repr(made)
    path.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        auth.load_key_pairs(path)
    path.chmod(0o600)
    path.write_text(f"not ini {secret}\n")
    with pytest.raises(ConfigurationError) as caught:
        auth.load_key_pairs(path)
    assert secret not in str(caught.value)


# --- ListTrainingJobs ----------------------------------------------------------------------------


def _jobs(count: int) -> list[dict[str, Any]]:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [
        {
            "TrainingJobName": f"job-{i:03d}",
            "CreationTime": start + timedelta(seconds=i % 7),  # ties: the name breaks them
            "LastModifiedTime": start,
            "TrainingJobStatus": "Completed" if i % 3 else "Failed",
        }
        for i in range(count)
    ]


@pytest.mark.parametrize(
    "sort", [("CreationTime", "Ascending"), ("Name", "Descending"), ("Status", "Ascending")]
)
def test_pages_cover_every_job_once_in_order(sort: tuple[str, str]) -> None:
    jobs = _jobs(250)
    params: dict[str, Any] = {"SortBy": sort[0], "SortOrder": sort[1], "MaxResults": 100}
    seen: list[str] = []
    while True:
        answer = listing.page(jobs, params)
        seen += [j["TrainingJobName"] for j in answer["TrainingJobSummaries"]]
        if "NextToken" not in answer:
            break
        params["NextToken"] = answer["NextToken"]
    assert sorted(seen) == sorted(j["TrainingJobName"] for j in jobs) and len(seen) == 250
    key = {"CreationTime": "CreationTime", "Name": "TrainingJobName", "Status": "TrainingJobStatus"}[sort[0]]
    by_name = {j["TrainingJobName"]: j for j in jobs}
    keys = [(by_name[n][key], n) for n in seen]
    assert keys == sorted(keys, reverse=sort[1] == "Descending")


def test_filters_and_a_bad_token() -> None:
    jobs = _jobs(30)
    answer = listing.page(jobs, {"StatusEquals": "Failed", "NameContains": "JOB-01", "MaxResults": 100})
    assert sorted(j["TrainingJobName"] for j in answer["TrainingJobSummaries"]) == [
        "job-012",
        "job-015",
        "job-018",
    ]
    with pytest.raises(ServiceError, match="Invalid pagination token"):
        listing.page(jobs, {"NextToken": "garbage"})


def test_cloudwatchs_cbor_errors_and_bodies_read_as_botocore_reads_them() -> None:
    from botocore.parsers import RpcV2CBORParser
    from botocore.serialize import RpcV2CBORSerializer

    from smlaunch.serve.wire import cbor_error_body, decode_cbor

    answer = {
        "body": cbor_error_body(ServiceError("InvalidParameterValue", "bad period")),
        "headers": {},
        "status_code": 400,
    }
    parsed = RpcV2CBORParser().parse(answer, None)
    assert parsed["Error"] == {"Code": "InvalidParameterValue", "Message": "bad period"}
    model = (
        botocore.session.get_session().get_service_model("cloudwatch").operation_model("GetMetricStatistics")
    )
    sent = {
        "Namespace": "n",
        "MetricName": "m",
        "StartTime": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "Period": 60,
    }
    body = RpcV2CBORSerializer().serialize_to_request(dict(sent, EndTime=sent["StartTime"]), model)["body"]
    received = validate(model.input_shape, decode_cbor(body))
    assert received["StartTime"] == sent["StartTime"] and received["Period"] == 60
    with pytest.raises(ServiceError, match="not CBOR"):
        decode_cbor(b"\xff\xff")


def test_a_body_that_is_not_json_or_nests_without_end_is_a_serialization_exception() -> None:
    from smlaunch.serve.server import Api

    api = Api(PAIRS, {("sagemaker", "ListTrainingJobs"): lambda params: {}}, {"sagemaker": MODEL})
    for body in (b"{not json", b"[" * 100_000 + b"]" * 100_000):
        headers = _signed(body=body)
        status, answer, _ = api.call("POST", "/", headers, body)
        assert status == 400 and b"SerializationException" in answer
