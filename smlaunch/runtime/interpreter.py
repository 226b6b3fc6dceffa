"""The job's interpreter first on the ``PATH`` of everything a host starts.

In SageMaker's images the interpreter the toolkit runs the script with is the first ``python`` (and
``pip``) on ``PATH``, so a ``.sh`` entry point that runs ``python train.py``, a script that calls
``subprocess.run(["python", ...])`` or ``os.system("pip list")`` gets that interpreter and its
packages. Here the runtime may run under any interpreter (a virtual environment, the layered
environment of ``requirements.txt``, a container's ``/usr/bin/python3``) while the caller's ``PATH``
starts with another one, so :func:`job_path` puts the ranks' interpreter first:

1. a directory of shims, only when the interpreter's own directory lacks one of ``python``,
   ``python3``, ``pip``, ``pip3`` or holds one that is not this interpreter's (Debian's
   ``/usr/bin`` has ``python3`` but no ``python``; a venv made ``--without-pip`` has no ``pip``):
   each shim is ``exec <interpreter> "$@"`` (``-m pip`` for pip). A script, not a link, so a
   virtual environment's interpreter still finds its ``pyvenv.cfg``;
2. the interpreter's own directory (its console scripts: ``torchrun``, ``accelerate``...);
3. the rest of ``PATH``, without those two.

The shim directory is ``<tmp>/smlaunch-<uid>-python-<hash of the interpreter's path>``: the same
on every host that runs the same interpreter (``mpirun`` passes the master's ``PATH`` to every
rank, also on other hosts), owned by the user and 0700 (one that is not is never used).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import tempfile
from pathlib import Path

PYTHON_NAMES = ("python", "python3")
PIP_NAMES = ("pip", "pip3")


def job_path(python: str, path: str | None) -> str:
    """``PATH`` for every process of a job run by ``python`` (see the module docstring).

    Creates the shim directory when one is needed; when it cannot be made or written safely, the
    interpreter's directory alone goes first."""
    directory = os.path.dirname(os.path.abspath(python))
    missing = missing_names(python)
    first = [directory]
    if missing:
        shims = _shim_dir(python)
        try:
            if shims is not None:
                _write_shims(shims, python, missing)
                first.insert(0, str(shims))
        except OSError:
            pass  # a full or read-only temp dir: the names the directory has are still first
    rest = [entry for entry in (path or "").split(os.pathsep) if entry and entry not in first]
    return os.pathsep.join(first + rest)


def missing_names(python: str) -> list[str]:
    """The names of :data:`PYTHON_NAMES` and :data:`PIP_NAMES` that the directory of ``python``
    lacks or holds for another interpreter."""
    directory = os.path.dirname(os.path.abspath(python))
    missing = [name for name in PYTHON_NAMES if not _same_file(os.path.join(directory, name), python)]
    missing += [name for name in PIP_NAMES if not _runs_with(os.path.join(directory, name), python)]
    return missing


def _same_file(path: str, python: str) -> bool:
    try:
        return os.path.samefile(path, python)
    except OSError:
        return False


def _runs_with(script: str, python: str) -> bool:
    """``script`` exists and its ``#!`` line names ``python`` (a console script of this interpreter)."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    words = first[2:].split()
    return bool(words) and _same_file(os.fsdecode(words[0]), python)


def _shim_dir(python: str) -> Path | None:
    """The user's private shim directory for ``python``, created if needed; None if it is not safe."""
    uid = os.getuid()
    digest = hashlib.sha256(os.path.abspath(python).encode()).hexdigest()[:16]
    directory = Path(tempfile.gettempdir()) / f"smlaunch-{uid}-python-{digest}"
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(directory)
    # Anyone may create a name in /tmp: use only a real directory of ours that nobody else can write.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return None
    return directory


def _write_shims(directory: Path, python: str, names: list[str]) -> None:
    """One executable ``sh`` script per name, each replaced atomically (hosts may write at once)."""
    interpreter = shlex.quote(os.path.abspath(python))
    for name in names:
        module = " -m pip" if name in PIP_NAMES else ""
        text = f'#!/bin/sh\nexec {interpreter}{module} "$@"\n'
        target = directory / name
        try:
            if target.read_text() == text:
                continue
        except OSError:
            pass
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}-")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o700)
        os.replace(temporary, target)
