"""runtime.processes: the process helpers the local agent and the host supervisor share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runtime.processes import die_with_parent, exit_code_of, free_port, pid_alive

REPO = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent("""
    import signal, subprocess, sys, time
    from runtime.processes import die_with_parent
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             preexec_fn=die_with_parent(signal.SIGTERM))
    print(child.pid, flush=True)
    time.sleep(120)
""")


def test_free_port_can_be_bound_at_once() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_exit_codes_read_as_a_shell_reports_them() -> None:
    assert [exit_code_of(c) for c in (0, 7, -signal.SIGKILL, -signal.SIGHUP)] == [0, 7, 137, 129]


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_child_dies_with_its_parent_even_when_the_parent_is_sigkilled() -> None:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert pid_alive(child)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child), "the child outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait(timeout=30)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_then_hook_runs_in_the_child_before_its_program(tmp_path: Path) -> None:
    marker = tmp_path / "joined"

    def join() -> None:
        marker.write_text(str(os.getpid()))

    hook = die_with_parent(signal.SIGKILL, join)
    assert hook is not None
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        preexec_fn=hook,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert marker.read_text() == child.stdout.strip()


def test_a_zombie_is_not_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(proc.pid)  # exited, not yet reaped
    proc.wait(timeout=30)
