"""The agent side of ``spot`` faults (smlaunch.sdk.backends.emulated.spot.SpotFaults): which attempt,
which rank's lines, which clock. Each fault ends as the interrupt file ``stop(reason="spot")`` writes."""

from __future__ import annotations

import time
from pathlib import Path

from smlaunch import contract
from smlaunch.contract.faults import Fault
from smlaunch.sdk.backends.emulated.spot import INTERRUPT_FILE, SpotFaults, spot_faults


def _faults(tmp_path: Path, *faults: Fault) -> tuple[SpotFaults, list[str]]:
    said: list[str] = []
    return SpotFaults(list(faults), tmp_path, said.append), said


def test_after_lines_counts_that_rank_on_that_host_in_the_armed_attempt_only(tmp_path: Path) -> None:
    marker = tmp_path / INTERRUPT_FILE
    spot, said = _faults(tmp_path, Fault("spot", "algo-2", 1, after_lines=2, attempt=2))
    spot.on_line("[algo-2/rank 1] before any attempt is armed")
    spot.arm(1)
    for _ in range(3):
        spot.on_line("[algo-2/rank 1] step")  # attempt 1: not this fault's attempt
    assert not marker.exists()
    spot.arm(2)
    spot.on_line("[algo-2/rank 1] step")
    spot.on_line("[algo-1/rank 1] another host's line with the same rank label")
    spot.on_line("[algo-2/rank 0] another rank")
    spot.on_line("[smlaunch] not a rank line")
    assert not marker.exists()
    spot.on_line("[algo-2/rank 1] step")
    assert marker.exists()
    assert said == [
        "fault injection: spot of attempt 2, rank 1 on algo-2 after 2 lines: interrupting the job"
    ]


def test_after_seconds_fires_on_its_clock_and_disarm_cancels_it(tmp_path: Path) -> None:
    marker = tmp_path / INTERRUPT_FILE
    spot, _ = _faults(tmp_path, Fault("spot", after_seconds=0.0))
    spot.arm(1)
    deadline = time.monotonic() + 10
    while not marker.exists():
        assert time.monotonic() < deadline, "the timed spot fault never fired"
        time.sleep(0.02)
    marker.unlink()
    later, _ = _faults(tmp_path, Fault("spot", after_seconds=30.0))
    later.arm(1)
    later.disarm()
    assert not later._timers and not marker.exists()


def test_only_spot_faults_are_the_agents() -> None:
    raw = '[{"kind": "crash", "rank": 0}, {"kind": "spot", "after_seconds": 5, "attempt": 2}]'
    assert spot_faults({contract.SMLAUNCH_FAULTS: raw}) == [Fault("spot", after_seconds=5.0, attempt=2)]
    assert spot_faults(None) == [] and spot_faults({contract.SMLAUNCH_FAULTS: " "}) == []


def test_a_fault_without_host_fires_once_though_every_host_has_a_rank_0(tmp_path: Path) -> None:
    """Without a distribution each host's process is rank 0: the first host to reach the count
    interrupts, and the second must not leave an interrupt behind for the next attempt."""
    marker = tmp_path / INTERRUPT_FILE
    spot, said = _faults(tmp_path, Fault("spot", None, 0, after_lines=1))
    spot.arm(1)
    spot.on_line("[algo-1/rank 0] epoch 0")
    assert marker.exists()
    marker.unlink()  # the agent consumed it
    spot.on_line("[algo-2/rank 0] epoch 0")
    assert not marker.exists() and len(said) == 1
