"""Managed spot emulation for backends that run hosts on this machine.

Managed spot (``EnableManagedSpotTraining``, ``MaxWaitTimeInSeconds``): SageMaker's local mode
refuses it. Here an interruption (``estimator.stop(reason="spot")``, or a ``spot`` fault in
``SMLAUNCH_FAULTS``, see :mod:`smlaunch.contract.faults` and :class:`SpotFaults`) SIGTERMs every host
(the script may save a checkpoint within the stop grace), syncs the checkpoints, discards the hosts,
and starts a new attempt on fresh hosts (new ``/opt/ml`` trees, data staged again, checkpoints
restored). :class:`Attempts` keeps each attempt's timing for ``describe()``:
``TrainingTimeInSeconds`` is the wall time from the first start to the end (restarts included) and
``BillableTimeInSeconds`` the sum of the attempts' running time (what the emulated hosts were held
for); there is no spot price locally, so no further discount is modelled.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract.faults import Fault, parse_faults
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.spec import TrainingJobSpec

Log = Callable[[str], None]

INTERRUPT_FILE = "interrupt"
"""Created in the job directory by ``LocalBackend.stop(job, reason="spot")``; consumed by the agent."""


@dataclass
class Attempts:
    """Each attempt's timing for describe(): ``Attempts`` list, training vs billable seconds."""

    started: float = field(default_factory=time.time)
    records: list[dict[str, Any]] = field(default_factory=list)

    def begin(self) -> None:
        self.records.append({"Attempt": len(self.records) + 1, "StartTime": time.time()})

    def end(self, outcome: str, at: float | None = None) -> None:
        """End the current attempt (at ``at``, default now); nothing if none is running."""
        if not self.records or "EndTime" in self.records[-1]:
            return
        record = self.records[-1]
        record["EndTime"] = time.time() if at is None else at
        record["Seconds"] = round(record["EndTime"] - record["StartTime"], 3)
        record["Outcome"] = outcome

    @property
    def running_seconds(self) -> float:
        total: float = sum(r.get("EndTime", time.time()) - r["StartTime"] for r in self.records)
        return total

    def describe_fields(self, ended: float, spot: bool) -> dict[str, Any]:
        """``Attempts`` always; for spot jobs also training (wall) vs billable (running) seconds."""
        fields: dict[str, Any] = {"Attempts": [dict(r) for r in self.records]}
        if spot:
            fields["TrainingTimeInSeconds"] = max(0, round(ended - self.started))
            fields["BillableTimeInSeconds"] = max(0, round(self.running_seconds))
        return fields


def request_interruption(job_path: Path, spec: TrainingJobSpec) -> None:
    """``stop(job, reason="spot")``: ask the agent to interrupt the current attempt."""
    if not spec.EnableManagedSpotTraining:
        raise ConfigurationError(
            "reason",
            "spot",
            f"job {spec.TrainingJobName} does not use managed spot",
            "submit it with use_spot_instances=True, or call stop() without a reason",
        )
    (job_path / INTERRUPT_FILE).touch()


def spot_faults(environment: Mapping[str, str] | None) -> list[Fault]:
    """The ``spot`` faults of a job's ``SMLAUNCH_FAULTS`` (already validated at ``fit()``)."""
    raw = (environment or {}).get(contract.SMLAUNCH_FAULTS, "")
    return [f for f in parse_faults(raw) if f.kind == "spot"] if raw.strip() else []


_RANK_LINE = re.compile(r"^\[(algo-\d+)/rank (\d+)\] ")


class SpotFaults:
    """Carries out the ``spot`` faults of one job in the agent: each interrupts its attempt, exactly
    as ``stop(reason="spot")`` would, after ``after_seconds`` from the hosts' start or when
    ``rank`` has printed ``after_lines`` lines (counted per host on the job log's ``[algo-N/rank R]``
    lines, as each host's supervisor counts them for the other faults: without a distribution every
    host's one process is rank 0). Each fault fires at most once per attempt."""

    def __init__(self, faults: list[Fault], job_path: Path, log: Log) -> None:
        self.faults = faults
        self.job_path = job_path
        self.log = log
        self._armed: list[Fault] = []
        self._lines: dict[tuple[str, int], int] = {}
        self._fired: set[int] = set()
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()

    def arm(self, attempt: int) -> None:
        """The hosts of ``attempt`` (1-based) have started: start its faults' clocks and counters."""
        self.disarm()
        with self._lock:
            self._armed = [f for f in self.faults if f.attempt == attempt]
            self._lines = {}
            self._fired = set()
        for fault in self._armed:
            if fault.after_lines is None:
                timer = threading.Timer(fault.after_seconds, self._interrupt, args=(fault,))
                timer.daemon = True
                timer.start()
                self._timers.append(timer)

    @property
    def counting(self) -> bool:
        """Whether :meth:`on_line` wants the hosts' lines (a fault of this attempt is armed)."""
        return bool(self._armed)

    def on_line(self, text: str) -> None:
        if not self._armed:
            return
        found = _RANK_LINE.match(text)
        if found is None:
            return
        host, rank = found.group(1), int(found.group(2))
        with self._lock:
            count = self._lines[(host, rank)] = self._lines.get((host, rank), 0) + 1
            due = [
                f for f in self._armed if f.rank == rank and f.after_lines == count and f.host in (None, host)
            ]
        for fault in due:
            self._interrupt(fault)

    def disarm(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        with self._lock:
            self._armed = []

    def _interrupt(self, fault: Fault) -> None:
        with self._lock:
            if id(fault) in self._fired:
                return  # e.g. the same rank of a second host reaching the count
            self._fired.add(id(fault))
        self.log(f"fault injection: {fault.describe()}: interrupting the job")
        (self.job_path / INTERRUPT_FILE).touch()
