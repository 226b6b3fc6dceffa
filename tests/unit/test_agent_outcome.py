"""The agent's outcome and its ordered trigger table (``smlaunch.sdk.backends.emulated.outcome``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated import outcome
from smlaunch.sdk.backends.emulated.outcome import (
    TRIGGERS,
    Fired,
    Outcome,
    Poll,
    Result,
    ended_on_their_own,
    first_trigger,
    preempted_after_end,
)


def _never() -> bool:
    return False


def _always() -> bool:
    return True


def _poll(**changes: Any) -> Poll:
    """A poll at which no trigger fires: two hosts running, nothing failed, deadlines far away."""
    quiet = Poll(
        now=100.0,
        running=("algo-1", "algo-2"),
        failed=(),
        data_error=None,
        no_space=None,
        grace=30.0,
        run_deadline=1000.0,
        max_run=900,
        wait_deadline=float("inf"),
        max_wait=None,
        preempted=_never,
        stop_requested=_never,
        interrupt_requested=_never,
    )
    return dataclasses.replace(quiet, **changes)


# Each trigger, the poll change that fires it, and what it must decide.
FIRING: dict[str, tuple[dict[str, Any], Outcome, float]] = {
    "preempted": ({"preempted": _always}, Outcome.INTERRUPTED, 30.0),
    "host_failed": ({"failed": ("algo-2",)}, Outcome.FAILED, outcome.FAILURE_GRACE_SECONDS),
    "data_failed": ({"data_error": "train: gone"}, Outcome.FAILED, outcome.FAILURE_GRACE_SECONDS),
    "no_space": ({"no_space": "ClientError: No space left"}, Outcome.FAILED, outcome.FAILURE_GRACE_SECONDS),
    "stop_requested": ({"stop_requested": _always}, Outcome.STOPPED, 30.0),
    "spot_interruption": ({"interrupt_requested": _always}, Outcome.INTERRUPTED, 30.0),
    "max_wait_exceeded": ({"wait_deadline": 100.0, "max_wait": 60}, Outcome.MAX_WAIT_EXCEEDED, 30.0),
    "max_runtime_exceeded": ({"run_deadline": 100.0}, Outcome.MAX_RUNTIME_EXCEEDED, 30.0),
}


def test_the_table_order_is_the_policy() -> None:
    assert [t.__name__ for t in TRIGGERS] == list(FIRING)


def test_no_trigger_fires_on_a_quiet_poll() -> None:
    assert first_trigger(_poll()) is None
    assert all(trigger(_poll()) is None for trigger in TRIGGERS)


@pytest.mark.parametrize("name", list(FIRING))
def test_each_trigger_alone(name: str) -> None:
    changes, expected, grace = FIRING[name]
    fired = first_trigger(_poll(**changes))
    assert fired is not None
    assert (fired.outcome, fired.grace) == (expected, grace)


@pytest.mark.parametrize("index", range(len(TRIGGERS) - 1))
def test_the_first_trigger_wins(index: int) -> None:
    """With this trigger and every later one ready to fire, this one decides."""
    changes: dict[str, Any] = {}
    for name in list(FIRING)[index:]:
        changes.update(FIRING[name][0])
    fired = first_trigger(_poll(**changes))
    alone = getattr(outcome, list(FIRING)[index])(_poll(**FIRING[list(FIRING)[index]][0]))
    assert fired == alone


def test_later_questions_are_not_asked_once_a_trigger_fired() -> None:
    """The interruption marker is consumed when asked: a stop must leave it in place."""
    asked: list[str] = []

    def question(name: str, answer: bool) -> Callable[[], bool]:
        def ask() -> bool:
            asked.append(name)
            return answer

        return ask

    poll = _poll(
        preempted=question("preempted", False),
        stop_requested=question("stop", True),
        interrupt_requested=question("interrupt", True),
    )
    fired = first_trigger(poll)
    assert fired is not None and fired.outcome is Outcome.STOPPED
    assert asked == ["preempted", "stop"]


def test_messages_and_fields() -> None:
    fired = first_trigger(_poll(failed=("algo-2",)))
    assert fired == Fired(
        Outcome.FAILED, 2.0, "Host algo-2 failed: ending every host (SIGTERM, SIGKILL after 2 s)"
    )
    assert fired.result.needs_cause
    # Every host already ended: nobody is left to end, nothing to say.
    assert first_trigger(_poll(running=("algo-2",), failed=("algo-2",))) == Fired(Outcome.FAILED, 2.0, None)
    data = first_trigger(_poll(data_error="train: NoSuchKey"))
    assert data is not None and not data.result.needs_cause
    assert data.fields == {"FailureReason": "ClientError: Data download failed: train: NoSuchKey"}
    wait = first_trigger(_poll(wait_deadline=50.0, max_wait=60))
    assert wait is not None and wait.message == "MaxWaitTimeInSeconds=60 exceeded: SIGTERM to every host"
    assert wait.fields["FailureReason"].startswith("MaxWaitTimeExceeded: ")
    run = first_trigger(_poll(run_deadline=50.0))
    assert run is not None
    assert run.message == "MaxRuntimeInSeconds=900 exceeded: SIGTERM to every host, SIGKILL after 30 s"
    assert run.fields["FailureReason"] == (
        "MaxRuntimeExceeded: Training job exceeded MaxRuntimeInSeconds provided (900 s) and was stopped"
    )
    # A short stop grace bounds the failure grace too.
    short = first_trigger(_poll(grace=0.5, no_space="ClientError: full"))
    assert short == Fired(
        Outcome.FAILED, 0.5, "ClientError: full: ending every host (SIGTERM, SIGKILL after 0.5 s)"
    )


def test_outcomes_are_the_job_statuses() -> None:
    assert [(o.status, o.secondary) for o in Outcome] == [
        (contract.STATUS_COMPLETED, contract.SECONDARY_COMPLETED),
        (contract.STATUS_FAILED, contract.SECONDARY_FAILED),
        (contract.STATUS_STOPPED, contract.SECONDARY_STOPPED),
        (contract.STATUS_STOPPED, contract.SECONDARY_MAX_WAIT_TIME_EXCEEDED),
        (contract.STATUS_STOPPED, contract.SECONDARY_MAX_RUNTIME_EXCEEDED),
        (contract.STATUS_IN_PROGRESS, contract.SECONDARY_INTERRUPTED),
    ]
    assert {o: o.announced for o in Outcome} == {
        Outcome.COMPLETED: None,
        Outcome.FAILED: None,
        Outcome.STOPPED: (contract.SECONDARY_STOPPING, contract.STATUS_STOPPING),
        Outcome.MAX_WAIT_EXCEEDED: (contract.SECONDARY_STOPPING, contract.STATUS_STOPPING),
        Outcome.MAX_RUNTIME_EXCEEDED: (contract.SECONDARY_STOPPING, contract.STATUS_STOPPING),
        Outcome.INTERRUPTED: (contract.SECONDARY_INTERRUPTED, None),
    }


def test_the_end_without_a_trigger() -> None:
    assert ended_on_their_own([0, 0]) == Result(Outcome.COMPLETED)
    assert ended_on_their_own([0, 1]).needs_cause
    assert ended_on_their_own([0, None]).outcome is Outcome.FAILED
    assert preempted_after_end((), _always) is None
    assert preempted_after_end(("algo-1",), _never) is None
    fired = preempted_after_end(("algo-1",), _always)
    assert fired is not None and fired.outcome is Outcome.INTERRUPTED
    assert fired.message == "Preempted: every host has ended"


def test_results_are_frozen() -> None:
    fields = {"FailureReason": "x"}
    result = Result(Outcome.FAILED, fields)
    fields["FailureReason"] = "y"
    assert result.fields == {"FailureReason": "x"}
    with pytest.raises(TypeError):
        result.fields["ExitCode"] = 1  # type: ignore[index]
    assert result.with_fields(ExitCode=1).fields == {"FailureReason": "x", "ExitCode": 1}
    assert result.fields == {"FailureReason": "x"}
