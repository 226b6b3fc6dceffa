"""The supervisor's policy on small real processes (``python -c``): prefixes, fail-fast, exit codes,
traceback capture, stop forwarding, and the success/failure reports."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.contract.processes import exit_code_of
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec, RankFailure, RunResult
from smlaunch.runtime.report import report_run, write_failure
from smlaunch.runtime.supervision.supervisor import Supervisor


def spec(label: str, code: str, rank: int | None = None, **kwargs: object) -> ProcessSpec:
    return ProcessSpec(
        label=label,
        argv=[sys.executable, "-c", code],
        env=dict(os.environ),
        cwd=os.getcwd(),
        rank=rank,
        **kwargs,  # type: ignore[arg-type]
    )


def make(host: str = "algo-1", **kwargs: object) -> tuple[Supervisor, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Supervisor(host, stdout=out, stderr=err, **kwargs), out, err  # type: ignore[arg-type]


def test_exit_code_of_signal_deaths() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGKILL) == 137
    assert exit_code_of(-signal.SIGTERM) == 143


def test_output_is_prefixed_per_host_and_rank_and_streams_are_kept_apart() -> None:
    sup, out, err = make("algo-2", verbose=True)
    plan = LaunchPlan(
        "test",
        [
            spec("rank 4", "import sys; print('hello'); print('oops', file=sys.stderr)", 4),
            spec("rank 5", "print('a\\nb', end='')", 5),
        ],
        {"world size": 6},
        "ranks 4-5 of 6",
    )
    result = sup.run(plan)
    assert result.exit_code == 0 and result.succeeded
    assert result.exit_codes == {"rank 4": 0, "rank 5": 0}
    stdout = out.getvalue().splitlines()
    assert "[algo-2/rank 4] hello" in stdout
    assert "[algo-2/rank 5] a" in stdout and "[algo-2/rank 5] b" in stdout  # last line without newline
    assert "[algo-2/rank 4] oops" in err.getvalue().splitlines()
    assert "[algo-2] launcher: test" in stdout and "[algo-2]   world size: 6" in stdout
    # The topology block comes before any rank output.
    assert stdout.index("[algo-2] launcher: test") < stdout.index("[algo-2/rank 4] hello")


def test_without_verbose_a_host_says_in_one_line_what_it_starts(tmp_path: Path) -> None:
    sup, out, _ = make("algo-2", topology_file=tmp_path / "topology.json")
    plan = LaunchPlan("test", [spec("rank 4", "print('hello')", 4)], {"world size": 6}, "rank 4 of 6")
    assert sup.run(plan).exit_code == 0
    assert out.getvalue().splitlines() == ["[algo-2] launcher: test, rank 4 of 6", "[algo-2/rank 4] hello"]
    # The whole plan is written for describe() (HostTopology), the processes' environments left out.
    record = json.loads((tmp_path / "topology.json").read_text())
    assert record == {
        "launcher": "test",
        "summary": "rank 4 of 6",
        "topology": {"world size": 6},
        "processes": [{"label": "rank 4", "argv": plan.processes[0].argv}],
    }


def test_prefix_can_be_turned_off() -> None:
    sup = Supervisor.from_environ("algo-1", {contract.SMLAUNCH_LOG_PREFIX: "0"}, stdout=io.StringIO())
    out = sup.stdout
    sup.run(LaunchPlan("t", [spec("rank 0", "print('plain')", 0)]))
    assert "plain" in out.getvalue().splitlines()  # type: ignore[attr-defined]


def test_split_line_relabels_multiplexed_output() -> None:
    def split(line: str) -> tuple[str | None, str]:
        if line.startswith("[1,"):
            tag, _, text = line.partition("]")
            return f"rank {tag[3:]}", text.removeprefix("<stdout>:")
        return None, line

    sup, out, _ = make()
    sup.run(LaunchPlan("mpi", [spec("mpirun", "print('[1,3]<stdout>:x'); print('plain')", split_line=split)]))
    lines = out.getvalue().splitlines()
    assert "[algo-1/rank 3] x" in lines and "[algo-1/mpirun] plain" in lines


def test_first_failure_ends_the_others_and_sets_the_exit_code(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    survivor = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    crasher = (
        "import sys, time, traceback\n"
        "time.sleep(0.5)\n"
        "try:\n    raise KeyError('missing')\nexcept KeyError:\n"
        "    try:\n        raise RuntimeError('while handling')\n"
        "    except RuntimeError:\n        traceback.print_exc()\n"
        "sys.exit(7)\n"
    )
    sup, out, _ = make(fail_fast_grace=1.0)
    result = sup.run(LaunchPlan("t", [spec("rank 0", survivor, 0), spec("rank 1", crasher, 1)]))
    assert result.exit_code == 7
    assert "[algo-1] rank 1 exited with code 7: ending the other 1 process(es)" in out.getvalue()
    failure = result.first_failure
    assert failure is not None and (failure.label, failure.rank, failure.exit_code) == ("rank 1", 1, 7)
    assert result.exit_codes["rank 0"] == 128 + signal.SIGTERM
    # Both chained tracebacks are kept, from the first one's head.
    assert failure.stderr_tail[0] == "Traceback (most recent call last):"
    assert any("KeyError: 'missing'" in line for line in failure.stderr_tail)
    assert failure.stderr_tail[-1] == "RuntimeError: while handling"
    assert failure.error_message == "RuntimeError: while handling"
    assert not psutil.pid_exists(int(marker.read_text())) or (
        psutil.Process(int(marker.read_text())).status() == psutil.STATUS_ZOMBIE
    )


def test_a_lone_process_that_fails_ends_no_others() -> None:
    sup, out, _ = make()
    assert sup.run(LaunchPlan("t", [spec("rank 0", "import sys; sys.exit(3)", 0)])).exit_code == 3
    assert "ending the other" not in out.getvalue()  # never "ending the other 0 process(es)"


def test_the_tail_of_a_stderr_flood_keeps_the_last_traceback_whole() -> None:
    # Thousands of stderr lines arrive in large blocks; the traceback within them is still kept
    # whole, chained causes included, and the lines that follow it are its continuation.
    crasher = (
        "import sys, traceback\n"
        "for i in range(20000):\n    print(f'noise {i}', file=sys.stderr)\n"
        "try:\n    raise KeyError('missing')\nexcept KeyError:\n"
        "    try:\n        raise RuntimeError('while handling')\n"
        "    except RuntimeError:\n        traceback.print_exc()\n"
        "for i in range(3):\n    print(f'after {i}', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    sup, _, err = make()
    result = sup.run(LaunchPlan("t", [spec("rank 0", crasher, 0)]))
    failure = result.first_failure
    assert failure is not None and failure.exit_code == 3
    assert failure.stderr_tail[0] == "Traceback (most recent call last):"
    assert any("KeyError: 'missing'" in line for line in failure.stderr_tail)
    assert failure.stderr_tail[-4:] == ["RuntimeError: while handling", "after 0", "after 1", "after 2"]
    assert failure.error_message == "RuntimeError: while handling"  # not what followed it
    assert not any(line.startswith("noise") for line in failure.stderr_tail)
    noise = [line for line in err.getvalue().splitlines() if line.startswith("[algo-1/rank 0] noise ")]
    assert noise == [f"[algo-1/rank 0] noise {i}" for i in range(20000)]


def test_an_error_python_ignores_at_shutdown_never_hides_the_cause() -> None:
    crasher = (
        "class Leaky:\n    def __del__(self):\n        raise AttributeError('gone')\n"
        "leaky = Leaky()\n"
        "raise OSError(28, 'No space left on device')\n"
    )
    sup, _, _ = make()
    failure = sup.run(LaunchPlan("t", [spec("rank 0", crasher, 0)])).first_failure
    assert failure is not None and failure.stderr_tail[0] == "Traceback (most recent call last):"
    assert "AttributeError: gone" in failure.stderr_tail  # kept, after the cause
    assert failure.error_message == "OSError: [Errno 28] No space left on device"


def test_a_rank_killed_by_a_signal_reports_128_plus_signum() -> None:
    sup, _, _ = make()
    result = sup.run(
        LaunchPlan("t", [spec("rank 0", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 0)])
    )
    assert result.exit_code == 137
    assert result.first_failure is not None
    assert "killed by SIGKILL" in result.first_failure.describe()


def test_ranks_that_ignore_sigterm_are_killed_after_the_grace() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    sup, _, _ = make(fail_fast_grace=0.5)
    result = sup.run(
        LaunchPlan(
            "t",
            [spec("rank 0", stubborn, 0), spec("rank 1", "import time, sys; time.sleep(1); sys.exit(2)", 1)],
        )
    )
    assert result.exit_code == 2
    assert result.exit_codes["rank 0"] == 137


def test_grandchildren_do_not_survive(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    sup, _, _ = make()
    assert sup.run(LaunchPlan("t", [spec("rank 0", code, 0)])).exit_code == 0
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "grandchild survived"
        time.sleep(0.05)


def test_request_stop_forwards_sigterm_and_returns_143(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time\n"
        f"def h(s, f):\n    open({str(tmp_path / 'got')!r}, 'w').write(str(s)); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, h)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    sup, out, _ = make(stop_grace=5)
    timer = threading.Timer(1.0, sup.request_stop)
    timer.start()
    result = sup.run(LaunchPlan("t", [spec("rank 0", code, 0)]))
    timer.join()
    assert (tmp_path / "got").read_text() == str(int(signal.SIGTERM))
    assert result.stop_signal == signal.SIGTERM and result.exit_code == 143 and result.first_failure is None
    assert "received SIGTERM" in out.getvalue()


def test_sighup_means_the_agent_is_gone_and_kills_at_once() -> None:
    # The rank ignores SIGTERM and the stop grace is long: only the immediate SIGKILL ends it.
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"
    sup, out, _ = make(stop_grace=600)
    timer = threading.Timer(1.0, sup.request_stop, args=(signal.SIGHUP,))
    timer.start()
    result = sup.run(LaunchPlan("t", [spec("rank 0", code, 0)]))
    timer.join()
    assert result.stop_signal == signal.SIGHUP and result.exit_code == 129
    assert result.exit_codes == {"rank 0": 137}
    assert "received SIGHUP (the process that started this host is gone)" in out.getvalue()


def test_a_signal_another_thread_takes_still_stops_the_job() -> None:
    # The kernel may hand a process-directed signal (SIGHUP from PR_SET_PDEATHSIG, a kill) to any
    # thread; Python runs the handler in the main thread only, so a main thread blocked without a
    # timeout would act on it only when some other event woke it: here, the rank's own end.
    code = "import time\nprint('up', flush=True)\ntime.sleep(20)\n"
    sup, out, _ = make(stop_grace=600)
    timer = threading.Timer(1.0, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGHUP))
    timer.start()
    result = sup.run(LaunchPlan("t", [spec("rank 0", code, 0)]))
    timer.join()
    assert result.stop_signal == signal.SIGHUP and result.exit_codes == {"rank 0": 137}
    assert "received SIGHUP" in out.getvalue()


def test_stop_grace_comes_from_the_environment() -> None:
    assert Supervisor.from_environ("h", {}).stop_grace == contract.DEFAULT_STOP_GRACE_SECONDS
    assert Supervisor.from_environ("h", {contract.SMLAUNCH_STOP_GRACE_SECONDS: "2.5"}).stop_grace == 2.5
    with pytest.raises(HostConfigurationError, match="SMLAUNCH_STOP_GRACE_SECONDS"):
        Supervisor.from_environ("h", {contract.SMLAUNCH_STOP_GRACE_SECONDS: "soon"})


def test_report_writes_success_or_failure_once(tmp_path: Path) -> None:
    paths = contract.Paths(tmp_path)
    assert report_run(paths, RunResult("algo-1")) == 0
    assert paths.success_file.exists()

    paths = contract.Paths(tmp_path / "b")
    failure = RankFailure(
        "algo-2", "rank 5", 5, 3, 123.5, ["Traceback (most recent call last):", "  x", "E: y"]
    )
    assert report_run(paths, RunResult("algo-2", first_failure=failure)) == 3
    text = paths.failure_file.read_text()
    assert text.splitlines()[0] == "AlgorithmError: rank 5 on host algo-2 exited with code 3"
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert details == {
        "host": "algo-2",
        "rank": 5,
        "label": "rank 5",
        "exit_code": 3,
        "time": 123.5,
        "reason": text,
        "kind": "failed",
    }
    # An existing failure file is never overwritten; failure.json carries what the file says.
    reason = write_failure(paths, "second", host="algo-2", kind="failed", exit_code=1)
    assert reason == text and paths.failure_file.read_text() == text
    assert not paths.success_file.exists()


def test_internal_errors_are_framework_errors_and_never_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import smlaunch.runtime.__main__ as entry
    import smlaunch.runtime.launchers
    from tests.functional._runtime_tree import write_host_tree

    paths = write_host_tree(tmp_path, "algo-1", ["algo-1"], {contract.HP_PROGRAM: '"train.py"'})

    def broken(env: object, python: str = sys.executable) -> object:
        raise OSError("launcher exploded")  # errno None: the toolkit exited 0 on this (bug 6)

    monkeypatch.setattr(smlaunch.runtime.launchers, "select_launcher", broken)
    code = entry.run({contract.BASE_DIR_ENV: str(tmp_path), contract.SMLAUNCH_NUM_GPUS: "0"})
    assert code == 1
    text = paths.failure_file.read_text()
    assert text.startswith("Framework Error: ") and "OSError: launcher exploded" in text
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert (details["kind"], details["exit_code"], details["host"]) == ("framework_error", 1, "algo-1")


class _BrokenPipe(io.StringIO):
    """The stdout of a host runtime whose agent died: its pipe has no reader any more."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_host_whose_output_pipe_broke_still_reports_its_ranks_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import smlaunch.runtime.__main__ as entry
    from tests.functional._runtime_tree import write_host_tree

    paths = write_host_tree(tmp_path, "algo-1", ["algo-1"], {contract.HP_PROGRAM: '"train.py"'})
    (paths.code_dir / "train.py").write_text("import sys\nprint('training')\nsys.exit(3)\n")
    monkeypatch.setattr(sys, "stdout", _BrokenPipe())
    code = entry.run({**os.environ, contract.BASE_DIR_ENV: str(tmp_path), contract.SMLAUNCH_NUM_GPUS: "0"})
    assert code == 3  # not 1: the broken log stream is not the job's failure
    assert paths.failure_file.read_text().endswith("exited with code 3")


def test_wait_for_hosts_is_bounded() -> None:
    from smlaunch.runtime.__main__ import wait_for_hosts

    logged: list[str] = []
    wait_for_hosts(["localhost"], 5, logged.append)
    assert logged == ["all 1 hosts resolve"]
    with pytest.raises(TimeoutError, match="did not resolve"):
        wait_for_hosts(["algo-unresolvable.invalid"], 0.3, logged.append)
