"""The tuning agent's platform seam (:mod:`smlaunch.sdk.tuning.platform`): a session recorded as
plain data in ``trial.json`` and reopened by the detached agent as the same platform, and a tuning
job whose agent runs on another machine (a shared Slurm store) not taken for a dead one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from smlaunch import LocalSession, SlurmSession
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.state import write_json_atomic
from smlaunch.sdk.backends.slurm.backend import SlurmBackend
from smlaunch.sdk.tuning import local, platform


def _through_json(recorded: dict[str, object]) -> dict[str, object]:
    return dict(json.loads(json.dumps(recorded)))  # as the agent reads trial.json


def test_a_local_session_is_reopened_with_its_settings(tmp_path: Path) -> None:
    session = LocalSession(root=tmp_path / "jobs", processes_per_host=3, stop_grace_seconds=7)
    recorded = _through_json(platform.record(session))
    assert recorded["kind"] == platform.LOCAL
    backend = platform.open_platform({"platform": recorded})
    assert type(backend) is LocalBackend
    reopened = backend.session  # type: ignore[attr-defined]
    assert reopened.root == session.root
    assert (reopened.processes_per_host, reopened.stop_grace_seconds) == (3, 7)


def test_a_trial_file_of_an_earlier_release_is_a_local_session(tmp_path: Path) -> None:
    settings = LocalSession(root=tmp_path / "jobs").settings.model_dump(mode="json")
    backend = platform.open_platform({"settings": settings})
    assert type(backend) is LocalBackend and backend.session.root == tmp_path / "jobs"  # type: ignore[attr-defined]


def test_a_slurm_session_is_reopened_with_its_cluster_options(tmp_path: Path) -> None:
    session = SlurmSession(
        shared_dir=tmp_path,
        partition="gpu",
        account="ml-team",
        extra_sbatch_args=["--constraint=a100"],
        gpus_per_node=2,
        processes_per_host=2,
        stop_grace_seconds=5,
    )
    recorded = _through_json(platform.record(session))
    assert recorded["kind"] == platform.SLURM
    backend = platform.open_platform({"platform": recorded})
    assert isinstance(backend, SlurmBackend)
    reopened = backend.session
    assert isinstance(reopened, SlurmSession)
    assert reopened.shared_dir == session.shared_dir and reopened.root == session.root
    assert (reopened.partition, reopened.account, reopened.qos) == ("gpu", "ml-team", None)
    assert reopened.extra_sbatch_args == ("--constraint=a100",) and reopened.gpus_per_node == 2
    assert (reopened.processes_per_host, reopened.stop_grace_seconds) == (2, 5)
    assert reopened.python == session.python


def test_an_unknown_platform_kind_is_named() -> None:
    with pytest.raises(ValueError, match="'nomad' is not one of 'local', 'slurm', 'kubernetes'"):
        platform.open_platform({"platform": {"kind": "nomad", "settings": {}}})


def test_another_local_semantics_session_is_refused_naming_the_ones_that_tune() -> None:
    class EdgeSession:
        is_local = True

    field, value, problem, fix = platform.refusal(EdgeSession())
    assert (field, value) == ("sagemaker_session", "EdgeSession")
    assert "KubernetesSession" in problem and "fit() per hyperparameter set" in fix


def test_only_store_sessions_run_tuning_jobs_there(tmp_path: Path) -> None:
    assert platform.runs_in_store(LocalSession(root=tmp_path / "jobs"))
    assert platform.runs_in_store(SlurmSession(shared_dir=tmp_path))
    assert not platform.runs_in_store(object())


def _tuning_job(root: Path, agent: dict[str, object]) -> None:
    job = local.tuning_dir(root, "tj")
    job.path.mkdir(parents=True)
    write_json_atomic(job.spec_file, {"HyperParameterTuningJobName": "tj"})
    write_json_atomic(job.agent_file, agent)
    job.write_state({"HyperParameterTuningJobStatus": "InProgress", "CreationTime": 1.0, local.SUMMARIES: []})


def test_an_agent_on_another_machine_is_not_taken_for_a_dead_one(tmp_path: Path) -> None:
    # A pid that is not running here: on this machine it would be a dead agent.
    _tuning_job(tmp_path, {"pid": 2**22 + 17, "create_time": 1.0, "host": "login-2.cluster.example"})
    assert local.agent_alive(local.tuning_dir(tmp_path, "tj")) is None
    assert local.raw_state(tmp_path, "tj")["HyperParameterTuningJobStatus"] == "InProgress"


def test_a_dead_agent_on_this_machine_fails_the_tuning_job(tmp_path: Path) -> None:
    import socket

    _tuning_job(tmp_path, {"pid": 2**22 + 17, "create_time": 1.0, "host": socket.gethostname()})
    state = local.raw_state(tmp_path, "tj")
    assert state["HyperParameterTuningJobStatus"] == "Failed" and "agent died" in state["FailureReason"]


def test_an_agent_recorded_without_its_machine_is_this_machines(tmp_path: Path) -> None:
    _tuning_job(tmp_path, {"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    assert local.agent_alive(local.tuning_dir(tmp_path, "tj")) is True
