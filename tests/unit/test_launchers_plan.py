"""Launcher selection by the framework params, and the pure plans of the process and torchrun launchers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.runtime.environment import Environment, HostConfigurationError
from smlaunch.runtime.launchers import (
    LAUNCHERS,
    LauncherRef,
    LauncherUnavailableError,
    host_strategy,
    launcher_class,
    launcher_name,
    select_launcher,
)
from smlaunch.runtime.launchers.process import ProcessLauncher
from smlaunch.runtime.launchers.torchrun import TorchrunLauncher
from tests.functional._runtime_tree import write_host_tree

PROGRAM = {contract.HP_PROGRAM: '"train.py"', "epochs": "2", "name": '"a b"'}


def env_for(
    tmp_path: Path,
    hps: dict[str, str],
    host: str = "algo-1",
    hosts: tuple[str, ...] = ("algo-1",),
    environ: dict[str, str] | None = None,
    instance_groups: list[dict[str, object]] | None = None,
) -> Environment:
    base = tmp_path / host
    paths = write_host_tree(base, host, list(hosts), {**PROGRAM, **hps}, instance_groups=instance_groups)
    (paths.code_dir / "train.py").write_text("print('hi')\n")
    return Environment.from_files(base, {"SMLAUNCH_NUM_GPUS": "0", **(environ or {})})


@pytest.mark.parametrize(
    ("hps", "expected"),
    [
        ({}, "process"),
        ({contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"}, "torchrun"),
        ({contract.HP_PYTORCH_DDP_ENABLED: "true"}, "torchrun"),
        ({contract.HP_SMDDP_ENABLED: "true"}, "smddp"),
        ({contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: "2"}, "mpi"),
        ({contract.HP_MPI_ENABLED: "true", contract.HP_MP_PARAMETERS: '{"partitions": 2}'}, "smp"),
        ({contract.HP_MPI_ENABLED: "true", contract.HP_MP_PARAMETERS: "{}"}, "mpi"),
        ({contract.HP_SMDDP_ENABLED: "false", contract.HP_TORCH_DISTRIBUTED_ENABLED: "false"}, "process"),
        # first match wins: MPI before DDP, DDP before smddp (docs/architecture.md)
        ({contract.HP_MPI_ENABLED: "true", contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"}, "mpi"),
        ({contract.HP_SMDDP_ENABLED: "true", contract.HP_PYTORCH_DDP_ENABLED: "true"}, "torchrun"),
    ],
)
def test_launcher_table(tmp_path: Path, hps: dict[str, str], expected: str) -> None:
    assert launcher_name(env_for(tmp_path, hps)) == expected


@pytest.mark.parametrize(
    ("hps", "expected"),
    [
        ({}, Strategy.NONE),
        ({contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"}, Strategy.TORCH_DISTRIBUTED),
        ({contract.HP_PYTORCH_DDP_ENABLED: "true"}, Strategy.PYTORCHDDP),
        ({contract.HP_SMDDP_ENABLED: "true"}, Strategy.SMDDP),
        ({contract.HP_MPI_ENABLED: "true"}, Strategy.MPI),
        (
            {contract.HP_MPI_ENABLED: "true", contract.HP_MP_PARAMETERS: '{"partitions": 2}'},
            Strategy.MODELPARALLEL,
        ),
        ({contract.HP_PARAMETER_SERVER_ENABLED: "true"}, Strategy.PARAMETER_SERVER),
        ({contract.HP_MWMS_ENABLED: "true"}, Strategy.MULTI_WORKER_MIRRORED_STRATEGY),
        ({contract.HP_MWMS_ENABLED: "false"}, Strategy.NONE),
        # model parallelism over torch_distributed: torchrun starts the ranks
        (
            {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true", contract.HP_MP_PARAMETERS: '{"partitions": 2}'},
            Strategy.TORCH_DISTRIBUTED,
        ),
    ],
)
def test_host_strategy(tmp_path: Path, hps: dict[str, str], expected: Strategy) -> None:
    assert host_strategy(env_for(tmp_path, hps)) is expected


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_has_a_launcher_whose_class_bears_its_name(strategy: Strategy) -> None:
    ref = LAUNCHERS[strategy]
    assert launcher_class(ref).name == ref.name


def test_launchers_of_the_strategies() -> None:
    assert {s.value: ref.name for s, ref in LAUNCHERS.items()} == {
        "none": "process",
        "parameter_server": "process",
        "multi_worker_mirrored_strategy": "process",
        "torch_distributed": "torchrun",
        "pytorchddp": "torchrun",
        "smddp": "smddp",
        "mpi": "mpi",
        "modelparallel": "smp",
    }


def test_hosts_outside_the_distribution_groups_run_one_process(tmp_path: Path) -> None:
    groups = [
        {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
        {"instance_group_name": "gpu", "instance_type": "ml.g5.xlarge", "hosts": ["algo-3", "algo-2"]},
    ]
    hps = {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true", contract.HP_DISTRIBUTION_INSTANCE_GROUPS: '["gpu"]'}
    hosts = ("algo-1", "algo-2", "algo-3")
    assert launcher_name(env_for(tmp_path, hps, "algo-1", hosts, instance_groups=groups)) == "process"
    gpu_host = env_for(tmp_path, hps, "algo-2", hosts, instance_groups=groups)
    assert launcher_name(gpu_host) == "torchrun"
    plan = TorchrunLauncher(gpu_host).plan()
    # algo-3 comes first in the group, so it is the master and algo-2 is node 1.
    assert plan.processes[0].env["NODE_RANK"] == "1"
    assert plan.processes[0].env["MASTER_ADDR"] == "algo-3"


def test_unsupported_strategies_are_refused(tmp_path: Path) -> None:
    env = env_for(tmp_path, {contract.HP_PYTORCH_XLA_ENABLED: "true"})
    with pytest.raises(HostConfigurationError, match="sagemaker_pytorch_xla_multi_worker_enabled"):
        launcher_name(env)


def test_a_missing_launcher_module_is_a_clear_error() -> None:
    ghost = LauncherRef("ghost", "smlaunch.runtime.launchers.ghost", "GhostLauncher")
    with pytest.raises(LauncherUnavailableError, match=r"runtime\.launchers\.ghost is not part"):
        launcher_class(ghost)


def test_select_launcher_constructs_the_chosen_class(tmp_path: Path) -> None:
    assert isinstance(select_launcher(env_for(tmp_path, {})), ProcessLauncher)
    env = env_for(tmp_path, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"})
    launcher = select_launcher(env, python="/opt/py")
    assert isinstance(launcher, TorchrunLauncher) and launcher.python == "/opt/py"


def test_process_plan(tmp_path: Path) -> None:
    env = env_for(tmp_path, {})
    plan = ProcessLauncher(env, python="/usr/bin/python3").plan()
    assert plan.launcher == "process" and len(plan.processes) == 1
    spec = plan.processes[0]
    assert spec.argv == ["/usr/bin/python3", "train.py", "--epochs", "2", "--name", "a b"]
    assert spec.cwd == str(env.code_dir) and spec.label == "rank 0"
    assert spec.env["SM_CURRENT_HOST"] == "algo-1"
    assert spec.env["PYTHONPATH"].split(":")[0] == str(env.code_dir)
    assert "RANK" not in spec.env or spec.env["RANK"] == env.environ.get("RANK")
    assert plan.summary == "train.py on host 1 of 1"


def test_torchrun_plan_on_the_second_of_two_hosts(tmp_path: Path) -> None:
    addresses = {"algo-1": "127.0.0.5", "algo-2": "127.0.0.6"}
    env = env_for(
        tmp_path,
        {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"},
        host="algo-2",
        hosts=("algo-1", "algo-2"),
        environ={
            contract.SMLAUNCH_HOST_ADDRESSES: json.dumps(addresses),
            contract.SMLAUNCH_MASTER_PORT: "29555",
            contract.SMLAUNCH_PROCESSES_PER_HOST: "3",
            contract.TRAINING_JOB_NAME_ENV: "job-1",
        },
    )
    plan = TorchrunLauncher(env, python="py").plan()
    assert plan.launcher == "torchrun"
    assert [p.rank for p in plan.processes] == [3, 4, 5]
    assert [p.label for p in plan.processes] == ["rank 3", "rank 4", "rank 5"]
    for local_rank, spec in enumerate(plan.processes):
        e = spec.env
        assert spec.argv == ["py", "train.py", "--epochs", "2", "--name", "a b"]
        assert (e["RANK"], e["LOCAL_RANK"], e["ROLE_RANK"]) == (
            str(3 + local_rank),
            str(local_rank),
            str(3 + local_rank),
        )
        assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["ROLE_WORLD_SIZE"]) == ("6", "3", "6")
        assert (e["NODE_RANK"], e["GROUP_RANK"], e["GROUP_WORLD_SIZE"]) == ("1", "1", "2")
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("127.0.0.5", "29555")
        assert (e["SM_MASTER_ADDR"], e["SM_MASTER_PORT"]) == ("127.0.0.5", "29555")
        assert e["TORCHELASTIC_RUN_ID"] == "job-1"
        tf_config = json.loads(e["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": 3 + local_rank}
        assert len(tf_config["cluster"]["worker"]) == 6
        assert e["OMP_NUM_THREADS"] == "1"
        assert e["SM_CURRENT_HOST"] == "algo-2" and e["SM_HOSTS"] == '["algo-1","algo-2"]'
    assert plan.topology["world size"] == 6
    assert plan.topology["backend"].startswith("gloo")
    assert plan.topology["master"] == "algo-1 at 127.0.0.5:29555"
    assert plan.summary == "ranks 3-5 of 6 on host 2 of 2, gloo"


@pytest.mark.parametrize(
    ("hps", "host", "summary"),
    [
        ({contract.HP_SMDDP_ENABLED: "true"}, "algo-1", "rank 0 of 2 on host 1 of 2, gloo"),
        (
            {contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: "2"},
            "algo-1",
            "mpirun starts 4 ranks (2 per host) from host 1 of 2",
        ),
        (
            {contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: "2"},
            "algo-2",
            "host 2 of 2, its ranks started by algo-1's mpirun",
        ),
    ],
)
def test_each_launcher_says_in_a_few_words_what_a_host_starts(
    tmp_path: Path, hps: dict[str, str], host: str, summary: str
) -> None:
    env = env_for(tmp_path, hps, host=host, hosts=("algo-1", "algo-2"))
    assert select_launcher(env).plan().summary == summary


def test_ranks_per_host_follow_gpus_then_one(tmp_path: Path) -> None:
    hps = {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"}
    four_gpus = env_for(tmp_path, hps, environ={contract.SMLAUNCH_NUM_GPUS: "4"})
    plan = TorchrunLauncher(four_gpus).plan()
    assert len(plan.processes) == 4 and plan.topology["backend"].startswith("nccl")
    assert len(TorchrunLauncher(env_for(tmp_path, hps)).plan().processes) == 1
    pinned = env_for(
        tmp_path, hps, environ={contract.SMLAUNCH_NUM_GPUS: "4", contract.SMLAUNCH_PROCESSES_PER_HOST: "2"}
    )
    assert len(TorchrunLauncher(pinned).plan().processes) == 2


def test_user_omp_threads_are_kept(tmp_path: Path) -> None:
    env = env_for(
        tmp_path,
        {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"},
        environ={contract.SMLAUNCH_PROCESSES_PER_HOST: "2", "OMP_NUM_THREADS": "4"},
    )
    assert {p.env["OMP_NUM_THREADS"] for p in TorchrunLauncher(env).plan().processes} == {"4"}


def test_a_missing_entry_point_fails_the_plan(tmp_path: Path) -> None:
    env = env_for(tmp_path, {})
    (env.code_dir / "train.py").unlink()
    with pytest.raises(HostConfigurationError, match="not found in the code directory"):
        ProcessLauncher(env).plan()
