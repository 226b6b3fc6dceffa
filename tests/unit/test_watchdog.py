"""Stall watchdog: rank registration, stack dumps (py-spy and faulthandler), the reason it gives.

The ranks are real Python processes started with the rank bootstrap on their path, exactly as the
supervisor starts them; only the clock is fake, so no test waits for a stall timeout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.runtime.launchers.base import ProcessSpec
from smlaunch.runtime.supervision.hooks import RankRegistry, StartedProcess
from smlaunch.runtime.supervision.stacks import where
from smlaunch.runtime.supervision.watchdog import STALL_EXIT_CODE, StallWatchdog, hooks_from_environ

STUCK = """
import os, sys, time
def wait_for_peer():
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
def main():
    wait_for_peer()
main()
"""

PY_SPY_DUMP = """\
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    wait (threading.py:320)
    all_reduce (/site/torch/distributed/c10d.py:2050)
    train_step (/opt/ml/code/train.py:42)
    main (/opt/ml/code/train.py:60)
    <module> (/opt/ml/code/train.py:64)
Thread 4250 (idle): "pin_memory"
    _worker (/site/torch/utils/data/_utils/pin_memory.py:50)
"""

FAULTHANDLER_DUMP = """\
Thread 0x00007fad0c8546c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007fad0d696b80 (most recent call first):
  File "/usr/lib/python3.11/selectors.py", line 415 in select
  File "/opt/ml/code/train.py", line 12 in wait_for_peer
  File "/opt/ml/code/train.py", line 20 in <module>
"""


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry() -> Iterator[RankRegistry]:
    reg = RankRegistry()
    yield reg
    reg.close()


def start_rank(
    registry: RankRegistry, tmp_path: Path, rank: int, script: str = STUCK
) -> subprocess.Popen[str]:
    (tmp_path / "train.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMLAUNCH_", "SM_"))}
    env.update({"RANK": str(rank), "SM_CURRENT_HOST": "algo-1", "PYTHONUNBUFFERED": "1"})
    spec = registry.prepare(ProcessSpec(label=f"rank {rank}", argv=[], env=env, cwd=str(tmp_path)))
    proc = subprocess.Popen(
        [sys.executable, "train.py"], cwd=tmp_path, env=spec.env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_where_reads_py_spy_and_faulthandler_dumps() -> None:
    assert where(PY_SPY_DUMP, "/opt/ml/code").startswith(
        "train.py:42 in train_step (inside wait at threading.py:320)"
    )
    assert where(FAULTHANDLER_DUMP, "/opt/ml/code").startswith("train.py:12 in wait_for_peer")
    assert where("", "/opt/ml/code") == "no Python stack available"
    assert where(PY_SPY_DUMP) == "threading.py:320 in wait"


def test_registry_finds_ranks_it_did_not_spawn(registry: RankRegistry, tmp_path: Path) -> None:
    procs = [start_rank(registry, tmp_path, rank) for rank in (0, 1)]
    try:
        ranks = registry.ranks()
        assert [(r.rank, r.host, r.pid) for r in ranks] == [
            (0, "algo-1", procs[0].pid),
            (1, "algo-1", procs[1].pid),
        ]
        assert registry.find(1, "algo-1") is not None and registry.find(1, "algo-2") is None
    finally:
        stop(procs)
    assert registry.ranks() == []  # dead ranks are not reported


@pytest.mark.parametrize(
    "dumper",
    [
        pytest.param("py-spy", marks=pytest.mark.skipif(shutil.which("py-spy") is None, reason="no py-spy")),
        "faulthandler",
    ],
)
def test_stall_dumps_every_stack_and_names_where_each_rank_was(
    registry: RankRegistry, tmp_path: Path, dumper: str
) -> None:
    clock = FakeClock()
    logged: list[str] = []
    output = tmp_path / "output-data"
    watchdog = StallWatchdog(
        "algo-1",
        registry,
        30,
        logged.append,
        output_dir=output,
        code_dir=tmp_path,
        dumper=dumper,
        clock=clock,
    )
    procs = [start_rank(registry, tmp_path, rank) for rank in (0, 1)]
    try:
        watchdog.on_start([StartedProcess(f"rank {i}", i, p.pid) for i, p in enumerate(procs)])
        watchdog.on_output("rank 0")
        clock.now += 300  # rank 1 is still starting (import torch on a busy machine): no stall
        assert watchdog.poll() is None
        watchdog.on_output("rank 1")  # every rank is under way: the stall clock starts
        clock.now += 29
        assert watchdog.poll() is None
        watchdog.on_output("rank 0")  # output resets the stall clock
        clock.now += 29
        assert watchdog.poll() is None
        clock.now += 2
        failure = watchdog.poll()
        assert failure is not None
        assert watchdog.poll() is None  # fires once
    finally:
        stop(procs)
    assert failure.exit_code == STALL_EXIT_CODE
    text = failure.describe()
    assert text.startswith("Stalled: no process on host algo-1 wrote output for 30 s")
    assert contract.SMLAUNCH_STALL_TIMEOUT_SECONDS in text
    for rank, proc in enumerate(procs):
        assert f"rank {rank} (algo-1, pid {proc.pid}): train.py:" in text
    assert text.count("in wait_for_peer") == 2, text
    dump = (output / "smlaunch-stacks-algo-1.txt").read_text()
    assert dump.count("wait_for_peer") >= 2 and "main" in dump
    assert any("stacks:" in line and "wait_for_peer" in line for line in logged)


# A stand-in for torch.distributed (importing torch takes seconds): the rank bootstrap must wrap its
# init_process_group however the script reaches it.
FAKE_DISTRIBUTED = '''
def init_process_group(backend=None, **kwargs):
    """The real one's docstring."""
    print("init", backend, flush=True)
'''

FIRST_COLLECTIVE = """
import sys, time
from torch.distributed import init_process_group
import torch.distributed as dist
assert dist.init_process_group.__doc__ == "The real one's docstring."
print("ready", flush=True)
sys.stdin.readline()
init_process_group("gloo")
while True:
    time.sleep(0.05)
"""


def test_first_collective_marks_a_silent_rank_under_way(registry: RankRegistry, tmp_path: Path) -> None:
    package = tmp_path / "torch" / "distributed"
    package.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(FAKE_DISTRIBUTED)
    clock = FakeClock()
    watchdog = StallWatchdog("algo-1", registry, 5, lambda _m: None, clock=clock)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMLAUNCH_", "SM_"))}
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env.update({"RANK": "0", "SM_CURRENT_HOST": "algo-1", "PYTHONPATH": path})
    spec = registry.prepare(ProcessSpec(label="rank 0", argv=[], env=env, cwd=str(tmp_path)))
    (tmp_path / "train.py").write_text(FIRST_COLLECTIVE)
    proc = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        env=spec.env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"  # read here: the watchdog never sees it
        watchdog.on_start([StartedProcess("rank 0", 0, proc.pid)])
        clock.now += 60
        assert watchdog.poll() is None and registry.live_ranks() == set()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "init gloo"  # the original ran, with its arguments
        assert registry.live_ranks() == {0}
        assert watchdog.poll() is None  # under way from now on
        clock.now += 6
        assert watchdog.poll() is not None
    finally:
        stop([proc])


def test_no_stall_once_a_process_exited(registry: RankRegistry) -> None:
    clock = FakeClock()
    watchdog = StallWatchdog("algo-1", registry, 5, lambda _m: None, clock=clock)
    watchdog.on_start([])
    watchdog.on_exit("rank 1", 0)
    clock.now += 60
    assert watchdog.poll() is None


def test_hooks_from_environ_validates_and_builds(tmp_path: Path) -> None:
    hooks = hooks_from_environ("algo-1", {}, print)
    assert [type(h).__name__ for h in hooks] == ["RankRegistry"]
    environ = {
        contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "30",
        contract.BASE_DIR_ENV: str(tmp_path),
        contract.SMLAUNCH_FAULTS: '[{"kind": "kill", "rank": 0}]',
    }
    hooks = hooks_from_environ("algo-1", environ, print)
    assert [type(h).__name__ for h in hooks] == ["RankRegistry", "StallWatchdog", "FaultInjector"]
    assert hooks_from_environ("algo-1", {contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "0"}, print)[1:] == []
    bad_values = [
        ({contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "soon"}, contract.SMLAUNCH_STALL_TIMEOUT_SECONDS),
        ({contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "5", contract.SMLAUNCH_STACK_DUMPER: "gdb"}, "gdb"),
        ({contract.SMLAUNCH_FAULTS: "[{}]"}, contract.SMLAUNCH_FAULTS),
    ]
    for environ, named in bad_values:
        with pytest.raises(HostConfigurationError) as info:
            hooks_from_environ("algo-1", environ, print)
        assert named in str(info.value) and "Fix:" in str(info.value)


def test_registry_prepare_puts_the_bootstrap_first_on_the_path(registry: RankRegistry) -> None:
    spec = registry.prepare(ProcessSpec(label="rank 0", argv=["x"], env={"PYTHONPATH": "/code"}, cwd="/"))
    first, rest = spec.env["PYTHONPATH"].split(os.pathsep, 1)
    assert Path(first, "sitecustomize.py").is_file() and rest == "/code"
    assert spec.env["SMLAUNCH_RANK_DIR"] == str(registry.dir)
