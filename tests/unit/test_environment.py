"""Environment.from_files: tolerant reading, explicit errors, the resolution rules of the module docstring,
and the hyperparameter codec (the toolkit-equality checks live in test_environment_oracle.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.runtime import env_vars
from smlaunch.runtime.env_vars import to_env_vars
from smlaunch.runtime.environment import Environment, HostConfigurationError
from tests.functional._runtime_tree import write_host_tree

NO_GPU = {contract.SMLAUNCH_NUM_GPUS: "0"}


def tree(
    tmp_path: Path,
    hps: dict[str, str] | None = None,
    host: str = "algo-1",
    hosts: tuple[str, ...] = ("algo-1",),
) -> Path:
    base = tmp_path / "ml"
    write_host_tree(base, host, list(hosts), hps or {})
    return base


def test_importing_the_runtime_has_no_side_effects(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), contract.BASE_DIR_ENV: str(tmp_path / "ml")}
    code = (
        "import smlaunch.runtime.environment, smlaunch.runtime.supervision.supervisor, "
        "smlaunch.runtime.launchers, smlaunch.runtime.code, smlaunch.runtime.report"
    )
    code += "; import smlaunch.runtime.__main__"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_runtime_never_imports_torch_or_boto3(tmp_path: Path) -> None:
    code = (
        "import sys, smlaunch.runtime.__main__, smlaunch.runtime.launchers.torchrun, "
        "smlaunch.runtime.launchers.process\n"
        "print(sorted(m for m in ('torch', 'boto3', 'estimator', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_missing_optional_files_read_as_empty(tmp_path: Path) -> None:
    base = tree(tmp_path)
    contract.Paths(base).hyperparameters_file.unlink()
    contract.Paths(base).input_data_config_file.unlink()
    env = Environment.from_files(base, NO_GPU)
    assert env.hyperparameters == {} and env.channel_input_dirs == {}
    assert env.user_entry_point is None and env.module_name == "None"  # as the toolkit reports it


def test_resource_config_is_required(tmp_path: Path) -> None:
    base = tree(tmp_path)
    contract.Paths(base).resource_config_file.unlink()
    with pytest.raises(HostConfigurationError, match=r"resourceconfig\.json.*file is missing"):
        Environment.from_files(base, NO_GPU)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "cannot be read as JSON"),
        ("[1, 2]", "must hold a JSON object"),
        (json.dumps({"current_host": "algo-9", "hosts": ["algo-1"]}), "is not one of hosts"),
        (json.dumps({"current_host": "algo-1", "hosts": []}), "non-empty list"),
    ],
)
def test_bad_resource_configs_are_named(tmp_path: Path, content: str, problem: str) -> None:
    base = tree(tmp_path)
    contract.Paths(base).resource_config_file.write_text(content)
    with pytest.raises(HostConfigurationError, match=problem):
        Environment.from_files(base, NO_GPU)


def test_sdk_local_mode_resource_config_without_instance_groups(tmp_path: Path) -> None:
    base = tree(tmp_path, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"})
    contract.Paths(base).resource_config_file.write_text(
        json.dumps(
            {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}
        )
    )
    env = Environment.from_files(base, NO_GPU)
    assert env.distribution_hosts == ["algo-1", "algo-2"] and env.master_hostname == "algo-1"
    assert env.current_instance_type == "local" and env.current_group_name == "homogeneousCluster"
    assert env.instance_groups == [] and env.host_rank == 1 and not env.is_master


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not json", "JSON object host -> address"),
        ('{"algo-1": 1}', "JSON object host -> address"),
        ('{"algo-1": "127.0.0.1"}', "has no address for \\['algo-2'\\]"),
    ],
)
def test_host_address_map_is_validated(tmp_path: Path, raw: str, problem: str) -> None:
    base = tree(tmp_path, hosts=("algo-1", "algo-2"))
    with pytest.raises(HostConfigurationError, match=problem) as error:
        Environment.from_files(base, {**NO_GPU, contract.SMLAUNCH_HOST_ADDRESSES: raw})
    assert error.value.field == contract.SMLAUNCH_HOST_ADDRESSES


def test_addresses_ports_and_ranks(tmp_path: Path) -> None:
    base = tree(tmp_path, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"}, "algo-2", ("algo-1", "algo-2"))
    plain = Environment.from_files(base, NO_GPU)
    assert plain.master_addr == "algo-1" and plain.master_port == 7777  # SageMaker's DNS resolves names
    mapped = Environment.from_files(
        base,
        {
            **NO_GPU,
            contract.SMLAUNCH_HOST_ADDRESSES: '{"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}',
            contract.SMLAUNCH_MASTER_PORT: "29501",
        },
    )
    assert mapped.master_addr == "127.0.0.1" and mapped.address_of("algo-2") == "127.0.0.2"
    assert mapped.master_port == 29501 and mapped.host_rank == 1 and mapped.host_count == 2
    with pytest.raises(HostConfigurationError, match="SMLAUNCH_MASTER_PORT"):
        Environment.from_files(base, {**NO_GPU, contract.SMLAUNCH_MASTER_PORT: "70000"})
    with pytest.raises(HostConfigurationError):
        mapped.address_of("algo-7")


def test_one_host_jobs_rendezvous_on_loopback(tmp_path: Path) -> None:
    assert Environment.from_files(tree(tmp_path), NO_GPU).master_addr == "127.0.0.1"


def test_gpu_and_cpu_counts_can_be_pinned(tmp_path: Path) -> None:
    env = Environment.from_files(
        tree(tmp_path), {contract.SMLAUNCH_NUM_GPUS: "8", contract.SMLAUNCH_NUM_CPUS: "3"}
    )
    assert (env.num_gpus, env.num_cpus, env.processes_per_host) == (8, 3, 8)
    assert to_env_vars(env)["SM_NUM_GPUS"] == "8" and to_env_vars(env)["SM_NUM_CPUS"] == "3"
    with pytest.raises(HostConfigurationError, match="SMLAUNCH_NUM_GPUS"):
        Environment.from_files(tree(tmp_path), {contract.SMLAUNCH_NUM_GPUS: "-1"})
    with pytest.raises(HostConfigurationError, match="SMLAUNCH_PROCESSES_PER_HOST"):
        Environment.from_files(tree(tmp_path), {**NO_GPU, contract.SMLAUNCH_PROCESSES_PER_HOST: "0"})


def test_processes_per_host_precedence(tmp_path: Path) -> None:
    mpi = {contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: "3"}
    pinned = {contract.SMLAUNCH_NUM_GPUS: "8", contract.SMLAUNCH_PROCESSES_PER_HOST: "2"}
    assert Environment.from_files(tree(tmp_path, mpi), pinned).processes_per_host == 3
    assert Environment.from_files(tree(tmp_path), pinned).processes_per_host == 2
    assert Environment.from_files(tree(tmp_path), NO_GPU).processes_per_host == 1
    bad = {contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: '"many"'}
    with pytest.raises(HostConfigurationError, match=contract.HP_MPI_PROCESSES_PER_HOST):
        Environment.from_files(tree(tmp_path, bad), NO_GPU)


def test_program_env_beats_the_hyperparameter_but_submit_dir_env_does_not(tmp_path: Path) -> None:
    base = tree(tmp_path, {contract.HP_PROGRAM: '"a.py"', contract.HP_SUBMIT_DIRECTORY: '"s3://b/k.tar.gz"'})
    env = Environment.from_files(
        base, {**NO_GPU, "SAGEMAKER_PROGRAM": "b.py", "SAGEMAKER_SUBMIT_DIRECTORY": "s3://other/x.tar.gz"}
    )
    assert env.user_entry_point == "b.py" and env.module_name == "b"
    assert env.module_dir == "s3://b/k.tar.gz"
    assert env.code_dir == contract.Paths(base).code_dir


def test_process_env_exports_what_the_toolkit_exports(tmp_path: Path) -> None:
    hps = {contract.HP_JOB_NAME: '"job-7"', contract.HP_REGION: '"eu-west-1"'}
    env = Environment.from_files(tree(tmp_path, hps), {**NO_GPU, "PYTHONPATH": "/extra", "KEEP": "me"})
    process_env = env_vars.process_env(env)
    assert process_env["KEEP"] == "me"
    assert process_env["CURRENT_HOST"] == "algo-1"
    assert (process_env["SAGEMAKER_JOB_NAME"], process_env["SAGEMAKER_REGION"]) == ("job-7", "eu-west-1")
    entries = process_env["PYTHONPATH"].split(os.pathsep)
    assert entries[0] == str(env.code_dir) and entries[-1] == "/extra"
    assert process_env["SM_CURRENT_HOST"] == "algo-1"


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (contract.PYTORCH_TRAINING_MODULE, True),
        (contract.TENSORFLOW_TRAINING_MODULE, False),
        (None, False),
    ],
)
def test_pytorch_image_jobs_get_master_addr_and_port_without_a_distribution(
    tmp_path: Path, module: str | None, expected: bool
) -> None:
    # As sagemaker_pytorch_container.training.train(): every job of the PyTorch image, ranked or not.
    environ = {
        **NO_GPU,
        contract.SMLAUNCH_HOST_ADDRESSES: '{"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"}',
        contract.SMLAUNCH_MASTER_PORT: "29501",
    }
    if module is not None:
        environ[contract.TRAINING_MODULE_ENV] = module
    env = Environment.from_files(tree(tmp_path, host="algo-2", hosts=("algo-1", "algo-2")), environ)
    process_env = env_vars.process_env(env)
    if expected:
        assert (process_env[contract.MASTER_ADDR], process_env[contract.MASTER_PORT_ENV]) == (
            "10.0.0.1",
            "29501",
        )
    else:  # SageMaker's TensorFlow and generic images set neither
        assert contract.MASTER_ADDR not in process_env and contract.MASTER_PORT_ENV not in process_env
    assert process_env["SM_FRAMEWORK_MODULE"] == (module or "")


def test_modelparallel_flag_reports_what_the_script_sees(tmp_path: Path) -> None:
    on = Environment.from_files(tree(tmp_path, {contract.HP_MP_PARAMETERS: '{"partitions": 2}'}), NO_GPU)
    off = Environment.from_files(tree(tmp_path, {contract.HP_MP_PARAMETERS: "{}"}), NO_GPU)
    absent = Environment.from_files(tree(tmp_path), NO_GPU)
    assert (on.is_modelparallel_enabled, off.is_modelparallel_enabled, absent.is_modelparallel_enabled) == (
        True,
        False,
        None,
    )
    # mp_parameters stays a user hyperparameter, as in SageMaker.
    assert on.user_args() == ["--mp_parameters", "partitions=2"]


# --- the hyperparameter codec -----------------------------------------------------------------


def test_decode_keeps_what_is_not_json() -> None:
    decoded = hp.decode({"a": "3", "b": "not json", "c": "007", "d": "NaN", "e": "null", "f": 5})
    assert decoded["a"] == 3 and decoded["b"] == "not json" and decoded["c"] == "007"
    assert math.isnan(decoded["d"]) and decoded["e"] is None and decoded["f"] == 5


def test_split_separates_user_framework_and_reserved_keys() -> None:
    user, framework, sagemaker = hp.split(
        {"lr": 1, "sagemaker_program": "t.py", "sagemaker_mpi_enabled": True, "_tuning_objective_metric": "x"}
    )
    assert user == {"lr": 1}
    assert framework == {"sagemaker_mpi_enabled": True}
    assert set(sagemaker) == {"sagemaker_program", "sagemaker_mpi_enabled", "_tuning_objective_metric"}


def test_cmd_args_and_env_values() -> None:
    assert hp.to_cmd_args({"bb": True, "aa": [1, "x"], "cc": {"z": 1, "y": None}, "dd": None, "x": 1.5}) == [
        "--aa",
        "[1, 'x']",
        "--bb",
        "True",
        "--cc",
        "y=None,z=1",
        "--dd",
        "",
        "-x",
        "1.5",
    ]
    assert hp.env_value("a b") == "a b" and hp.env_value(None) == "" and hp.env_value(True) == "true"
    assert hp.env_value({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert hp.truthy("True") and hp.truthy(True) and not hp.truthy("false") and not hp.truthy(0)
