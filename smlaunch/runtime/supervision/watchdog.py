"""Hang detection: when a job stalls, dump every rank's Python stack, then end the job saying where
each rank was.

A distributed job that hangs (one rank stuck in a collective its peers never reach, a deadlocked
data loader) burns its whole ``max_run`` and tells the user nothing. The watchdog ends it early and
explains it. It fires when, on this host, **no process has exited, the job has not finished, and no
rank has written a line of output for the stall timeout** (``SMLAUNCH_STALL_TIMEOUT_SECONDS``; off
unless set, because a legitimately quiet script must not be killed by default). The stall is
counted only once **every rank of the host is under way**: it printed its first line, or reached its
first collective (``init_process_group``; :mod:`smlaunch.rank.boot` marks it). Time a rank spends
starting (``import torch`` on a busy machine can take longer than any stall timeout) is never a
stall; a rank that neither prints nor reaches a collective is never considered stalled. Then it:

1. dumps the Python stack of every rank of the host: with ``py-spy dump`` when it is installed
   (it reads a process from outside, even one stuck in C code), else through ``faulthandler``,
   which every rank registers on SIGUSR1 at start (:mod:`smlaunch.rank.boot`);
2. writes the dumps to ``output/data/smlaunch-stacks-<host>.txt`` (so they land in the job's
   ``output.tar.gz``) and to the log;
3. ends the job like a failing rank would (SIGTERM to every rank, SIGKILL after the fail-fast
   grace), with exit code :data:`STALL_EXIT_CODE` and a failure reason that names, per rank, the
   innermost frame of the user's code in its main thread (``rank 1: train.py:42 in train_step``).

The watchdog is a :class:`~smlaunch.runtime.supervision.hooks.SupervisorHook` that sees the ranks through a
:class:`~smlaunch.runtime.supervision.hooks.RankRegistry` (:mod:`smlaunch.runtime.supervision.hooks`) and
reads their stacks with
:mod:`smlaunch.runtime.supervision.stacks`; :func:`hooks_from_environ` assembles the hooks a host's
supervisor runs (the
registry, this watchdog, fault injection).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from smlaunch import contract
from smlaunch.contract.artifact_tree import write_file
from smlaunch.contract.faults import parse_faults
from smlaunch.runtime.launchers.base import RankFailure
from smlaunch.runtime.supervision.fault_injector import FaultInjector
from smlaunch.runtime.supervision.hooks import Log, RankRegistry, StartedProcess, SupervisorHook
from smlaunch.runtime.supervision.stacks import STACK_DUMPERS, dump_stacks, where

STALL_EXIT_CODE = 124
"""Exit code of a host whose job the watchdog ended (as ``timeout(1)`` reports a timeout)."""

_RANK_LABEL = re.compile(r"(?:^|/)rank (\d+)$")


@dataclass
class StallFailure(RankFailure):
    """A job the watchdog ended: label ``watchdog``, no rank, exit code :data:`STALL_EXIT_CODE`;
    ``stderr_tail`` holds one ``rank N (host, pid): where`` line per rank."""

    summary: str = ""

    def describe(self) -> str:
        return "\n".join([self.summary, *self.stderr_tail])


class StallWatchdog(SupervisorHook):
    """Ends a stalled job with every rank's stack (see the module docstring)."""

    def __init__(
        self,
        host: str,
        registry: RankRegistry,
        stall_timeout: float,
        log: Log,
        output_dir: str | Path | None = None,
        code_dir: str | Path | None = None,
        dumper: str = "auto",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stall_timeout <= 0:
            raise ValueError(f"stall_timeout={stall_timeout}: must be > 0 seconds")
        if dumper not in STACK_DUMPERS:
            raise ValueError(f"dumper={dumper!r}: must be one of {STACK_DUMPERS}")
        self.host = host
        self.registry = registry
        self.stall_timeout = stall_timeout
        self.log = log
        self.output_dir = Path(output_dir) if output_dir else None
        self.code_dir = code_dir
        self.dumper = dumper
        self.clock = clock
        self._last_output: float | None = None
        self._spawned_ranks: set[int] = set()
        self._printed: set[int] = set()
        self._under_way_at: float | None = None
        self._exited = False
        self._fired = False

    def on_start(self, processes: Sequence[StartedProcess]) -> None:
        self._spawned_ranks = {p.rank for p in processes if p.rank is not None}

    def on_output(self, label: str, lines: int = 1) -> None:
        self._last_output = self.clock()
        match = _RANK_LABEL.search(label)
        if match:
            self._printed.add(int(match[1]))

    def on_exit(self, label: str, exit_code: int) -> None:
        self._exited = True

    def _under_way(self) -> bool:
        """Every rank known on this host (spawned or registered) printed or reached a collective."""
        if self._under_way_at is None:
            known = self._spawned_ranks | {r.rank for r in self.registry.ranks() if r.rank is not None}
            if known and known <= self._printed | self.registry.live_ranks():
                self._under_way_at = self.clock()
        return self._under_way_at is not None

    def stalled(self) -> bool:
        if self._fired or self._exited or not self._under_way():
            return False
        assert self._under_way_at is not None
        quiet_since = max(self._last_output or self._under_way_at, self._under_way_at)
        return self.clock() - quiet_since >= self.stall_timeout

    def poll(self) -> RankFailure | None:
        if not self.stalled():
            return None
        self._fired = True
        ranks = self.registry.ranks()
        self.log(
            f"no output from any process for {self.stall_timeout:g} s and none has exited: the job "
            f"looks hung; dumping the Python stacks of {len(ranks)} rank(s)"
        )
        tool, stacks = dump_stacks(self.registry, ranks, self.dumper)
        lines: list[str] = []
        report: list[str] = [f"Python stacks of host {self.host}, taken with {tool}:"]
        for info in ranks:
            text = stacks.get(info.pid, "")
            lines.append(f"{info.name}: {where(text, self.code_dir) if text else 'no stack could be read'}")
            report.append(f"===== {info.name} =====")
            report.append(text.rstrip() or "(no stack could be read)")
        if not ranks:
            lines.append("no rank registered (not Python, or it never started)")
        target = None
        if self.output_dir is not None:
            try:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                target = self.output_dir / f"smlaunch-stacks-{self.host}.txt"
                # The ranks can write there: a link left in the file's place is replaced, not followed.
                write_file(self.output_dir, target.name, ("\n".join(report) + "\n").encode("utf-8"))
            except OSError as error:
                self.log(f"could not write the stacks file: {error}")
                target = None
        for line in report:
            for part in line.splitlines() or [""]:
                self.log(f"stacks: {part}")
        summary = (
            f"Stalled: no process on host {self.host} wrote output for {self.stall_timeout:g} s "
            f"(stall_timeout_seconds, {contract.SMLAUNCH_STALL_TIMEOUT_SECONDS}) and none had exited; "
            "the job was ended. "
            f"Where each rank was ({tool}"
            + (f"; full stacks in {target.name} in the job's output" if target else "")
            + "):"
        )
        return StallFailure(self.host, "watchdog", None, STALL_EXIT_CODE, time.time(), lines, summary)


def hooks_from_environ(host: str, environ: Mapping[str, str], log: Log) -> list[SupervisorHook]:
    """The hooks a host's supervisor runs, from the environment: always the rank registry; the
    stall watchdog when ``SMLAUNCH_STALL_TIMEOUT_SECONDS`` is set (> 0); the fault injector when
    ``SMLAUNCH_FAULTS`` is set. Raises ``HostConfigurationError`` naming the variable on a bad value."""
    from smlaunch.contract.errors import HostConfigurationError

    # Under the host's base dir (not /tmp): even a host that is SIGKILLed leaves nothing outside its
    # own tree, which the local backend removes with the job. Nothing below it is uploaded.
    registry = RankRegistry(environ.get(contract.BASE_DIR_ENV) or contract.DEFAULT_BASE_DIR, host=host)
    hooks: list[SupervisorHook] = [registry]
    try:
        raw = environ.get(contract.SMLAUNCH_STALL_TIMEOUT_SECONDS, "").strip()
        if raw:
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if timeout < 0:
                raise HostConfigurationError(
                    contract.SMLAUNCH_STALL_TIMEOUT_SECONDS,
                    raw,
                    "must be a number of seconds >= 0 (0 turns the stall watchdog off)",
                    "e.g. 600",
                )
            dumper = environ.get(contract.SMLAUNCH_STACK_DUMPER, "auto") or "auto"
            if dumper not in STACK_DUMPERS:
                raise HostConfigurationError(
                    contract.SMLAUNCH_STACK_DUMPER, dumper, f"must be one of {STACK_DUMPERS}", "e.g. auto"
                )
            if timeout > 0:
                paths = contract.Paths(environ.get(contract.BASE_DIR_ENV) or contract.DEFAULT_BASE_DIR)
                hooks.append(
                    StallWatchdog(
                        host,
                        registry,
                        timeout,
                        log,
                        output_dir=paths.output_data_dir,
                        code_dir=paths.code_dir,
                        dumper=dumper,
                    )
                )
        if environ.get(contract.SMLAUNCH_FAULTS, "").strip():
            hooks.append(FaultInjector(host, parse_faults(environ[contract.SMLAUNCH_FAULTS]), registry, log))
    except Exception:
        registry.close()
        raise
    return hooks
