"""DLC image URIs from the committed table, checked against the installed SDK when present."""

from __future__ import annotations

import os
import re

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import image_uris
from smlaunch.sdk.request.catalog import lookup


def test_known_uris() -> None:
    assert (
        image_uris.retrieve("1.8.0", "py3", lookup("ml.p3.2xlarge"), "us-west-2")
        == "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.8.0-gpu-py3"
    )
    assert (
        image_uris.retrieve("2.1.0", "py310", lookup("ml.c5.xlarge"), "us-west-2")
        == "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
    )
    local_gpu = image_uris.retrieve("2.1.0", "py310", lookup("local_gpu"), "eu-west-1")
    assert local_gpu.endswith(":2.1.0-gpu-py310")
    assert image_uris.retrieve("2.1.0", "py310", lookup("ml.c5.xlarge"), "cn-north-1").startswith(
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/"
    )


def test_unknown_version_lists_valid_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        image_uris.retrieve("0.9", "py3", lookup("ml.p3.2xlarge"), "us-west-2")
    assert info.value.field == "framework_version" and info.value.value == "0.9"
    assert "2.1.0" in str(info.value) and "1.8" in str(info.value) and "image_uri" in str(info.value)
    # Each full version once; the aliases (2.1 for 2.1.0...) are described, not listed again.
    listed = (info.value.fix or "").removeprefix("use one of: ").split(", ")
    assert listed[:-1] == list(image_uris.table()["versions"])
    alias = re.fullmatch(r"or a major\.minor such as '(\d+\.\d+)'; or pass image_uri", listed[-1])
    assert alias is not None and listed[-2].startswith(f"{alias.group(1)}.")  # the newest's


def test_python_version_mismatch() -> None:
    with pytest.raises(ConfigurationError) as info:
        image_uris.retrieve("2.1.0", "py3", lookup("ml.p3.2xlarge"), "us-west-2")
    assert info.value.field == "py_version" and "py310" in str(info.value)


def test_unknown_region() -> None:
    with pytest.raises(ConfigurationError, match="region='local'"):
        image_uris.retrieve("2.1.0", "py310", lookup("ml.p3.2xlarge"), "local")


def test_table_covers_the_sdk_versions() -> None:
    assert {"1.8.0", "1.12.0", "2.1.0", "2.8.0"} <= set(image_uris.table()["versions"])


@pytest.fixture(scope="module")
def sdk_image_uris():
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    pytest.importorskip("sagemaker")
    from sagemaker import image_uris as sdk

    return sdk


@pytest.mark.parametrize("framework", sorted(image_uris.FRAMEWORKS))
def test_committed_table_equals_the_installed_sdk(sdk_image_uris, framework: str) -> None:
    from sagemaker import utils

    resolver = utils._botocore_resolver()

    def hostname_of(region: str) -> str:
        endpoint = resolver.construct_endpoint("ecr", region)
        return endpoint["hostname"] if endpoint else f"ecr.{region}.amazonaws.com"

    generated = image_uris.generate_table(
        sdk_image_uris.config_for_framework(framework), hostname_of, framework
    )
    assert generated == image_uris.table(framework)


def _sdk_cases(framework: str) -> list[tuple[str, str, str, str, bool]]:
    """Every full version (its newest py, alternating GPU/CPU types), a few aliases and regions,
    and the CUDA-suffix cases: ~40 calls per framework, as the SDK's retrieve takes ~0.2 s each."""
    table = image_uris.table(framework)
    cases = []
    types = ["ml.p3.2xlarge", "ml.c5.xlarge", "ml.g5.xlarge", "ml.m5.large"]
    for index, (version, row) in enumerate(table["versions"].items()):
        cases.append((version, row["py_versions"][-1], types[index % 4], "us-west-2", False))
    if framework == "tensorflow":
        cases += [
            ("2.16", "py310", "ml.c5.xlarge", "eu-central-1", False),
            ("2.3", "py37", "ml.p3.16xlarge", "us-west-2", True),
            ("1.15.5", "py37", "ml.p4d.24xlarge", "us-west-2", False),
            ("1.13.1", "py2", "ml.c5.xlarge", "us-west-2", False),
            ("1.13.1", "py3", "ml.c5.xlarge", "us-west-2", False),
        ]
        return cases
    cases += [
        ("1.8", "py3", "ml.p3.16xlarge", "eu-central-1", False),
        ("2.1", "py310", "ml.c5.xlarge", "cn-north-1", False),
        ("1.6", "py3", "ml.p3.16xlarge", "us-west-2", True),
        ("1.6.0", "py36", "ml.p4d.24xlarge", "us-west-2", False),
        ("1.6.0", "py3", "ml.c5.xlarge", "us-west-2", True),
        ("1.4.0", "py2", "ml.p3.2xlarge", "us-east-1", False),
    ]
    return cases


@pytest.mark.parametrize("framework", sorted(image_uris.FRAMEWORKS))
def test_versions_equal_sdk_retrieve(sdk_image_uris, framework: str) -> None:
    for version, py, instance_type, region, smdistributed in _sdk_cases(framework):
        distribution = {"smdistributed": {"dataparallel": {"enabled": True}}} if smdistributed else None
        expected = sdk_image_uris.retrieve(
            framework,
            region,
            version=version,
            py_version=py,
            instance_type=instance_type,
            image_scope="training",
            distribution=distribution,
        )
        ours = image_uris.retrieve(version, py, lookup(instance_type), region, smdistributed, framework)
        assert ours == expected, (version, py, instance_type, region)
