"""The session-scoped two-node Slurm cluster every ``slurm`` test runs on (see ``_cluster.py``), and
the per-test ``session`` whose jobs must leave nothing behind."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch.sdk.sessions.slurm import SlurmSession
from tests.functional._local_helpers import assert_no_job_processes
from tests.slurm._cluster import Cluster, ClusterUnavailable, running_cluster

JOB_TIMEOUT = 240


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    """A running two-node cluster (node1, node2 on 127.0.0.1); skips with the reason when Slurm
    cannot be started here. Torn down, daemons included, at the end of the session."""
    with tempfile.TemporaryDirectory(prefix="smlaunch-slurm-") as tmp:
        try:
            with running_cluster(Path(tmp)) as cluster:
                yield cluster
        except ClusterUnavailable as exc:
            pytest.skip(f"no Slurm test cluster: {exc}")


@pytest.fixture
def session(
    slurm_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlurmSession]:
    """A SlurmSession on the test cluster whose shared directory is this test's tmp_path. At the
    end, Slurm must run nothing of its jobs (within 30 s) and no process of them may be left."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    session = SlurmSession(shared_dir=tmp_path, processes_per_host=2, stop_grace_seconds=10)
    yield session
    names = [p.name for p in session.root.glob("*") if p.is_dir() and not p.name.startswith(".")]
    deadline = time.monotonic() + 30
    left = {name: squeue(slurm_cluster, name) for name in names}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        left = {name: squeue(slurm_cluster, name) for name in names}
    for name in names:
        slurm_cluster.run("scancel", f"--name={name}")  # whatever happens, the next test starts clean
    assert not any(left.values()), f"Slurm still runs {left}"
    for name in names:
        assert_no_job_processes(name, session.root / name, settle=10)


def squeue(cluster: Cluster, name: str) -> str:
    """The states of the jobs named ``name`` that Slurm still has (empty when none)."""
    return cluster.run("squeue", "--noheader", f"--name={name}", "--format=%T").stdout.strip()
