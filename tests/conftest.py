"""What every test gets: the test runner's process is left as the test found it."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator

import pytest

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _subreaper() -> bool:
    flag = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


@pytest.fixture(autouse=True)
def _pytest_stays_no_subreaper() -> Iterator[None]:
    """A test that runs a local agent or a host runtime in this process makes pytest a child
    subreaper (``runtime.processes.become_subreaper``). Every process orphaned below pytest from
    then on is re-parented to pytest, which never reaps it, instead of to init: the Slurm test
    cluster's step daemons and MPI's ``orted`` among them, and the Slurm MPI tests then hang at
    start-up (seen in CI, where a Docker test ran its agent in-process before them). Undone after
    each test."""
    if sys.platform != "linux":
        yield
        return
    before = _subreaper()
    yield
    if _subreaper() and not before:
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
