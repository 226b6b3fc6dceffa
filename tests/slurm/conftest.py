"""The session-scoped two-node Slurm cluster every ``slurm`` test runs on (see ``_cluster.py``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm._cluster import Cluster, ClusterUnavailable, running_cluster


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
