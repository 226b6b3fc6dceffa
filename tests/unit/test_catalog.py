"""The instance catalog: every botocore training type, the facts validation uses, lookup errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import catalog

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # tools/ is not a package: load the script by path
    spec = importlib.util.spec_from_file_location("instance_catalog", ROOT / "tools" / "instance_catalog.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_training_type_of_the_installed_botocore_is_in_the_catalog() -> None:
    botocore_session = pytest.importorskip("botocore.session")
    model = botocore_session.get_session().get_service_model("sagemaker")
    missing = sorted(set(model.shape_for("TrainingInstanceType").enum) - set(catalog.names()))
    assert not missing, f"regenerate with `python tools/instance_catalog.py`; missing: {missing}"


def test_the_data_file_is_what_the_script_generates() -> None:
    generator = _generator()
    committed = json.loads(catalog.DATA_PATH.read_text())
    names = [row["name"] for row in committed["types"]]
    built = generator.build(names, "x")
    assert built["types"] == committed["types"] and built["fields"] == committed["fields"]
    assert json.loads(generator.dump(built))["types"] == committed["types"]
    assert "tools/instance_catalog.py" in committed["source"]


@pytest.mark.parametrize(
    ("name", "vcpus", "memory", "kind", "count", "model", "device_memory", "efa"),
    [
        ("ml.p3.2xlarge", 8, 61, "nvidia", 1, "V100", 16, False),
        ("ml.p3.16xlarge", 64, 488, "nvidia", 8, "V100", 16, False),
        ("ml.p4d.24xlarge", 96, 1152, "nvidia", 8, "A100", 40, True),
        ("ml.p4de.24xlarge", 96, 1152, "nvidia", 8, "A100", 80, True),
        ("ml.p5.48xlarge", 192, 2048, "nvidia", 8, "H100", 80, True),
        ("ml.p5.4xlarge", 16, 256, "nvidia", 1, "H100", 80, True),
        ("ml.p5en.48xlarge", 192, 2048, "nvidia", 8, "H200", 141, True),
        ("ml.p6-b200.48xlarge", 192, 2048, "nvidia", 8, "B200", 180, True),
        ("ml.g5.12xlarge", 48, 192, "nvidia", 4, "A10G", 24, True),
        ("ml.g6.xlarge", 4, 16, "nvidia", 1, "L4", 24, False),
        ("ml.g6e.12xlarge", 48, 384, "nvidia", 4, "L40S", 48, True),
        ("ml.g6e.48xlarge", 192, 1536, "nvidia", 8, "L40S", 48, True),
        ("ml.trn1.2xlarge", 8, 32, "neuron", 1, "Trainium", 32, False),
        ("ml.trn1.32xlarge", 128, 512, "neuron", 16, "Trainium", 32, True),
        ("ml.trn2.48xlarge", 192, 2048, "neuron", 16, "Trainium2", 96, True),
        ("ml.c4.8xlarge", 36, 60, "none", 0, None, None, False),
        ("ml.c5n.18xlarge", 72, 192, "none", 0, None, None, True),
        ("ml.m6i.32xlarge", 128, 512, "none", 0, None, None, True),
        ("ml.r5.large", 2, 16, "none", 0, None, None, False),
        ("ml.t3.medium", 2, 4, "none", 0, None, None, False),
        ("ml.m5.large", 2, 8, "none", 0, None, None, False),
    ],
)
def test_facts(
    name: str,
    vcpus: int,
    memory: float,
    kind: str,
    count: int,
    model: str | None,
    device_memory: float | None,
    efa: bool,
) -> None:
    entry = catalog.lookup(name)
    assert (entry.vcpus, entry.memory_gib, entry.accelerator, entry.accelerator_count) == (
        vcpus,
        memory,
        kind,
        count,
    )
    assert (entry.accelerator_model, entry.accelerator_memory_gib, entry.efa) == (model, device_memory, efa)
    assert entry.processor == ("gpu" if kind == "nvidia" else "cpu")
    assert entry.gpus == (count if kind == "nvidia" else 0)


@pytest.mark.parametrize(
    ("name", "ranks"),
    [
        ("ml.trn1.2xlarge", 2),
        ("ml.trn1.32xlarge", 32),
        ("ml.trn1n.32xlarge", 32),
        ("ml.trn2.48xlarge", 64),
        ("ml.p4d.24xlarge", 8),
        ("ml.c5.xlarge", 1),
    ],
)
def test_ranks_per_host_are_gpus_else_neuron_cores_as_the_toolkit_counts(name: str, ranks: int) -> None:
    assert catalog.lookup(name).accelerator_ranks == ranks


def test_trn2_matches_the_toolkit_hard_coded_count() -> None:
    environment = pytest.importorskip("sagemaker_training.environment")
    assert catalog.lookup("ml.trn2.48xlarge").neuron_cores == environment.num_neurons("ml.trn2.48xlarge")


def test_efa_matches_the_toolkit_efa_list() -> None:
    toolkit = pytest.importorskip("sagemaker_training")
    for name in toolkit.SM_EFA_NCCL_INSTANCES:
        assert catalog.lookup(name).efa, name


def test_every_accelerated_type_names_its_device_and_every_cpu_type_none() -> None:
    for entry in catalog.catalog().values():
        if entry.accelerator in ("nvidia", "neuron") and not entry.is_local:
            assert entry.accelerator_model and entry.accelerator_memory_gib
        elif entry.accelerator == "none":
            assert entry.accelerator_count == 0 and entry.accelerator_model is None
        if entry.is_neuron:
            assert entry.neuron_cores and entry.accelerator_count
        assert entry.vcpus or entry.is_local


def test_local_types() -> None:
    assert catalog.lookup("local").is_gpu is False
    local_gpu = catalog.lookup("local_gpu")
    assert local_gpu.is_gpu and local_gpu.gpus is None and local_gpu.is_local


def test_a_well_formed_unknown_name_is_an_unknown_entry() -> None:
    entry = catalog.lookup("ml.p7.48xlarge")
    assert not entry.known and entry.accelerator is None and entry.processor == "gpu"
    assert catalog.lookup("ml.x9z.large").processor == "cpu"


def test_local_emulation_needs_the_topology() -> None:
    with pytest.raises(ConfigurationError, match="not in smlaunch's instance catalog") as info:
        catalog.require_topology(catalog.lookup("ml.p7.48xlarge"))
    assert "SageMaker" in str(info.value)
    with pytest.raises(ConfigurationError, match="accelerator count is not published"):
        catalog.require_topology(catalog.lookup("ml.g7.12xlarge"))
    assert catalog.require_topology(catalog.lookup("ml.g7.12xlarge"), pinned_ranks=2).name == "ml.g7.12xlarge"
    assert catalog.require_topology(catalog.lookup("ml.trn1.32xlarge")).neuron_cores == 32


def test_malformed_type_suggests_nearest() -> None:
    with pytest.raises(ConfigurationError) as info:
        catalog.lookup("ml.p3.2xlarg")
    assert info.value.field == "instance_type" and info.value.value == "ml.p3.2xlarg"
    assert "did you mean 'ml.p3.2xlarge'" in str(info.value)


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("local-gpu", "local_gpu"),
        ("p3.2xlarge", "ml.p3.2xlarge"),
        ("ml.p4d.24xl", "ml.p4d.24xlarge"),
        ("ml.g6e.13xlarge", "ml.g6e.12xlarge"),
        ("ml.p5ee.48xlarge", "ml.p5e.48xlarge"),
    ],
)
def test_suggestions(typo: str, expected: str) -> None:
    assert catalog.suggestions(typo)[0] == expected


def test_suggestions_stay_within_the_family() -> None:
    for typo in ("ml.g6e.13xlarge", "ml.g6e.12xlarg", "ml.g6e.96xlarge"):
        assert {catalog.family(n) for n in catalog.suggestions(typo)} == {"g6e"}, typo


def test_non_string_type() -> None:
    with pytest.raises(ConfigurationError, match="instance_type=None"):
        catalog.lookup(None)
