"""Creating a job's objects (:mod:`smlaunch.sdk.backends.kubernetes.jobs`): a pod refused because
its new ServiceAccount has no token yet is created again (clusters before 1.24), any other refusal
is raised at once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from smlaunch.sdk.backends.kubernetes.jobs import create_retrying

NO_TOKEN = {
    "kind": "Status",
    "status": "Failure",
    "reason": "ServerTimeout",
    "code": 500,
    "message": 'No API token found for service account "job-agent", retry after the token is '
    "automatically created and added to the service account",
}


def refusal(status: int, body: dict[str, Any]) -> ApiException:
    error = ApiException(status=status, reason="refused")
    error.body = json.dumps(body)
    return error


class Creator:
    """Refuses with ``errors`` first, then creates."""

    def __init__(self, *errors: ApiException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, namespace: str, body: Any) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return f"{namespace}/{body['metadata']['name']}"


BODY = {"kind": "Pod", "metadata": {"name": "job-agent"}}


def test_a_pod_refused_for_a_missing_token_is_created_once_the_token_exists() -> None:
    create, slept = Creator(refusal(500, NO_TOKEN), refusal(500, NO_TOKEN)), []
    assert create_retrying(create, "ns", BODY, sleep=slept.append) == "ns/job-agent"
    assert create.calls == 3 and len(slept) == 2


def test_other_refusals_are_raised_at_once() -> None:
    forbidden = refusal(403, {"reason": "Forbidden", "message": "pods is forbidden"})
    create = Creator(forbidden)
    with pytest.raises(ApiException) as raised:
        create_retrying(create, "ns", BODY, sleep=lambda _: None)
    assert raised.value is forbidden and create.calls == 1
    timeout = refusal(500, {"reason": "ServerTimeout", "message": "the server is busy"})
    with pytest.raises(ApiException):
        create_retrying(Creator(timeout), "ns", BODY, sleep=lambda _: None)


def test_the_token_is_waited_for_a_bounded_time() -> None:
    create = Creator(*[refusal(500, NO_TOKEN)] * 5)
    with pytest.raises(ApiException):
        create_retrying(create, "ns", BODY, wait_seconds=0, sleep=lambda _: None)
    assert create.calls == 1
