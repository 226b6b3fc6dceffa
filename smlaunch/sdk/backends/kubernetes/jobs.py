"""A Kubernetes job's record and life from the notebook's side: create its objects, read its root
ConfigMap as DescribeTrainingJob, follow its log, ask it to stop.

The root ConfigMap (:mod:`.plan`) is the record: ``spec.json`` (the request), ``settings.json``
(how the agent runs it), ``state.json`` (the DescribeTrainingJob-shaped state the agent keeps),
``job.log`` (the end of the job log, once the job ended). Anything with the credentials to read it
(``attach`` on another machine, ``smlaunch describe``) sees the same job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from smlaunch import contract
from smlaunch.sdk.backends.emulated.state import JobState
from smlaunch.sdk.backends.kubernetes.client import api_error, kubernetes_module
from smlaunch.sdk.backends.kubernetes.plan import (
    AGENT_OWNED,
    LOG_KEY,
    ROLE_LABEL,
    SPEC_KEY,
    STATE_KEY,
    STOP_ANNOTATION,
    JobObjects,
    agent_name,
    owner_reference,
)
from smlaunch.sdk.backends.status import summary_lines, transition_line
from smlaunch.sdk.jobs.metrics import LOCAL_SOURCE

SETTINGS_KEY = "settings.json"
_TIME_FIELDS = ("CreationTime", "LastModifiedTime", "TrainingStartTime", "TrainingEndTime")
FOLLOW_SECONDS = 1.0
TOKEN_WAIT_SECONDS = 30.0
"""How long a pod refused for its ServiceAccount's missing token is retried (:func:`create_retrying`)."""
TOKEN_POLL_SECONDS = 0.5


def create_job(
    api: Any, objects: JobObjects, settings_for: Callable[[str], str], state: dict[str, Any]
) -> str:
    """Create ``objects`` in order (the root first, its uid into every owner reference, and
    ``settings_for(uid)`` and the first state into the root before the agent pod exists); then
    hand the agent's account and the tree Secret to the agent pod.
    Returns the root's uid. On any refusal the root is deleted (taking whatever was created with
    it) and the API server's error is raised, naming the argument behind the field."""
    kubernetes = kubernetes_module()
    core, rbac = kubernetes.client.CoreV1Api(api), kubernetes.client.RbacAuthorizationV1Api(api)
    namespace = objects.namespace
    root = json.loads(json.dumps(objects.root))
    root["data"][STATE_KEY] = json.dumps(state)
    base = root["metadata"]["name"]
    try:
        created = core.create_namespaced_config_map(namespace, root)
    except kubernetes.client.rest.ApiException as exc:
        raise api_error(exc, f"create the job's ConfigMap {base}", namespace) from None
    uid = created.metadata.uid
    owner = owner_reference("ConfigMap", base, uid)
    creators = {
        "ServiceAccount": core.create_namespaced_service_account,
        "Role": rbac.create_namespaced_role,
        "RoleBinding": rbac.create_namespaced_role_binding,
        "Secret": core.create_namespaced_secret,
        "Service": core.create_namespaced_service,
        "Pod": core.create_namespaced_pod,
    }
    try:
        core.patch_namespaced_config_map(base, namespace, {"data": {SETTINGS_KEY: settings_for(uid)}})
        for item in objects.creation_order()[1:]:  # the root exists
            body = json.loads(json.dumps(item))
            body["metadata"]["ownerReferences"] = [owner]
            try:
                made = create_retrying(creators[body["kind"]], namespace, body)
            except kubernetes.client.rest.ApiException as exc:
                raise api_error(exc, f"create {body['kind']} {body['metadata']['name']}") from None
        agent = owner_reference("Pod", agent_name(base), made.metadata.uid)
        agent["controller"] = False
        patchers = {
            "ServiceAccount": core.patch_namespaced_service_account,
            "Role": rbac.patch_namespaced_role,
            "RoleBinding": rbac.patch_namespaced_role_binding,
            "Secret": core.patch_namespaced_secret,
        }
        for item in [*objects.account, objects.secret]:
            if item["kind"] in AGENT_OWNED:
                # A JSON patch: a merge patch would add the owner (merged by uid), not replace it.
                patch = [{"op": "replace", "path": "/metadata/ownerReferences", "value": [agent]}]
                patchers[item["kind"]](item["metadata"]["name"], namespace, patch)
    except BaseException:
        delete_job(api, namespace, base)
        raise
    return str(uid)


def create_retrying(
    create: Callable[[str, Any], Any],
    namespace: str,
    body: Any,
    wait_seconds: float = TOKEN_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """``create(namespace, body)``, again while the API server answers that the pod's
    ServiceAccount has no token yet: before Kubernetes 1.24 the controller manager writes a new
    account's token Secret a moment after the account exists, and the ServiceAccount admission
    refuses a pod meanwhile with a ``ServerTimeout`` that asks to retry."""
    kubernetes = kubernetes_module()
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return create(namespace, body)
        except kubernetes.client.rest.ApiException as exc:
            if not _token_pending(exc) or time.monotonic() >= deadline:
                raise
        sleep(TOKEN_POLL_SECONDS)


def _token_pending(exc: Any) -> bool:
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        return False
    return (
        isinstance(status, dict)
        and status.get("reason") == "ServerTimeout"
        and "No API token found for service account" in str(status.get("message", ""))
    )


def delete_job(api: Any, namespace: str, base: str) -> None:
    """Delete the root; the garbage collector removes everything it owns."""
    kubernetes = kubernetes_module()
    try:
        kubernetes.client.CoreV1Api(api).delete_namespaced_config_map(
            base, namespace, propagation_policy="Background"
        )
    except kubernetes.client.rest.ApiException as exc:
        if exc.status != 404:
            raise


def list_roots(api: Any, namespace: str) -> list[Any]:
    """Every job's root ConfigMap in ``namespace`` (``smlaunch.io/role=job``, holding a request)."""
    kubernetes = kubernetes_module()
    try:
        found = kubernetes.client.CoreV1Api(api).list_namespaced_config_map(
            namespace, label_selector=f"{ROLE_LABEL}=job"
        )
    except kubernetes.client.rest.ApiException as exc:
        raise api_error(exc, "list the jobs' ConfigMaps", namespace) from None
    return [root for root in found.items if SPEC_KEY in (root.data or {}) and STATE_KEY in (root.data or {})]


def read_root(api: Any, namespace: str, base: str) -> Any | None:
    """The root ConfigMap, or None when there is no such job."""
    kubernetes = kubernetes_module()
    try:
        return kubernetes.client.CoreV1Api(api).read_namespaced_config_map(base, namespace)
    except kubernetes.client.rest.ApiException as exc:
        if exc.status == 404:
            return None
        raise api_error(exc, f"read the job's ConfigMap {base}", namespace) from None


def agent_pod(api: Any, namespace: str, base: str) -> Any | None:
    kubernetes = kubernetes_module()
    try:
        return kubernetes.client.CoreV1Api(api).read_namespaced_pod(agent_name(base), namespace)
    except kubernetes.client.rest.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def description(root: Any, agent: Any | None, agent_checked: bool) -> dict[str, Any]:
    """DescribeTrainingJob of the job whose root is ``root``: the request and the agent's state
    (times as datetimes). A job not terminal whose agent pod is gone or ended (``agent_checked``)
    is Failed: nothing will move it on. A job whose agent pod waits to be scheduled is
    ``Starting``, with the scheduler's message (``Pending: 0/1 nodes are available: 1 Insufficient
    cpu.``); host pods that wait are the agent's to record (its executor's ``waiting``)."""
    data = root.data or {}
    request: dict[str, Any] = json.loads(data[SPEC_KEY])
    state: dict[str, Any] = json.loads(data[STATE_KEY])
    if not JobState.of(state).is_terminal and agent_checked:
        phase = agent.status.phase if agent is not None and agent.status else None
        if agent is None or phase in ("Succeeded", "Failed"):
            state = _agent_lost(state, phase)
        elif phase == "Pending":
            message = _pending_message(agent)
            if message is not None:
                state = _starting(state, message)
    result = dict(request)
    name = request["TrainingJobName"]
    result["TrainingJobArn"] = f"arn:aws:sagemaker:local:000000000000:training-job/{name.lower()}"
    for key, value in state.items():
        result[key] = _datetime(value) if key in _TIME_FIELDS else value
    result["SecondaryStatusTransitions"] = [
        {k: (_datetime(v) if k in ("StartTime", "EndTime") else v) for k, v in t.items()}
        for t in state.get("SecondaryStatusTransitions", [])
    ]
    if state.get("FinalMetricDataList"):  # the agent pod's, with each value's time
        result["FinalMetricDataList"] = [
            {**metric, "Timestamp": _datetime(metric["Timestamp"])} for metric in state["FinalMetricDataList"]
        ]
    return result


def _pending_message(pod: Any) -> str | None:
    if pod.status is None or pod.status.phase != "Pending":
        return None
    for condition in (pod.status.conditions or []) if pod.status else []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
            return f"Pending: {condition.message}"
    return None


def _starting(state: dict[str, Any], message: str) -> dict[str, Any]:
    """``state`` shown as ``Starting`` with ``message``: the hosts are not all placed yet."""
    state = dict(state, SecondaryStatus=contract.SECONDARY_STARTING)
    transitions = [dict(t) for t in state.get("SecondaryStatusTransitions") or []]
    if transitions and transitions[-1].get("Status") == contract.SECONDARY_STARTING:
        transitions[-1]["StatusMessage"] = message
    else:
        transitions.append(
            {"Status": contract.SECONDARY_STARTING, "StartTime": time.time(), "StatusMessage": message}
        )
    state["SecondaryStatusTransitions"] = transitions
    return state


def _agent_lost(state: dict[str, Any], phase: str | None) -> dict[str, Any]:
    state = dict(state)
    ended = time.time()
    how = "was deleted" if phase is None else f"ended {phase}"
    state.update(
        TrainingJobStatus=contract.STATUS_FAILED,
        SecondaryStatus=contract.SECONDARY_FAILED,
        FailureReason=f"InternalServerError: the job's agent pod {how} before it recorded an outcome",
    )
    state.setdefault("TrainingEndTime", ended)
    return state


def _datetime(value: Any) -> Any:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    return value


def request_stop(api: Any, namespace: str, base: str) -> None:
    """Annotate the root: the agent stops the job (SIGTERM to every host, SIGKILL after the grace)."""
    kubernetes = kubernetes_module()
    patch = {"metadata": {"annotations": {STOP_ANNOTATION: str(time.time())}}}
    try:
        kubernetes.client.CoreV1Api(api).patch_namespaced_config_map(base, namespace, patch)
    except kubernetes.client.rest.ApiException as exc:
        raise api_error(exc, f"ask job {base} to stop", namespace) from None


RESUME_LINES = 3
"""Lines compared to find where the pod's log, read so far, ends in the log the root kept."""


def resume_index(kept: list[str], recent: list[str], seen: int) -> int:
    """Where to go on in ``kept`` (the job log's end, from the root) after ``seen`` lines of the
    pod's log whose last were ``recent``: after those lines, looked for where they are expected
    (line ``seen``: the pod's log is the job log's lines) and then from the end; ``seen`` when
    they are not there (the kept tail starts later)."""
    if not recent:
        return 0
    count = len(recent)
    expected = seen - count
    candidates = [expected] if 0 <= expected <= len(kept) - count else []
    candidates += range(len(kept) - count, -1, -1)
    for start in candidates:
        if kept[start : start + count] == recent:
            return start + count
    return min(seen, len(kept))


def log_lines(api: Any, namespace: str, base: str, follow: bool, describe: Any) -> Iterator[str]:
    """The job log: the agent pod's log while it runs (followed with ``follow``), then what the
    root kept past the lines already read; with ``follow``, then the closing lines (training
    seconds, how it ended)."""
    kubernetes = kubernetes_module()
    core = kubernetes.client.CoreV1Api(api)
    seen = 0
    recent: list[str] = []
    name = agent_name(base)
    while True:
        root = read_root(api, namespace, base)
        data = (root.data or {}) if root is not None else {}
        pod = agent_pod(api, namespace, base)
        phase = pod.status.phase if pod is not None and pod.status is not None else None
        ended = root is None or LOG_KEY in data or phase is None or phase in ("Succeeded", "Failed")
        if phase == "Running" and LOG_KEY not in data:
            try:
                response = core.read_namespaced_pod_log(
                    name, namespace, follow=follow, _preload_content=False
                )
                index, buffer = 0, b""
                for chunk in response.stream(1 << 16, decode_content=True):
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        index += 1
                        if index > seen:  # a stream read again starts from the pod's first line
                            seen = index
                            text = line.decode("utf-8", errors="replace")
                            recent = [*recent[-(RESUME_LINES - 1) :], text]
                            yield text
            except kubernetes.client.rest.ApiException:
                pass  # the pod went: what it said is in the root
            if not follow:
                return
            continue
        if follow and not ended:
            time.sleep(FOLLOW_SECONDS)  # pending, or between the agent's last words and its end
            continue
        kept = str(data.get(LOG_KEY) or "").splitlines()
        yield from kept[resume_index(kept, recent, seen) :]
        if follow:
            final = describe()
            if not kept:  # an agent that never ran: the transitions submit recorded
                transitions = final.get("SecondaryStatusTransitions", [])
                yield from (f"[{LOCAL_SOURCE}] {transition_line(t)}" for t in transitions)
            yield from summary_lines(final, LOCAL_SOURCE, billable_seconds=False)
        return
