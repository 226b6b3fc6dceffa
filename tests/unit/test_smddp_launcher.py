"""smddp launcher plans and the compat package's placement on the ranks' path."""

from __future__ import annotations

import json
import os
from pathlib import Path

from smlaunch import contract
from smlaunch.runtime.env_vars import compat_dir
from smlaunch.runtime.environment import Environment
from smlaunch.runtime.launchers import launcher_name
from smlaunch.runtime.launchers.smddp import SmddpLauncher


def smddp_env(tmp_path: Path, host: str, hosts: list[str], options: str = "") -> Environment:
    from tests.functional._runtime_tree import write_host_tree

    base = tmp_path / host
    hps = {
        contract.HP_PROGRAM: '"train.py"',
        contract.HP_SMDDP_ENABLED: "true",
        contract.HP_INSTANCE_TYPE: '"ml.p4d.24xlarge"',
        contract.HP_SMDDP_CUSTOM_MPI_OPTIONS: json.dumps(options),
        "epochs": "2",
    }
    write_host_tree(base, host, hosts, hps, instance_type="ml.p4d.24xlarge")
    (base / "code" / "train.py").write_text("print('hi')\n")
    environ = {
        contract.SMLAUNCH_HOST_ADDRESSES: json.dumps({h: "127.0.0.1" for h in hosts}),
        contract.SMLAUNCH_MASTER_PORT: "42000",
        contract.SMLAUNCH_PROCESSES_PER_HOST: "2",
        contract.SMLAUNCH_NUM_GPUS: "8",
    }
    return Environment.from_files(base, environ)


def test_one_rank_per_emulated_gpu_with_torch_and_smddp_variables(tmp_path: Path) -> None:
    env = smddp_env(tmp_path, "algo-2", ["algo-1", "algo-2"], options="--verbose")
    assert launcher_name(env) == "smddp"
    plan = SmddpLauncher(env).plan()
    assert plan.launcher == "smddp"
    assert [p.rank for p in plan.processes] == [2, 3]
    assert [p.label for p in plan.processes] == ["rank 2", "rank 3"]
    for local_rank, spec in enumerate(plan.processes):
        assert spec.env["RANK"] == str(2 + local_rank) and spec.env["LOCAL_RANK"] == str(local_rank)
        assert spec.env["WORLD_SIZE"] == "4" and spec.env["LOCAL_WORLD_SIZE"] == "2"
        assert spec.env["NODE_RANK"] == "1" and spec.env["MASTER_PORT"] == "42000"
        assert spec.env["SMDATAPARALLEL_USE_HOMOGENEOUS"] == "1"
        assert spec.env["SAGEMAKER_INSTANCE_TYPE"] == "ml.p4d.24xlarge"
        assert json.loads(spec.env["TF_CONFIG"])["task"]["index"] == 2 + local_rank
        assert spec.argv[1:] == ["train.py", "--epochs", "2"]
        assert str(compat_dir()) in spec.env["PYTHONPATH"].split(os.pathsep)
    assert "ignored" in plan.topology["custom_mpi_options"]
    assert plan.topology["backend"].startswith("smddp")


def test_single_host_is_marked_single_node(tmp_path: Path) -> None:
    plan = SmddpLauncher(smddp_env(tmp_path, "algo-1", ["algo-1"])).plan()
    assert all(p.env["SMDATAPARALLEL_USE_SINGLENODE"] == "1" for p in plan.processes)
    assert "custom_mpi_options" not in plan.topology


def test_compat_path_holds_the_smdistributed_shims() -> None:
    path = str(compat_dir())
    assert path is not None  # AWS's smdistributed is not installed here
    assert (Path(path) / "smdistributed" / "dataparallel" / "torch" / "torch_smddp.py").is_file()
