"""Runs a host's :class:`~smlaunch.runtime.launchers.base.LaunchPlan`: spawn, prefix output, fail fast, stop.

Written once for every launch strategy. It owns the processes it starts and guarantees that none
outlives the host's part of the job.

Failure policy (one policy for every launcher; ``torch.distributed.elastic``'s agent is the model):

1. **Spawning.** Every :class:`ProcessSpec` starts from its argv list (never a shell, so arguments
   are never re-split), in its own session and process group, with ``PR_SET_PDEATHSIG=SIGKILL`` so
   that a rank dies with the runtime even when the runtime itself is SIGKILLed. Before anything
   starts, the resolved topology (launcher, hosts, ranks, master, backend, commands) is logged once.
2. **Output.** stdout and stderr of every process are read in 64 KiB chunks and printed, whole
   lines only and a chunk's lines in one write, as ``[<host>/<label>] <line>`` (``[algo-2/rank 5]
   loss=0.3``) on the runtime's stdout and stderr respectively; the supervisor's own lines read
   ``[<host>] ...``. The last 100 stderr lines of each process are kept, and the last Python
   traceback is kept whole.
3. **First failure wins.** The first process that exits non-zero is the job's root cause: every
   other process group gets SIGTERM at once, and SIGKILL after ``fail_fast_grace`` seconds (3 s,
   so the host ends within 5 s). Exits that follow (peers that lost their collective, ranks killed
   by the policy) are recorded but never reported as the cause.
4. **Exit code.** The host exits with the failing process's exit code, unflattened; a death by
   signal N is ``128 + N`` (137 for SIGKILL, 143 for SIGTERM), as a shell reports it.
5. **Stop.** SIGTERM or SIGINT to the runtime (StopTrainingJob, ``max_run``, spot interruption,
   Ctrl-C) is forwarded as SIGTERM to every process group (but those the scheduler signalled
   itself: ``ProcessSpec.signalled_with_host``), so user code can checkpoint; SIGKILL
   follows after ``stop_grace`` seconds (``SMLAUNCH_STOP_GRACE_SECONDS``, default 120, as SageMaker
   allows). A second signal kills at once. The host then exits ``128 + signum`` of the signal it got.
   SIGHUP means the process that started the host is gone (the local agent gives its hosts
   ``PR_SET_PDEATHSIG=SIGHUP``): every process is SIGKILLed at once, and 6 still runs. A signal is
   acted on within :data:`SIGNAL_CHECK_SECONDS`, whichever of the runtime's threads took it.
6. **No leftovers.** When the last process has exited, every process group the supervisor created
   is SIGKILLed, so grandchildren (data loader workers, shells) cannot survive; with a
   :class:`~smlaunch.runtime.supervision.containment.Containment` (``python -m smlaunch.runtime`` always
   passes one), daemons that
   left those groups (``start_new_session=True``, double forks) are found through the subreaper and
   the host's cgroup, SIGKILLed, reaped, and named in the log. Every wait is bounded.
7. **Hang.** With ``SMLAUNCH_STALL_TIMEOUT_SECONDS`` set, when no process has exited and none has
   written output for that long, every rank's Python stack is dumped (py-spy, else faulthandler)
   into the log and ``output/data/smlaunch-stacks-<host>.txt``, and the job ends as in 3 with exit
   code 124 and a reason naming where each rank was (:mod:`smlaunch.runtime.supervision.watchdog`).
8. **Hooks.** The watchdog and fault injection (:mod:`smlaunch.runtime.supervision.fault_injector`,
``SMLAUNCH_FAULTS``) are
   :class:`smlaunch.runtime.supervision.hooks.SupervisorHook` objects (``hooks=``; :meth:`from_environ` adds
   them).

Reporting the outcome (the ``success`` / ``failure`` files) is :mod:`smlaunch.runtime.report`'s job;
the supervisor returns a :class:`~smlaunch.runtime.launchers.base.RunResult` with the per-process exit
codes and the first failure (the result types live beside the plan types, below the supervisor and
its hooks alike).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from smlaunch import contract
from smlaunch.contract.processes import die_with_parent, exit_code_of, line_chunks, pipe_reader, prefix_lines
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessExit, ProcessSpec, RankFailure, RunResult
from smlaunch.runtime.supervision.containment import Containment
from smlaunch.runtime.supervision.hooks import StartedProcess, SupervisorHook
from smlaunch.runtime.supervision.watchdog import hooks_from_environ
from smlaunch.runtime.tracebacks import CHAINED, is_ignored_traceback

STDERR_TAIL_LINES = 100
TRACEBACK_MAX_LINES = 400
DEFAULT_FAIL_FAST_GRACE = 3.0
KILL_WAIT_SECONDS = 10.0
READER_JOIN_SECONDS = 2.0
SIGNAL_CHECK_SECONDS = 0.2
"""The supervisor's loop never waits longer than this for an event. The kernel may give a
process-directed signal to any thread (a reader's, a waiter's); Python runs the handler in the
main thread only, and a main thread waiting without a timeout would not wake up to run it."""

_TRACEBACK_HEAD = "Traceback (most recent call last):"


class _StderrTail:
    """The last lines of a stream, plus the last Python traceback (with its chained causes) whole."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.traceback: list[str] | None = None
        self._previous = ""

    def add(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith(_TRACEBACK_HEAD):
            # A chained exception, or one Python printed and ignored (at shutdown, typically), goes
            # on the traceback already kept: the cause stays in the tail.
            if self.traceback is not None and (
                self._previous.strip() in CHAINED or is_ignored_traceback(self._previous)
            ):
                self.traceback.append(line)
            else:
                self.traceback = [line]
        elif self.traceback is not None and len(self.traceback) < TRACEBACK_MAX_LINES:
            self.traceback.append(line)
        if line.strip():
            self._previous = line

    def add_block(self, text: str) -> None:
        """:meth:`add` every line of ``text`` (lines joined by ``\\n``); line by line only where a
        traceback starts or goes on, else only the last lines are kept, in bulk."""
        lines = text.split("\n")
        open_traceback = self.traceback is not None and len(self.traceback) < TRACEBACK_MAX_LINES
        if open_traceback or _TRACEBACK_HEAD in text:
            for line in lines:
                self.add(line)
            return
        self.lines.extend(lines[-STDERR_TAIL_LINES:])
        for line in reversed(lines):
            if line.strip():
                self._previous = line
                break

    def tail(self) -> list[str]:
        if self.traceback:
            return list(self.traceback)
        return list(self.lines)[-30:]


class _Proc:
    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.popen = popen
        self.pgid = popen.pid  # start_new_session: the process leads its own group
        self.stderr = _StderrTail()
        self.readers: list[threading.Thread] = []
        self.exited = False


class Supervisor:
    """Runs one host's processes under the failure policy of the module docstring."""

    def __init__(
        self,
        host: str,
        stop_grace: float = contract.DEFAULT_STOP_GRACE_SECONDS,
        fail_fast_grace: float = DEFAULT_FAIL_FAST_GRACE,
        prefix_output: bool = True,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
        hooks: Sequence[SupervisorHook] = (),
        containment: Containment | None = None,
        seal: Callable[[], None] | None = None,
        verbose: bool = False,
        topology_file: Path | None = None,
    ) -> None:
        self.host = host
        self.verbose = verbose
        """Log the plan's whole topology block (``SMLAUNCH_VERBOSE``); else its one-line summary."""
        self.topology_file = topology_file
        """Where the plan's :meth:`~smlaunch.runtime.launchers.base.LaunchPlan.record` is written before any
        process starts (``output/topology.json``), if anywhere."""
        self.containment = containment
        """What keeps daemons the ranks start inside the host
        (:mod:`smlaunch.runtime.supervision.containment`); with
        None, only the ranks' process groups are killed at the end."""
        self.seal = seal
        """Run in each child before ``exec``, after it joined the host's cgroup: what it may not
        write (the requirements cache but for the job's own environment:
        :mod:`smlaunch.runtime.requirements_cache`)."""
        self.hooks = list(hooks)
        """Watchdog / fault-injection hooks (:class:`smlaunch.runtime.supervision.hooks.SupervisorHook`)."""
        self.stop_grace = stop_grace
        self.fail_fast_grace = fail_fast_grace
        self.prefix_output = prefix_output
        self._stdout = stdout
        self._stderr = stderr
        self._print_lock = threading.Lock()
        # SimpleQueue: its put() is reentrant, so the signal handler may interrupt a get() or put()
        # of the main thread (which holds a Queue's lock then) without deadlocking it.
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    @classmethod
    def from_environ(cls, host: str, environ: Mapping[str, str], **kwargs: Any) -> Supervisor:
        """Read ``SMLAUNCH_STOP_GRACE_SECONDS`` and ``SMLAUNCH_LOG_PREFIX`` from ``environ``."""
        raw = environ.get(contract.SMLAUNCH_STOP_GRACE_SECONDS)
        grace = contract.DEFAULT_STOP_GRACE_SECONDS
        if raw:
            try:
                grace = float(raw)
            except ValueError:
                grace = -1.0
            if grace < 0:
                from smlaunch.contract.errors import HostConfigurationError

                raise HostConfigurationError(
                    contract.SMLAUNCH_STOP_GRACE_SECONDS, raw, "must be a number of seconds >= 0", "e.g. 120"
                )
        prefix = environ.get(contract.SMLAUNCH_LOG_PREFIX, "1") != "0"
        supervisor = cls(host, stop_grace=grace, prefix_output=prefix, **kwargs)
        supervisor.hooks.extend(hooks_from_environ(host, environ, supervisor.log))  # watchdog, faults
        return supervisor

    # --- output ----------------------------------------------------------------------------------

    @property
    def stdout(self) -> IO[str]:
        return self._stdout or sys.stdout

    @property
    def stderr(self) -> IO[str]:
        return self._stderr or sys.stderr

    def _emit(self, stream: IO[str], text: str) -> None:
        with self._print_lock:
            try:
                stream.write(text + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed or broken log stream must never stop the job

    def _emit_bytes(self, stream: IO[str], data: bytes) -> None:
        """Write UTF-8 lines (with their ``\\n``) as they are, to the binary stream under ``stream``."""
        with self._print_lock:
            try:
                binary = getattr(stream, "buffer", None)
                if binary is None:
                    stream.write(data.decode("utf-8"))
                    stream.flush()
                else:
                    stream.flush()  # what was written as text goes first
                    binary.write(data)
                    binary.flush()
            except (OSError, ValueError):
                pass  # a closed or broken log stream must never stop the job

    def log(self, message: str) -> None:
        """A supervisor line: ``[<host>] message``."""
        self._emit(self.stdout, f"[{self.host}] {message}")

    def _log_topology(self, plan: LaunchPlan) -> None:
        if self.topology_file is not None:
            record = plan.record()
            if self.containment is not None:
                record["containment"] = self.containment.describe()
            try:
                self.topology_file.write_text(json.dumps(record, indent=2) + "\n")
            except OSError as error:  # only a description: the job goes on without it
                self.log(f"could not write {self.topology_file.name}: {error.strerror}")
        if not self.verbose:
            self.log(f"launcher: {plan.launcher}" + (f", {plan.summary}" if plan.summary else ""))
            return
        lines = [f"launcher: {plan.launcher}"]
        for key, value in plan.topology.items():
            lines.append(f"  {key}: {value}")
        if self.containment is not None:
            lines.append(f"  containment: {self.containment.describe()}")
        for spec in plan.processes:
            lines.append(f"  [{spec.label}] {shlex.join(spec.argv)}")
        for line in lines:
            self.log(line)

    def _read(self, proc: _Proc, pipe: IO[bytes], is_stderr: bool) -> None:
        """Copy a process's stream to ours: read in large chunks, prefix whole lines in bulk.

        A line is only ever printed whole; a last line without ``\\n`` is printed when the stream ends.
        """
        stream = self.stderr if is_stderr else self.stdout
        for block in line_chunks(pipe_reader(pipe.fileno())):
            if proc.spec.split_line is None:
                self._print_block(proc, stream, is_stderr, block)
            else:
                self._print_lines(proc, stream, is_stderr, block[:-1].decode("utf-8").split("\n"))
        pipe.close()

    def _print_block(self, proc: _Proc, stream: IO[str], is_stderr: bool, block: bytes) -> None:
        """Print one block of a process's whole lines (UTF-8, each ending with ``\\n``) with its prefix."""
        label = proc.spec.label
        if is_stderr:
            proc.stderr.add_block(block[:-1].decode("utf-8"))
        if self.hooks:
            count = block.count(b"\n")
            for hook in self.hooks:
                hook.on_output(label, count)
        if self.prefix_output:
            block = prefix_lines(block, f"[{self._where(label)}] ".encode())
        self._emit_bytes(stream, block)

    def _where(self, label: str) -> str:
        """What a line's prefix names: ``<host>/<label>``, or a label naming its own host as is
        (``algo-2/rank 3``: one mpirun serving emulated hosts)."""
        return label if "/" in label else f"{self.host}/{label}"

    def _print_lines(self, proc: _Proc, stream: IO[str], is_stderr: bool, lines: list[str]) -> None:
        """Print one chunk of a process's lines (without their ``\\n``), each labelled by the
        process's ``split_line`` (one ``mpirun`` serving several ranks), with their prefixes."""
        split = proc.spec.split_line
        assert split is not None
        labelled: list[tuple[str, list[str]]] = []
        for line in lines:
            split_label, text = split(line)
            label = split_label or proc.spec.label
            if labelled and labelled[-1][0] == label:
                labelled[-1][1].append(text)
            else:
                labelled.append((label, [text]))
        for label, texts in labelled:
            if is_stderr:
                for text in texts:
                    proc.stderr.add(text)
            for hook in self.hooks:
                hook.on_output(label, len(texts))
            if self.prefix_output:
                prefix = f"[{self._where(label)}] "
                self._emit(stream, prefix + ("\n" + prefix).join(texts))
            else:
                self._emit(stream, "\n".join(texts))

    # --- processes -------------------------------------------------------------------------------

    def _spawn(self, spec: ProcessSpec) -> _Proc:
        popen = subprocess.Popen(
            spec.argv,
            env=spec.env,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGKILL, self._in_child),
        )
        proc = _Proc(spec, popen)
        assert popen.stdout is not None and popen.stderr is not None
        for pipe, is_stderr in ((popen.stdout, False), (popen.stderr, True)):
            reader = threading.Thread(target=self._read, args=(proc, pipe, is_stderr), daemon=True)
            reader.start()
            proc.readers.append(reader)
        threading.Thread(target=self._wait, args=(proc,), daemon=True).start()
        return proc

    def _in_child(self) -> None:
        """What a child does between ``fork`` and ``exec``: join the host's cgroup (from this
        user namespace), then enter its sealed mount namespace."""
        if self.containment is not None:
            self.containment.join_in_child()
        if self.seal is not None:
            self.seal()

    def _wait(self, proc: _Proc) -> None:
        returncode = proc.popen.wait()
        self._events.put(("exit", (proc, exit_code_of(returncode), time.time())))

    @staticmethod
    def _signal_group(proc: _Proc, signum: int) -> None:
        try:
            os.killpg(proc.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._events.put(("signal", signum))

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop the job as if the runtime had received ``signum`` (thread-safe)."""
        self._events.put(("signal", signum))

    def _install_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    # --- the loop --------------------------------------------------------------------------------

    def run(self, plan: LaunchPlan) -> RunResult:
        """Start every process of ``plan``, supervise them to the end, and say what happened."""
        result = RunResult(host=self.host)
        if self.containment is not None:
            self.containment.enter()
        self._log_topology(plan)
        previous = self._install_handlers()
        procs: list[_Proc] = []
        try:
            for spec in plan.processes:
                for hook in self.hooks:
                    spec = hook.prepare(spec)
                procs.append(self._spawn(spec))
            if self.hooks:
                started = [StartedProcess(p.spec.label, p.spec.rank, p.popen.pid) for p in procs]
                for hook in self.hooks:
                    hook.on_start(started)
            self._supervise(procs, result)
        finally:
            for proc in procs:
                self._signal_group(proc, signal.SIGKILL)
            if self.containment is not None:
                left = self.containment.sweep()
                if left:
                    self.log(f"killed {len(left)} process(es) the ranks left behind: {', '.join(left)}")
            for proc in procs:
                for reader in proc.readers:
                    reader.join(READER_JOIN_SECONDS)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for hook in self.hooks:
                hook.close()
        return result

    def _supervise(self, procs: list[_Proc], result: RunResult) -> None:
        alive = {id(p): p for p in procs}
        kill_at: float | None = None
        give_up_at: float | None = None
        while alive:
            now = time.monotonic()
            deadlines = [max(0.0, d - now) for d in (kill_at, give_up_at) if d is not None]
            timeout = min([SIGNAL_CHECK_SECONDS, *deadlines])  # hooks are polled as often
            try:
                kind, payload = self._events.get(timeout=timeout)
            except queue.Empty:
                kind, payload = "tick", None
            if kind == "exit":
                proc, code, when = payload
                proc.exited = True
                alive.pop(id(proc), None)
                result.exits.append(ProcessExit(proc.spec.label, proc.spec.rank, code, when))
                for hook in self.hooks:
                    hook.on_exit(proc.spec.label, code)
                if code != 0 and result.first_failure is None and result.stop_signal is None:
                    for reader in proc.readers:  # the tail must be complete before it is reported
                        reader.join(READER_JOIN_SECONDS)
                    result.first_failure = RankFailure(
                        self.host, proc.spec.label, proc.spec.rank, code, when, proc.stderr.tail()
                    )
                    if alive:  # alone, its exit is said by the host's closing line
                        self.log(
                            f"{proc.spec.label} exited with code {code}: ending the other "
                            f"{len(alive)} process(es) (SIGTERM, SIGKILL after {self.fail_fast_grace:g} s)"
                        )
                    for other in alive.values():
                        self._signal_group(other, signal.SIGTERM)
                    kill_at = time.monotonic() + self.fail_fast_grace
            elif kind == "signal":
                signum = int(payload)
                if signum == signal.SIGHUP:  # the agent that started this host is gone
                    if result.stop_signal is None and result.first_failure is None:
                        result.stop_signal = signum
                    self.log(
                        f"received SIGHUP (the process that started this host is gone): killing "
                        f"{len(alive)} process(es) now"
                    )
                    kill_at = time.monotonic()
                elif result.stop_signal is None and result.first_failure is None:
                    result.stop_signal = signum
                    self.log(
                        f"received {signal.Signals(signum).name}: forwarding SIGTERM to {len(alive)} "
                        f"process(es), SIGKILL after {self.stop_grace:g} s"
                    )
                    for proc in alive.values():
                        if not proc.spec.signalled_with_host:
                            self._signal_group(proc, signal.SIGTERM)
                    kill_at = time.monotonic() + self.stop_grace
                else:
                    self.log(f"received {signal.Signals(signum).name} again: killing every process now")
                    kill_at = time.monotonic()
            for hook in self.hooks:
                verdict = hook.poll() if alive else None
                if verdict is not None and result.first_failure is None and result.stop_signal is None:
                    result.first_failure = verdict
                    self.log(f"{verdict.label} ended the job: SIGTERM to {len(alive)} process(es)")
                    for other in alive.values():
                        self._signal_group(other, signal.SIGTERM)
                    kill_at = time.monotonic() + self.fail_fast_grace
            now = time.monotonic()
            if kill_at is not None and now >= kill_at and alive:
                self.log(f"SIGKILL to {len(alive)} process(es) still running")
                for proc in alive.values():
                    self._signal_group(proc, signal.SIGKILL)
                kill_at = None
                give_up_at = now + KILL_WAIT_SECONDS
            if give_up_at is not None and now >= give_up_at and alive:
                result.unreaped = [p.spec.label for p in alive.values()]
                self.log(f"processes did not exit after SIGKILL: {result.unreaped}")
                return
