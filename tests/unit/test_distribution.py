"""Distribution models: parsing, impossible combinations, and the SDK's wire keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.catalog import lookup
from smlaunch.sdk.request.distribution import Distribution

P3 = lookup("ml.p3.16xlarge")
C5 = lookup("ml.c5.xlarge")
MP = {
    "partitions": 4,
    "placement_strategy": "spread",
    "pipeline": "interleaved",
    "optimize": "speed",
    "ddp": True,
    "microbatches": 4,
}


def smp(parameters: dict[str, Any], ppn: int = 8) -> dict[str, Any]:
    return {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        "mpi": {"enabled": True, "processes_per_host": ppn},
    }


def error(value: Any, instance: Any = P3, count: int = 1, local: bool = False) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        Distribution.parse(value).check(instance, count, local=local)
    assert info.value.fix, "every error says how to fix it"
    return info.value


def test_typo_key_is_named_with_suggestion() -> None:
    err = error({"smdistributed": {"dataparallel": {"enabeld": True}}})
    assert err.field == "distribution.smdistributed.dataparallel.enabeld" and err.value is True
    assert "unknown key" in str(err) and "did you mean 'enabled'" in str(err)


def test_typo_strategy() -> None:
    err = error({"torch_distributted": {"enabled": True}})
    assert err.field == "distribution.torch_distributted" and "did you mean 'torch_distributed'" in str(err)


def test_types_are_strict() -> None:
    assert error({"mpi": {"enabled": "yes"}}).field == "distribution.mpi.enabled"
    assert error({"mpi": True}).field == "distribution.mpi"
    assert (
        error({"mpi": {"enabled": True, "processes_per_host": 0}}).field
        == "distribution.mpi.processes_per_host"
    )
    assert error([1]).field == "distribution"


@pytest.mark.parametrize(
    "key", ["parameter_server", "pytorchxla", "multi_worker_mirrored_strategy", "instance_groups"]
)
def test_unsupported_strategies(key: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Distribution.parse({key: {"enabled": True}}, "pytorch")
    assert caught.value.field == f"distribution.{key}" and "not supported" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (
            {"pytorchddp": {"enabled": True}, "smdistributed": {"dataparallel": {"enabled": True}}},
            "pytorchddp and smdistributed",
        ),
        ({"pytorchddp": {"enabled": True}, "torch_distributed": {"enabled": True}}, "pytorchddp and torch"),
        (
            {"smdistributed": {"dataparallel": {"enabled": True}, "modelparallel": {"enabled": True}}},
            "more than one smdistributed",
        ),
        ({"mpi": {"enabled": True}, "torch_distributed": {"enabled": True}}, "cannot coexist"),
        ({"mpi": {"enabled": True}, "smdistributed": {"dataparallel": {"enabled": True}}}, "drop 'mpi'"),
        (
            {"smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}}},
            "needs MPI",
        ),
    ],
)
def test_impossible_combinations(value: dict[str, Any], needle: str) -> None:
    assert needle in str(error(value))


def test_processes_per_host_above_gpu_count() -> None:
    err = error({"mpi": {"enabled": True, "processes_per_host": 9}})
    assert err.field == "distribution.mpi.processes_per_host" and err.value == 9
    assert "8 GPU(s)" in str(err) and "processes_per_host <= 8" in str(err)
    # CPU types have no GPU bound; local_gpu's count is the machine's.
    Distribution.parse({"mpi": {"enabled": True, "processes_per_host": 16}}).check(C5, 1, local=False)
    Distribution.parse({"mpi": {"enabled": True, "processes_per_host": 16}}).check(
        lookup("local_gpu"), 1, local=True
    )


def test_smddp_needs_gpus_even_locally() -> None:
    for local in (False, True):
        err = error({"smdistributed": {"dataparallel": {"enabled": True}}}, instance=C5, local=local)
        assert "needs GPUs" in str(err) and "ml.c5.xlarge" in str(err)
    error({"smdistributed": {"dataparallel": {"enabled": True}}}, instance=lookup("local"), local=True)
    Distribution.parse({"smdistributed": {"dataparallel": {"enabled": True}}}).check(
        lookup("local_gpu"), 1, local=True
    )


def test_torch_distributed_on_cpu_only_locally() -> None:
    err = error({"torch_distributed": {"enabled": True}}, instance=C5)
    assert "GPU instance types" in str(err) and "LocalSession" in str(err)
    Distribution.parse({"torch_distributed": {"enabled": True}}).check(C5, 2, local=True)
    Distribution.parse({"pytorchddp": {"enabled": True}}).check(lookup("local"), 2, local=True)


def test_partitions_must_divide_processes() -> None:
    err = error(smp({"partitions": 3}))
    assert err.field == "distribution.smdistributed.modelparallel.parameters.partitions"
    assert "do not divide the 8 processes" in str(err)
    Distribution.parse(smp({"partitions": 4})).check(P3, 1, local=False)
    Distribution.parse(smp({"partitions": 16}, ppn=8)).check(P3, 2, local=False)
    assert "16 processes" in str(error(smp({"partitions": 3}, ppn=8), count=2))
    assert "tensor" in str(error(smp({"partitions": 2, "tensor_parallel_degree": 3})))


@pytest.mark.parametrize(
    ("parameters", "key"),
    [
        ({"pipeline": "bogus"}, "pipeline"),
        ({"placement_strategy": "x"}, "placement_strategy"),
        ({"optimize": "fast"}, "optimize"),
        ({"microbatches": 0}, "microbatches"),
        ({"partitions": "2"}, "partitions"),
        ({"ddp": "yes"}, "ddp"),
        ({"auto_partition": False, "partitions": 2}, "default_partition"),
        ({"default_partition": 2, "partitions": 2}, "default_partition"),
        ({"memory_weight": 1.5}, "memory_weight"),
        ({"ddp_port": 1}, "ddp_port"),
        ({"ddp": True, "horovod": True}, "ddp"),
        ({"partition_file": 3}, "partition_file"),
    ],
)
def test_mp_config_rules(parameters: dict[str, Any], key: str) -> None:
    err = error(smp(parameters))
    assert err.field == f"distribution.smdistributed.modelparallel.parameters.{key}"


def test_mp_parameters_from_file(tmp_path: Path) -> None:
    path = tmp_path / "smp.json"
    path.write_text(json.dumps(MP))
    dist = Distribution.parse(smp(str(path)))  # type: ignore[arg-type]
    assert dist.to_hyperparameters("ml.p3.16xlarge")["mp_parameters"] == MP
    assert "no such model-parallel config" in str(error(smp(str(tmp_path / "nope.json"))))  # type: ignore[arg-type]


CASES = [
    (
        {"smdistributed": {"dataparallel": {"enabled": True}}},
        {
            "sagemaker_distributed_dataparallel_enabled": True,
            "sagemaker_instance_type": "ml.p3.16xlarge",
            "sagemaker_distributed_dataparallel_custom_mpi_options": "",
        },
    ),
    (
        smp(MP),
        {
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_num_of_processes_per_host": 8,
            "sagemaker_mpi_custom_mpi_options": "",
            "mp_parameters": MP,
            "sagemaker_distributed_dataparallel_enabled": False,
            "sagemaker_instance_type": "ml.p3.16xlarge",
        },
    ),
    (
        {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": "-verbose"}},
        {
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_mpi_custom_mpi_options": "-verbose",
        },
    ),
    (
        {"torch_distributed": {"enabled": True}},
        {"sagemaker_torch_distributed_enabled": True, "sagemaker_instance_type": "ml.p3.16xlarge"},
    ),
    (
        {"pytorchddp": {"enabled": True}},
        {"sagemaker_pytorch_ddp_enabled": True, "sagemaker_instance_type": "ml.p3.16xlarge"},
    ),
    ({"mpi": {"enabled": False}}, {"sagemaker_mpi_enabled": False, "sagemaker_mpi_custom_mpi_options": ""}),
    (None, {}),
]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_wire_keys_in_sdk_order(value: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    keys = Distribution.parse(value).to_hyperparameters("ml.p3.16xlarge")
    assert keys == expected and list(keys) == list(expected)


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_round_trip_through_hyperparameters(value: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    rebuilt = Distribution.from_hyperparameters(expected)
    assert rebuilt.to_hyperparameters("ml.p3.16xlarge") == expected


def test_strategy_and_processes() -> None:
    assert Distribution.parse(smp(MP)).strategy == "modelparallel"
    assert Distribution.parse({"mpi": {"enabled": True}}).strategy == "mpi"
    assert Distribution.parse({"torch_distributed": {"enabled": True}}).processes_per_host(P3) == 8
    assert Distribution.parse({"smdistributed": {"dataparallel": {"enabled": True}}}).strategy == "smddp"
    assert Distribution.parse(None).strategy == "none"
    assert Distribution.parse(None).processes_per_host(P3) == 1
