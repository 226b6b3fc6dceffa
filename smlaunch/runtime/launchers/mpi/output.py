"""Reading ``mpirun --tag-output``: each rank's lines back under its name, and the rank that failed.

``[1,3]<stderr>:text`` becomes ``[algo-2/rank 3] text``; each rank's stderr tail is kept, and the root
cause of a failed ``mpirun`` is the first failing rank as mpirun's own report names it (its host, exit
code and stderr tail), not ``mpirun`` itself. Used by
:class:`smlaunch.runtime.launchers.mpi.launcher.MpiLauncher`.
"""

from __future__ import annotations

import re

from smlaunch.runtime.launchers.base import RankFailure
from smlaunch.runtime.supervision.supervisor import _StderrTail

_TAG = re.compile(r"\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:")
_FIRST_FAILED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")
_EXIT_CODE = re.compile(r"^\s*Exit code:\s*(-?\d+)")
_ERROR_STARTS = ("Traceback (most recent call last):", "smlaunch fault injection: this rank crashes")
_ABORTED = re.compile(r"MPI_ABORT was invoked on rank (\d+)")
_ERRORCODE = re.compile(r"^\s*with errorcode (-?\d+)")
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")


class MpiOutput:
    """``split_line`` for ``mpirun --tag-output``: labels lines ``algo-N/rank R``, keeps every rank's
    stderr tail, and reads mpirun's report of the first failing rank."""

    def __init__(self, hosts: list[str], ppn: int) -> None:
        self.hosts = hosts
        self.ppn = ppn
        self.tails: dict[int, _StderrTail] = {}
        self.failed_rank: int | None = None
        self.failed_code: int | None = None
        self._partial: dict[tuple[int, str], str] = {}
        self.first_error_rank: int | None = None
        """The first rank that printed a traceback: the cause when mpirun's report is lost
        (OpenMPI sometimes fails to print it: "ORTE_ERROR_LOG: Data unpack would read past end")."""

    def host_of(self, rank: int) -> str:
        return self.hosts[min(rank // self.ppn, len(self.hosts) - 1)]

    def __call__(self, line: str) -> tuple[str | None, str]:
        matches = list(_TAG.finditer(line))
        if not matches:
            self._mpirun_line(line)
            return None, line
        # mpirun tags every chunk a rank writes, not every line: an unbuffered print() arrives in
        # pieces, and pieces of several ranks can share one output line. Reassemble per rank and
        # stream; the line ends the last piece's line.
        for index, match in enumerate(matches):
            end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
            key = (int(match.group(1)), match.group(2))
            self._partial[key] = self._partial.get(key, "") + line[match.end() : end]
        rank, stream = key
        text = self._partial.pop(key)
        if stream == "stderr":
            self.tails.setdefault(rank, _StderrTail()).add(text)
            if self.first_error_rank is None and text.startswith(_ERROR_STARTS):
                self.first_error_rank = rank
        return f"{self.host_of(rank)}/rank {rank}", text

    def _mpirun_line(self, line: str) -> None:
        if self.failed_rank is None:
            found = _FIRST_FAILED.search(line)
            if found:
                self.failed_rank = int(found.group(1))
                return
            aborted = _ABORTED.search(line)
            if aborted:
                self.failed_rank = int(aborted.group(1))
                return
            signalled = _SIGNALLED.search(line)
            if signalled:
                self.failed_rank = int(signalled.group(1))
                self.failed_code = 128 + int(signalled.group(2))
                return
        if self.failed_rank is not None and self.failed_code is None:
            code = _EXIT_CODE.match(line) or _ERRORCODE.match(line)
            if code:
                self.failed_code = int(code.group(1))

    def root_cause(self, mpirun_failure: RankFailure) -> RankFailure:
        """The failing rank as mpirun reported it (falls back to mpirun's own failure)."""
        rank = self.failed_rank if self.failed_rank is not None else self.first_error_rank
        if rank is None:
            return mpirun_failure
        code = self.failed_code if self.failed_code is not None else mpirun_failure.exit_code
        tail = self.tails.get(rank)
        lines = tail.tail() if tail is not None else []
        return RankFailure(self.host_of(rank), f"rank {rank}", rank, code, mpirun_failure.time, lines)
