"""The instance catalog: coverage of the families, facts used by validation, lookup errors."""

from __future__ import annotations

import pytest

from estimator import catalog
from estimator.errors import ConfigurationError

FAMILIES = ["p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "g4dn", "g5", "g6", "c5", "m5"]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_present(family: str) -> None:
    assert any(name.split(".")[1] == family for name in catalog.names() if name.startswith("ml."))


@pytest.mark.parametrize(
    ("name", "gpus", "model", "efa"),
    [("ml.p3.2xlarge", 1, "V100", False), ("ml.p3.16xlarge", 8, "V100", False),
     ("ml.p4d.24xlarge", 8, "A100", True), ("ml.p5.48xlarge", 8, "H100", True),
     ("ml.p5en.48xlarge", 8, "H200", True), ("ml.g5.12xlarge", 4, "A10G", True),
     ("ml.g6.xlarge", 1, "L4", False), ("ml.c5.xlarge", 0, None, False), ("ml.m5.large", 0, None, False)],
)
def test_facts(name: str, gpus: int, model: str | None, efa: bool) -> None:
    entry = catalog.lookup(name)
    assert (entry.gpus, entry.gpu_model, entry.efa) == (gpus, model, efa)
    assert entry.processor == ("gpu" if gpus else "cpu")
    assert entry.vcpus and entry.memory_gib


def test_every_gpu_type_has_gpu_memory_and_every_cpu_type_none() -> None:
    for entry in catalog.CATALOG.values():
        if entry.gpus:
            assert entry.gpu_memory_gib and entry.gpu_model
        elif entry.gpus == 0:
            assert entry.gpu_memory_gib is None and entry.gpu_model is None


def test_local_types() -> None:
    assert catalog.lookup("local").is_gpu is False
    local_gpu = catalog.lookup("local_gpu")
    assert local_gpu.is_gpu and local_gpu.gpus is None and local_gpu.is_local


def test_unknown_type_suggests_nearest() -> None:
    with pytest.raises(ConfigurationError) as info:
        catalog.lookup("ml.p3.2xlarg")
    assert info.value.field == "instance_type" and info.value.value == "ml.p3.2xlarg"
    assert "did you mean 'ml.p3.2xlarge'" in str(info.value)


@pytest.mark.parametrize(("typo", "expected"), [("local-gpu", "local_gpu"), ("p3.2xlarge", "ml.p3.2xlarge"),
                                                ("ml.p4d.24xl", "ml.p4d.24xlarge")])
def test_suggestions(typo: str, expected: str) -> None:
    assert catalog.suggestions(typo)[0] == expected


def test_non_string_type() -> None:
    with pytest.raises(ConfigurationError, match="instance_type=None"):
        catalog.lookup(None)
