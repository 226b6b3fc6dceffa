"""What every test gets: the test runner's process is left as the test found it."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator

import pytest

from smlaunch.contract.processes import PR_SET_CHILD_SUBREAPER, prctl_function

PR_GET_CHILD_SUBREAPER = 37


def _subreaper(prctl: Callable[..., int]) -> bool:
    flag = ctypes.c_int(0)
    prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


@pytest.fixture(autouse=True)
def _pytest_stays_no_subreaper() -> Iterator[None]:
    """A test that runs a local agent or a host runtime in this process makes pytest a child
    subreaper (``smlaunch.contract.processes.become_subreaper``). Every process orphaned below pytest from
    then on is re-parented to pytest, which never reaps it, instead of to init: the Slurm test
    cluster's step daemons and MPI's ``orted`` among them, and the Slurm MPI tests then hang at
    start-up (seen in CI, where a Docker test ran its agent in-process before them). Undone after
    each test."""
    prctl = prctl_function()
    if prctl is None:  # no prctl (macOS): no subreaper either
        yield
        return
    before = _subreaper(prctl)
    yield
    if _subreaper(prctl) and not before:
        prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.fixture(autouse=True, scope="session")
def _no_personal_config_file() -> Iterator[None]:
    """The suite never reads the developer's ``~/.config/smlaunch/config.yaml`` (an ``executor:
    docker`` there would change every local job) or SageMaker SDK ``config.yaml`` files (a VPC or a
    role there would change every request): the variables name an empty file for the whole
    session, subprocesses included. Tests of the config files point them elsewhere."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SMLAUNCH_CONFIG", os.devnull)
        # Nor the SageMaker SDK's config.yaml files, which both it and smlaunch.sdk.request.sdk_config read.
        patch.setenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", os.devnull)
        patch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", os.devnull)
        yield
