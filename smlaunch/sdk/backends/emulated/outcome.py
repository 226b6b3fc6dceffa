"""How an attempt of a local job ends: the :class:`Outcome` enum and the agent's ordered trigger table.

The agent (:mod:`smlaunch.sdk.backends.emulated.agent`) supervises its hosts as torchelastic's agent
does: poll the hosts, take the first trigger that fires, terminate the hosts with that trigger's
grace, wait for them to end. What fires, in which order, with which message and which
DescribeTrainingJob fields, is this module's :data:`TRIGGERS`: each trigger is a small function of
one :class:`Poll` that gives a :class:`Fired` (outcome, grace, message, fields) or None. The order
is the policy: a preemption is checked before failures (the scheduler signalled the hosts too, so
they look failed), failures before a stop, a stop before a spot interruption, deadlines last.

The attempt's (and then the job's) end is a :class:`Result`: an :class:`Outcome` and its fields.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from smlaunch import contract

FAILURE_GRACE_SECONDS = 2.0
"""SIGTERM -> SIGKILL grace for the surviving hosts once one host failed (their work is lost anyway)."""
DATA_FAILURE_PREFIX = "ClientError: Data download failed: "
"""FailureReason prefix when a FastFile or Pipe channel fails while the hosts run."""


class Outcome(enum.Enum):
    """How an attempt ended; each is a (TrainingJobStatus, SecondaryStatus) pair of the job."""

    COMPLETED = (contract.STATUS_COMPLETED, contract.SECONDARY_COMPLETED)
    FAILED = (contract.STATUS_FAILED, contract.SECONDARY_FAILED)
    STOPPED = (contract.STATUS_STOPPED, contract.SECONDARY_STOPPED)
    MAX_WAIT_EXCEEDED = (contract.STATUS_STOPPED, contract.SECONDARY_MAX_WAIT_TIME_EXCEEDED)
    MAX_RUNTIME_EXCEEDED = (contract.STATUS_STOPPED, contract.SECONDARY_MAX_RUNTIME_EXCEEDED)
    INTERRUPTED = (contract.STATUS_IN_PROGRESS, contract.SECONDARY_INTERRUPTED)
    """A spot interruption or a preemption: the job goes on with another attempt (still InProgress)."""

    @property
    def status(self) -> str:
        """The job's TrainingJobStatus once it ends so (InProgress for :attr:`INTERRUPTED`)."""
        return str(self.value[0])

    @property
    def secondary(self) -> str:
        """The job's SecondaryStatus once the attempt ends so (also the attempt's ``Outcome``)."""
        return str(self.value[1])

    @property
    def announced(self) -> tuple[str, str | None] | None:
        """The (SecondaryStatus, TrainingJobStatus or None) the agent records the moment a trigger
        gives this outcome, before the hosts have ended; None: nothing until they have (a failure)."""
        if self is Outcome.INTERRUPTED:
            return contract.SECONDARY_INTERRUPTED, None
        if self.status == contract.STATUS_STOPPED:
            return contract.SECONDARY_STOPPING, contract.STATUS_STOPPING
        return None


def _frozen(fields: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(fields or {}))


@dataclass(frozen=True)
class Result:
    """How an attempt or the job ended: the outcome and the DescribeTrainingJob fields it sets
    (``FailureReason``, ``ExitCode``, ``ModelArtifacts``...)."""

    outcome: Outcome
    fields: Mapping[str, Any] = field(default_factory=_frozen)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _frozen(self.fields))

    @property
    def needs_cause(self) -> bool:
        """A failure whose FailureReason no trigger knew: the hosts' reports give it."""
        return self.outcome is Outcome.FAILED and "FailureReason" not in self.fields

    def with_fields(self, **fields: Any) -> Result:
        """This result with ``fields`` added (or replaced)."""
        return Result(self.outcome, {**self.fields, **fields})


@dataclass(frozen=True)
class Fired:
    """What a trigger decided: the outcome, the SIGTERM -> SIGKILL grace for the hosts still
    running, the line the agent says (None: nothing to say) and the fields the outcome sets."""

    outcome: Outcome
    grace: float
    message: str | None
    fields: Mapping[str, Any] = field(default_factory=_frozen)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _frozen(self.fields))

    @property
    def result(self) -> Result:
        """The attempt's result when the hosts have ended after this trigger."""
        return Result(self.outcome, self.fields)


@dataclass(frozen=True)
class Poll:
    """What one poll of the agent saw while hosts still run, for the triggers.

    The three questions are asked lazily, in table order and only until a trigger fires: each reads
    the job directory, and :attr:`interrupt_requested` consumes the interruption marker it finds.
    """

    now: float
    """``time.monotonic()`` of this poll."""
    running: tuple[str, ...]
    """The hosts still running."""
    failed: tuple[str, ...]
    """The hosts that failed (exited non-zero, or wrote ``output/failure.json``), running or not."""
    data_error: str | None
    """The first FastFile or Pipe channel failure, else None."""
    no_space: str | None
    """The FailureReason once a write of the agent found the job store full, else None."""
    grace: float
    """The job's stop grace (``stop_grace_seconds``)."""
    run_deadline: float
    """``time.monotonic()`` at which ``MaxRuntimeInSeconds`` is spent (over every attempt)."""
    max_run: int
    """``MaxRuntimeInSeconds``."""
    wait_deadline: float
    """``time.monotonic()`` at which ``MaxWaitTimeInSeconds`` is spent (``inf`` without one)."""
    max_wait: int | None
    """``MaxWaitTimeInSeconds`` (managed spot), else None."""
    preempted: Callable[[], bool]
    """A signal no ``stop()`` asked for reached a managed-spot job its scheduler requeues."""
    stop_requested: Callable[[], bool]
    """``stop()`` was asked for (the stop file, or a signal that is not a preemption)."""
    interrupt_requested: Callable[[], bool]
    """A spot interruption was asked for (consumes its marker)."""

    @property
    def failure_grace(self) -> float:
        """The grace once the job failed: short, at most the stop grace."""
        return min(self.grace, FAILURE_GRACE_SECONDS)


Trigger = Callable[[Poll], Fired | None]


def preempted(poll: Poll) -> Fired | None:
    """The scheduler preempted the job (first: it signalled the hosts too, which look failed)."""
    if not poll.preempted():
        return None
    return Fired(
        Outcome.INTERRUPTED, poll.grace, f"Preempted: SIGTERM to every host, SIGKILL after {poll.grace:g} s"
    )


def host_failed(poll: Poll) -> Fired | None:
    """A host failed: end every other host quickly; the hosts' reports give the reason."""
    if not poll.failed:
        return None
    message = None
    if any(name not in poll.failed for name in poll.running):  # else no host is left to end
        message = (
            f"Host {', '.join(poll.failed)} failed: ending every host (SIGTERM, SIGKILL after "
            f"{poll.failure_grace:g} s)"
        )
    return Fired(Outcome.FAILED, poll.failure_grace, message)


def data_failed(poll: Poll) -> Fired | None:
    """A FastFile or Pipe channel failed: the script would wait for data that never comes."""
    if poll.data_error is None:
        return None
    return Fired(
        Outcome.FAILED,
        poll.failure_grace,
        f"Data download failed: ending every host (SIGTERM, SIGKILL after {poll.failure_grace:g} s)",
        {"FailureReason": f"{DATA_FAILURE_PREFIX}{poll.data_error}"},
    )


def no_space(poll: Poll) -> Fired | None:
    """The job store is full: end as for a failed host (the agent puts the disk first in the reason)."""
    if poll.no_space is None:
        return None
    return Fired(
        Outcome.FAILED,
        poll.failure_grace,
        f"{poll.no_space}: ending every host (SIGTERM, SIGKILL after {poll.failure_grace:g} s)",
    )


def stop_requested(poll: Poll) -> Fired | None:
    """``stop()``, Ctrl-C in ``wait()``, or a signal to the agent that is not a preemption."""
    if not poll.stop_requested():
        return None
    return Fired(
        Outcome.STOPPED, poll.grace, f"Stop requested: SIGTERM to every host, SIGKILL after {poll.grace:g} s"
    )


def spot_interruption(poll: Poll) -> Fired | None:
    """An emulated spot interruption (``stop(reason="spot")`` or a ``spot`` fault)."""
    if not poll.interrupt_requested():
        return None
    return Fired(
        Outcome.INTERRUPTED,
        poll.grace,
        f"Spot interruption: SIGTERM to every host, SIGKILL after {poll.grace:g} s",
    )


def max_wait_exceeded(poll: Poll) -> Fired | None:
    """``MaxWaitTimeInSeconds`` (managed spot, counted from the job's start) is spent."""
    if poll.now < poll.wait_deadline:
        return None
    return Fired(
        Outcome.MAX_WAIT_EXCEEDED,
        poll.grace,
        f"MaxWaitTimeInSeconds={poll.max_wait} exceeded: SIGTERM to every host",
        {
            "FailureReason": "MaxWaitTimeExceeded: Training job exceeded "
            f"MaxWaitTimeInSeconds provided ({poll.max_wait} s) and was stopped"
        },
    )


def max_runtime_exceeded(poll: Poll) -> Fired | None:
    """``MaxRuntimeInSeconds`` (training time over every attempt) is spent."""
    if poll.now < poll.run_deadline:
        return None
    return Fired(
        Outcome.MAX_RUNTIME_EXCEEDED,
        poll.grace,
        f"MaxRuntimeInSeconds={poll.max_run} exceeded: SIGTERM to every host, SIGKILL after {poll.grace:g} s",
        {
            "FailureReason": f"MaxRuntimeExceeded: Training job exceeded MaxRuntimeInSeconds "
            f"provided ({poll.max_run} s) and was stopped",
        },
    )


TRIGGERS: tuple[Trigger, ...] = (
    preempted,
    host_failed,
    data_failed,
    no_space,
    stop_requested,
    spot_interruption,
    max_wait_exceeded,
    max_runtime_exceeded,
)
"""The agent's triggers while hosts run, in the order it checks them: the first that fires wins."""


def first_trigger(poll: Poll, triggers: tuple[Trigger, ...] = TRIGGERS) -> Fired | None:
    """What the first of ``triggers`` that fires at ``poll`` decided, or None."""
    for trigger in triggers:
        fired = trigger(poll)
        if fired is not None:
            return fired
    return None


def preempted_after_end(failed: tuple[str, ...], is_preempted: Callable[[], bool]) -> Fired | None:
    """Once every host has ended and none fired before: hosts that failed because the scheduler
    preempted the job (it signalled them and the agent) make an interruption, not a failure."""
    if not failed or not is_preempted():
        return None
    return Fired(Outcome.INTERRUPTED, 0.0, "Preempted: every host has ended")


def ended_on_their_own(exit_codes: list[int | None]) -> Result:
    """The attempt's result when its hosts ended on their own (no trigger fired)."""
    if any(code != 0 for code in exit_codes):
        return Result(Outcome.FAILED)
    return Result(Outcome.COMPLETED)
