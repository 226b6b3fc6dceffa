"""The smp launcher's pure plan: ranks per host from the MPI setting, torch and OpenMPI variables,
``SM_HP_MP_PARAMETERS`` and the compat path for the ``smdistributed`` shim."""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch import contract
from smlaunch.runtime.env_vars import compat_dir
from smlaunch.runtime.environment import Environment
from smlaunch.runtime.launchers import launcher_name
from smlaunch.runtime.launchers.smp import SmpLauncher
from tests.functional._runtime_tree import write_host_tree

MP = {
    "partitions": 2,
    "microbatches": 4,
    "pipeline": "interleaved",
    "placement_strategy": "spread",
    "ddp": True,
}


def test_smp_plan_on_the_second_of_two_hosts(tmp_path: Path) -> None:
    hps = {
        contract.HP_PROGRAM: '"train_smp.py"',
        contract.HP_MPI_ENABLED: "true",
        contract.HP_MPI_PROCESSES_PER_HOST: "4",
        contract.HP_MPI_CUSTOM_OPTIONS: '"-x NCCL_DEBUG=INFO"',
        contract.HP_MP_PARAMETERS: json.dumps(MP),
        "epochs": "2",
    }
    base = tmp_path / "algo-2"
    paths = write_host_tree(base, "algo-2", ["algo-1", "algo-2"], hps)
    (paths.code_dir / "train_smp.py").write_text("print('hi')\n")
    env = Environment.from_files(
        base,
        {
            "SMLAUNCH_NUM_GPUS": "0",
            contract.SMLAUNCH_HOST_ADDRESSES: json.dumps({"algo-1": "127.0.0.5", "algo-2": "127.0.0.6"}),
            contract.SMLAUNCH_MASTER_PORT: "29777",
        },
    )
    assert launcher_name(env) == "smp"
    plan = SmpLauncher(env, python="py").plan()
    assert plan.launcher == "smp"
    assert [p.rank for p in plan.processes] == [4, 5, 6, 7]
    for local_rank, spec in enumerate(plan.processes):
        e = spec.env
        rank = 4 + local_rank
        assert spec.argv[:2] == ["py", "train_smp.py"]
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == (
            str(rank),
            str(local_rank),
            "8",
            "4",
        )
        assert (e["OMPI_COMM_WORLD_RANK"], e["OMPI_COMM_WORLD_SIZE"]) == (str(rank), "8")
        assert (e["OMPI_COMM_WORLD_LOCAL_RANK"], e["OMPI_COMM_WORLD_LOCAL_SIZE"]) == (str(local_rank), "4")
        assert e["OMPI_COMM_WORLD_NODE_RANK"] == "1"
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("127.0.0.5", "29777")
        assert json.loads(e["SM_HP_MP_PARAMETERS"]) == MP
        compat = compat_dir()
        assert compat is not None  # this machine has no real smdistributed
        assert str(compat) in e["PYTHONPATH"].split(":")
    assert "ignored" in plan.topology["custom mpi options"]
    assert json.loads(plan.topology["mp_parameters"]) == MP
