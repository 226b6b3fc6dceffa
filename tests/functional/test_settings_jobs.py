"""Settings reach a real local job's ranks from the session: a config-file knob arrives, and an
explicit argument outranks a variable the hosts would otherwise inherit from the caller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.sessions.local import LocalSession
from smlaunch.sdk.sessions.settings import CONFIG_ENV
from tests.functional._local_helpers import job_request, kill_leftover_jobs, make_spec

SCRIPT = """
import os
print("unsafe=" + os.environ["SMLAUNCH_UNSAFE_CHECKPOINT_LOAD"], flush=True)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.slow
def test_config_file_and_arguments_reach_the_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("unsafe_checkpoint_load: true\n")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.delenv(contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD, raising=False)
    monkeypatch.setenv(contract.SMLAUNCH_LOG_PREFIX, "0")  # would drop the prefix, if inherited
    backend = LocalSession(tmp_path / "jobs", log_prefix=True).backend()
    spec = make_spec(tmp_path, "settings-job", SCRIPT, instance_count=1)
    backend.submit(job_request(spec))
    TrainingJob(backend, "settings-job").wait(logs=False)
    assert "[algo-1/rank 0] unsafe=1" in list(backend.log_lines("settings-job"))
