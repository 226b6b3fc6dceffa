"""The one-line summary of why a process failed, read from the end of its stderr.

A failed rank's summary (``ErrorMessage:`` in the failure text) is the exception it died of,
``Type: message``, whatever the process printed after its traceback: TensorFlow and torch log C++
lines at exit, ``atexit`` handlers print, and objects finalized at shutdown report errors that
Python ignores. :func:`failure_summary` reads, in order:

1. the exception line of the last Python traceback that is not an ignored one (``Exception
   ignored in: ...``, ``--- Logging error ---``): the first line at the traceback's margin after its
   head, so the frames, source lines and carets are skipped, and with chained exceptions (``During
   handling ...``, ``The above exception ...``) it is the last one raised. An exception group's
   traceback (``+ Exception Group Traceback``) gives the group's own line. A multi-line message gives
   its first line (its next one when the first is empty);
2. a ``SyntaxError`` (or ``IndentationError``) of the entry point itself, which Python prints
   without a traceback head: ``File "train.py", line 3``, the source, the caret, the exception;
3. ``Fatal Python error: ...`` (faulthandler on a crash); C++'s ``terminate called after
   throwing an instance of 'T'`` with its ``what():`` line, as ``T: what``; a command line's
   ``prog: error: ...`` (argparse refusing the hyperparameters, most tools);
4. for a process killed by a signal, nothing more (the failure text's first line names the signal;
   the last thing it printed is no cause); for any other (a shell script, a binary, ``sys.exit(2)``
   after a log line), its last non-empty stderr line that is not indented (else its last one).

Pure: lines in, a string out (empty when there is nothing to say).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEAD = re.compile(r"^(?P<margin>[ |]*(?:\+ )?)(?:Exception Group )?Traceback \(most recent call last\):\s*$")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.<>]*(?::(?P<message> .*)?)?$")
_LOCATION = re.compile(r'^\s*File ".*", line \d+\s*$')
_FATAL = re.compile(r"^Fatal Python error: .+")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(?P<what>.*?)\s*$")
_USAGE_ERROR = re.compile(r"^[^\s:]+: error: .+")
_IGNORED = ("Exception ignored", "--- Logging error ---")
CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def is_ignored_traceback(previous: str) -> bool:
    """The traceback that follows the line ``previous`` is one Python printed and ignored (an error
    in ``__del__``, an ``atexit`` callback, a logging handler): never the cause of a failure."""
    return previous.lstrip().startswith(_IGNORED)


def failure_summary(lines: Sequence[str], exit_code: int) -> str:
    """Why the process that printed ``lines`` on stderr and exited with ``exit_code`` (``128 + N``
    for a death by signal N) failed, in one line (see the module docstring)."""
    found = exception_line(lines) or _fatal_line(lines)
    if found is not None:
        return found
    if exit_code > 128:
        return ""
    said = [line for line in lines if line.strip()]
    # An indented line continues the one before it (a stack the process printed, a wrapped message).
    unindented = [line for line in said if line[0] not in " \t"]
    return (unindented or said or [""])[-1].strip()


def exception_line(lines: Sequence[str]) -> str | None:
    """``Type: message`` of the last Python exception in ``lines`` (rules 1 and 2), else None."""
    previous = ""
    heads: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        head = _HEAD.match(line)
        # A head inside an exception group's block ("    | Traceback ...") is a sub-exception's.
        if head is not None and "|" not in head.group("margin") and not is_ignored_traceback(previous):
            heads.append((index, head.group("margin").replace("+", "|")))
        if line.strip():
            previous = line
    for start, margin in reversed(heads):
        found = _exception_after(lines, start + 1, margin)
        if found is not None:
            return found
    for index in range(len(lines) - 1, -1, -1):
        if _LOCATION.match(lines[index]):
            return _exception_after(lines, index + 1, "")
    return None


def _exception_after(lines: Sequence[str], start: int, margin: str) -> str | None:
    """The first line at ``margin`` from ``start`` on, when it reads as an exception."""
    for index in range(start, len(lines)):
        line = lines[index]
        if margin:
            if not line.startswith(margin):
                return None  # the end of an exception group's block
            line = line[len(margin) :]
        if not line.strip() or line[0] in " \t":
            continue  # a frame, its source line, a caret line
        match = _EXCEPTION.match(line.rstrip())
        if match is None:
            return None
        if match.group("message") is None and line.rstrip().endswith(":"):
            following = lines[index + 1][len(margin) :].strip() if index + 1 < len(lines) else ""
            if following and not _HEAD.match(following) and following not in CHAINED:
                return f"{line.rstrip()} {following}"
        return line.rstrip()
    return None


def _fatal_line(lines: Sequence[str]) -> str | None:
    """Rule 3: the interpreter's, the C++ runtime's or a command line parser's own last words."""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if _FATAL.match(line) or _USAGE_ERROR.match(line):
            return line.strip()
        terminate = _TERMINATE.search(line)
        if terminate is not None:
            for after in lines[index + 1 : index + 3]:
                what = _WHAT.match(after)
                if what is not None:
                    return f"{terminate.group('type')}: {what.group('what')}"
            return line.strip()
    return None
