"""Fault injection: the SMLAUNCH_FAULTS format, and each fault applied to real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.contract.faults import Fault, parse_faults
from smlaunch.runtime.launchers.base import ProcessSpec
from smlaunch.runtime.supervision.fault_injector import FaultInjector
from smlaunch.runtime.supervision.hooks import RankRegistry, StartedProcess
from smlaunch.runtime.supervision.stacks import dump_stacks, where

LOOP = """
import time
def training_step(i):
    time.sleep(0.02)
i = 0
print("ready", flush=True)
while True:
    training_step(i)
    i += 1
"""


def test_parse_accepts_the_documented_forms() -> None:
    faults = parse_faults(
        json.dumps(
            [
                {"kind": "crash", "rank": 1, "after_seconds": 3, "exit_code": 7},
                {"kind": "hang", "host": "algo-2", "rank": 3, "after_seconds": 5.5},
                {"kind": "kill", "rank": 2},
                {"kind": "kill_host", "host": "algo-2", "after_seconds": 10},
                {"kind": "spot", "rank": 0, "after_lines": 40},
                {"kind": "spot", "after_seconds": 60, "attempt": 2},
            ]
        )
    )
    assert faults == [
        Fault("crash", None, 1, 3.0, 7),
        Fault("hang", "algo-2", 3, 5.5, 1),
        Fault("kill", None, 2, 0.0, 1),
        Fault("kill_host", "algo-2", None, 10.0, 1),
        Fault("spot", None, 0, 0.0, 1, 40, 1),
        Fault("spot", None, None, 60.0, 1, None, 2),
    ]
    assert faults[0].describe() == "crash of rank 1 with exit code 7 after 3 s"
    assert faults[4].describe() == "spot of attempt 1, rank 0 after 40 lines"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not json", "is not JSON"),
        ('{"kind": "crash"}', "must be a JSON list"),
        ('[{"kind": "explode", "rank": 0}]', "is not one of"),
        ('[{"kind": "crash"}]', "needs rank"),
        ('[{"kind": "crash", "rank": -1}]', "needs rank"),
        ('[{"kind": "kill_host"}]', "needs a host"),
        ('[{"kind": "kill_host", "host": "algo-1", "rank": 0}]', "takes no rank"),
        ('[{"kind": "crash", "rank": 0, "after_seconds": -2}]', "after_seconds"),
        ('[{"kind": "crash", "rank": 0, "exit_code": 0}]', "exit_code"),
        ('[{"kind": "kill", "rank": 0, "exit_code": 3}]', "crash only"),
        ('[{"kind": "crash", "rank": 0, "when": 3}]', "unknown field"),
        ('[{"kind": "crash", "rank": 0, "after_lines": 0}]', "after_lines"),
        ('[{"kind": "crash", "rank": 0, "after_lines": 5, "after_seconds": 1}]', "one trigger"),
        ('[{"kind": "kill_host", "host": "algo-1", "after_lines": 5}]', "rank faults"),
        ('[{"kind": "spot", "rank": 0}]', "rank and after_lines together"),
        ('[{"kind": "spot", "after_lines": 3}]', "rank and after_lines together"),
        ('[{"kind": "spot", "attempt": 0}]', "attempt=0"),
        ('[{"kind": "crash", "rank": 0, "attempt": 2}]', "spot only"),
    ],
)
def test_parse_names_the_variable_the_entry_and_the_fix(raw: str, problem: str) -> None:
    with pytest.raises(HostConfigurationError) as info:
        parse_faults(raw)
    message = str(info.value)
    assert message.startswith(contract.SMLAUNCH_FAULTS) and problem in message and "Fix:" in message


@pytest.fixture
def registry() -> Iterator[RankRegistry]:
    reg = RankRegistry()
    yield reg
    reg.close()


def start(registry: RankRegistry, tmp_path: Path, rank: int) -> subprocess.Popen[str]:
    (tmp_path / "train.py").write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMLAUNCH_", "SM_"))}
    env.update({"RANK": str(rank), "SM_CURRENT_HOST": "algo-1", contract.SMLAUNCH_FAULTS: "[]"})
    spec = registry.prepare(ProcessSpec(label=f"rank {rank}", argv=[], env=env, cwd=str(tmp_path)))
    proc = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        env=spec.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def inject(
    registry: RankRegistry, procs: list[subprocess.Popen[str]], fault: Fault, **kwargs: object
) -> FaultInjector:
    injector = FaultInjector("algo-1", [fault], registry, lambda _m: None, **kwargs)  # type: ignore[arg-type]
    injector.on_start([StartedProcess(f"rank {i}", i, p.pid) for i, p in enumerate(procs)])
    return injector


def test_crash_exits_the_rank_with_the_code_and_says_where(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start(registry, tmp_path, 0), start(registry, tmp_path, 1)]
    try:
        injector = inject(registry, procs, Fault("crash", None, 1, 0.2, 7))
        assert procs[1].wait(15) == 7
        stderr = procs[1].stderr.read() if procs[1].stderr else ""
        assert "crashes now with exit code 7" in stderr and "training_step" in stderr
        assert procs[0].poll() is None  # only the chosen rank
        assert injector.applied == [Fault("crash", None, 1, 0.2, 7)]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_hang_stops_the_rank_where_it_was(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start(registry, tmp_path, 0)]
    try:
        inject(registry, procs, Fault("hang", None, 0, 0.1))
        deadline = time.monotonic() + 10
        stderr = ""
        while "hangs now" not in stderr and time.monotonic() < deadline:
            stderr += _read_available(procs[0])
            time.sleep(0.1)
        assert "hangs now" in stderr and "training_step" in stderr
        assert procs[0].poll() is None  # alive, but going nowhere
        _tool, stacks = dump_stacks(registry, registry.ranks(), "faulthandler")
        assert "training_step" in where(stacks[procs[0].pid], tmp_path)
        assert "_on_fault" in stacks[procs[0].pid]
    finally:
        procs[0].kill()
        procs[0].wait(10)


def _read_available(proc: subprocess.Popen[str]) -> str:
    import fcntl

    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        return proc.stderr.read() or ""
    except (BlockingIOError, TypeError):
        return ""


def test_kill_sigkills_the_rank(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start(registry, tmp_path, 0)]
    inject(registry, procs, Fault("kill", None, 0, 0.1))
    assert procs[0].wait(15) == -signal.SIGKILL


def test_kill_host_kills_every_process_then_the_runtime(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start(registry, tmp_path, 0), start(registry, tmp_path, 1)]
    killed_self: list[bool] = []
    inject(
        registry, procs, Fault("kill_host", "algo-1", None, 0.1), kill_self=lambda: killed_self.append(True)
    )
    assert [p.wait(15) for p in procs] == [-signal.SIGKILL, -signal.SIGKILL]
    deadline = time.monotonic() + 5
    while not killed_self and time.monotonic() < deadline:
        time.sleep(0.05)
    assert killed_self == [True]


def test_faults_for_other_hosts_or_ranks_do_nothing(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start(registry, tmp_path, 0)]
    try:
        injectors = [
            inject(registry, procs, Fault("spot", None, 0, 0.0)),  # the agent's, not the host's
            inject(registry, procs, Fault("kill_host", "algo-2", None, 0.0)),
            inject(registry, procs, Fault("kill", "algo-2", 0, 0.0)),
            inject(registry, procs, Fault("kill", None, 5, 0.0)),
        ]
        time.sleep(1.0)
        assert procs[0].poll() is None
        assert all(i.applied == [] for i in injectors)
    finally:
        procs[0].kill()
        procs[0].wait(10)


def test_after_lines_fires_at_that_output_line_of_that_rank(registry: RankRegistry, tmp_path: Path) -> None:
    [fault] = parse_faults('[{"kind": "kill", "rank": 1, "after_lines": 3}]')
    assert fault.describe() == "kill of rank 1 after 3 lines"
    procs = [start(registry, tmp_path, 0), start(registry, tmp_path, 1)]
    try:
        injector = inject(registry, procs, fault)
        for _ in range(5):
            injector.on_output("rank 0")  # another rank's lines do not count
        injector.on_output("rank 1")
        injector.on_output("algo-1/rank 1")  # a split label (mpirun) names the rank too
        time.sleep(0.5)
        assert procs[1].poll() is None
        injector.on_output("rank 1")
        assert procs[1].wait(15) == -signal.SIGKILL
        assert procs[0].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
