"""The test cluster itself: two nodes, idle, and ``srun -N2`` runs one task on each."""

from __future__ import annotations

import time

import pytest

from tests.slurm._cluster import NODES, Cluster

pytestmark = pytest.mark.slurm


def test_srun_runs_one_task_per_node(slurm_cluster: Cluster) -> None:
    result = slurm_cluster.run(
        "srun", "-N2", "--ntasks-per-node=1", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_PROCID"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n")[:-1]) == ["node1 0", "node2 1"]
    deadline = time.monotonic() + 30  # "completing" while slurmd reports the step's end
    while slurm_cluster.node_states() != dict.fromkeys(NODES, "idle") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm_cluster.node_states() == dict.fromkeys(NODES, "idle")
