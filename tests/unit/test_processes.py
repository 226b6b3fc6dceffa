"""smlaunch.contract.processes: the process helpers the local agent and the host supervisor share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from smlaunch.contract.processes import (
    die_with_parent,
    exit_code_of,
    free_port,
    line_chunks,
    pid_alive,
    pipe_reader,
    prefix_lines,
)

REPO = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent("""
    import signal, subprocess, sys, time
    from smlaunch.contract.processes import die_with_parent
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


def _reads(data: bytes, sizes: list[int]) -> Callable[[], bytes]:
    """A ``read()`` returning ``data`` cut at the given sizes (cycled), then ``b""``."""
    pieces, at, turn = [], 0, 0
    while at < len(data):
        pieces.append(data[at : at + sizes[turn % len(sizes)]])
        at += sizes[turn % len(sizes)]
        turn += 1
    return iter([*pieces, b""]).__next__


@pytest.mark.parametrize("sizes", [[1], [7, 3], [64], [1 << 16], [5, 1 << 20]])
def test_line_chunks_give_whole_lines_however_the_reads_cut_them(sizes: list[int]) -> None:
    lines = [f"line {i} é€ ".encode() + b"x" * (i * 37 % 301) for i in range(400)] + [b"y" * 70_000, b""]
    blocks = list(line_chunks(_reads(b"\n".join(lines) + b"\nlast without newline", sizes)))
    assert all(block.endswith(b"\n") for block in blocks)
    assert b"".join(blocks) == b"\n".join(lines) + b"\nlast without newline\n"


def test_line_chunks_drop_carriage_returns_before_newlines_and_replace_bad_utf8() -> None:
    data = b"dos\r\nprogress 50%\r100%\r\r\nbad \xff\xfe byte\ncut \xc3"
    assert b"".join(line_chunks(_reads(data, [3]))) == (
        b"dos\nprogress 50%\r100%\nbad \xef\xbf\xbd\xef\xbf\xbd byte\ncut \xef\xbf\xbd\n"
    )
    assert list(line_chunks(_reads(b"", [1]))) == []


def test_prefix_lines_prefixes_every_line_of_a_block() -> None:
    assert (
        prefix_lines(b"a\n\nb c\n", b"[algo-1/rank 0] ")
        == b"[algo-1/rank 0] a\n[algo-1/rank 0] \n[algo-1/rank 0] b c\n"
    )


def test_pipe_reader_passes_a_flood_and_a_trickle_on_whole() -> None:
    read_end, write_end = os.pipe()
    flood = b"".join(f"flood {i:06d} loss=0.1\n".encode() for i in range(50_000))

    def write() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as out:
            for i in range(0, len(flood), 97):  # a line at a time, as an unbuffered rank writes
                out.write(flood[i : i + 97])
            for i in range(20):
                out.write(f"trickle {i}\n".encode())
                time.sleep(0.002)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        got = b"".join(line_chunks(pipe_reader(read_end)))
    finally:
        writer.join()
        os.close(read_end)
    assert got == flood + b"".join(f"trickle {i}\n".encode() for i in range(20))


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/<pid>/task/<tid>/children is Linux-only")
def test_has_children_sees_a_child_until_it_is_reaped() -> None:
    code = textwrap.dedent("""
        import subprocess, sys
        from smlaunch.contract.processes import has_children
        before = has_children()
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        alive = has_children()
        child.wait()
        print(before, alive, has_children())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() in (["False", "True", "False"], ["None", "None", "None"])
