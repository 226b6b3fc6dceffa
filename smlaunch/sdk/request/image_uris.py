"""AWS Deep Learning Container URIs for PyTorch and TensorFlow training, from committed data tables.

``smlaunch/sdk/request/data/<framework>_training_images.json`` holds, for every training version that
SageMaker SDK 2.257.7 knows (its ``image_uri_config/pytorch.json`` / ``tensorflow.json``,
``training`` scope): the Python
versions, the ECR repository, the registry account per region, the version aliases (``1.8`` ->
``1.8.0``), and the ECR hostname per region. It was generated once with
``python -m smlaunch.sdk.request.image_uris --regenerate`` (which reads the installed ``sagemaker`` package);
at run time smlaunch never imports ``sagemaker``. A unit test checks the committed table against
the installed SDK when it is present.

:func:`retrieve` reproduces ``sagemaker.image_uris.retrieve`` for this scope:
``<account>.dkr.<ecr hostname>/<repository>:<version>-<cpu|gpu>-<py>`` (``pytorch-training``,
``tensorflow-training``, ...), with the version as the user wrote it (an alias stays an alias in the
tag), ``gpu`` for GPU types (``ml.p*``, ``ml.g*``, ``local_gpu``), and the CUDA 11 suffix the SDK adds
for PyTorch 1.6 and TensorFlow 1.15 / 2.3 GPU images with smdistributed or on p4d. An unknown
version, Python version or region is a :class:`ConfigurationError` listing the valid ones.

Not covered: SMP v2 images (``torch_distributed`` + ``smdistributed.modelparallel``, repository
``smdistributed-modelparallel``): pass ``image_uri`` for those.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.catalog import InstanceType

DATA_DIR = Path(__file__).parent / "data"
FRAMEWORKS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}
SDK_VERSION = "2.257.7"

# fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"] and
# TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS (SDK 2.257.7): what the DLCs can run.
SMDDP_FRAMEWORK_VERSIONS = (
    "1.6",
    "1.6.0",
    "1.7",
    "1.7.1",
    "1.8",
    "1.8.0",
    "1.8.1",
    "1.9",
    "1.9.0",
    "1.9.1",
    "1.10",
    "1.10.0",
    "1.10.2",
    "1.11",
    "1.11.0",
    "1.12",
    "1.12.0",
    "1.12.1",
    "1.13.1",
    "2.0.0",
    "2.0.1",
    "2.1.0",
    "2.1.2",
    "2.2.0",
)
TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS = (
    "1.13.1",
    "2.0.0",
    "2.0.1",
    "2.1.0",
    "2.1.2",
    "2.2.0",
    "2.3.0",
    "2.3.1",
    "2.4.1",
    "2.5.1",
    "2.6.0",
    "2.7.1",
    "2.8.0",
)
DLC_TAG = re.compile(
    r"^(?:.+/)?(?P<repository>[a-z]+-training):(?P<version>[0-9.]+)-(?:cpu|gpu)-(?P<py>py[0-9]+)"
)
"""A DLC image tag: ``<repository>:<version>-<cpu|gpu>-<py>`` (``attach()`` reads the versions back)."""

# sagemaker.image_uris._get_image_tag: CUDA 11 tags for PyTorch 1.6 and TensorFlow 1.15 / 2.3 GPU
# images when the job uses smdistributed or runs on p4d.
_AUTO_CONTAINER_VERSIONS = {
    "pytorch-1.6-gpu-py36": "cu110-ubuntu18.04-v3",
    "pytorch-1.6.0-gpu-py36": "cu110-ubuntu18.04",
    "pytorch-1.6-gpu-py3": "cu110-ubuntu18.04-v3",
    "pytorch-1.6.0-gpu-py3": "cu110-ubuntu18.04",
    "tensorflow-2.3-gpu-py37": "cu110-ubuntu18.04-v3",
    "tensorflow-2.3.1-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-2.3.2-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-1.15-gpu-py37": "cu110-ubuntu18.04-v8",
    "tensorflow-1.15.4-gpu-py37": "cu110-ubuntu18.04",
    "tensorflow-1.15.5-gpu-py37": "cu110-ubuntu18.04",
}


def table_path(framework: str = "pytorch") -> Path:
    """The committed table of ``framework`` (``pytorch`` or ``tensorflow``)."""
    return DATA_DIR / f"{framework}_training_images.json"


@lru_cache(maxsize=2)
def table(framework: str = "pytorch") -> dict[str, Any]:
    """The committed table of ``framework`` (read once)."""
    data: dict[str, Any] = json.loads(table_path(framework).read_text())
    return data


def versions(framework: str = "pytorch") -> list[str]:
    """Every accepted framework version: full versions, then aliases."""
    data = table(framework)
    return [*data["versions"], *data["version_aliases"]]


def _fail(field: str, value: object, what: str, valid: list[str], framework: str) -> ConfigurationError:
    return ConfigurationError(
        field,
        value,
        f"unsupported {what} for {FRAMEWORKS[framework]} training images",
        f"use one of: {', '.join(valid)}; or pass image_uri",
    )


def version_config(framework_version: str, py_version: str, framework: str = "pytorch") -> dict[str, Any]:
    """The table row for a version, after checking the version and the Python version."""
    data = table(framework)
    if framework_version not in data["versions"] and framework_version not in data["version_aliases"]:
        # Full versions only: each also answers to its major.minor alias, which would double the list.
        listed = [*data["versions"], f"or a major.minor such as {next(reversed(data['version_aliases']))!r}"]
        raise _fail("framework_version", framework_version, "version", listed, framework)
    full = data["version_aliases"].get(framework_version, framework_version)
    row = data["versions"][full]
    if py_version not in row["py_versions"]:
        raise ConfigurationError(
            "py_version",
            py_version,
            f"{FRAMEWORKS[framework]} {framework_version} images exist for "
            f"{', '.join(row['py_versions'])} only",
            f"pass py_version={row['py_versions'][-1]!r}",
        )
    return {"py_versions": row["py_versions"], **row["by_py"][py_version]} if "by_py" in row else row


def retrieve(
    framework_version: str,
    py_version: str,
    instance: InstanceType,
    region: str,
    smdistributed: bool = False,
    framework: str = "pytorch",
) -> str:
    """The DLC training image URI, as SDK 2.257.7's ``image_uris.retrieve`` returns it."""
    row = version_config(framework_version, py_version, framework)
    if region not in row["registries"]:
        raise _fail(
            "region",
            region,
            f"region for {FRAMEWORKS[framework]} {framework_version}",
            sorted(row["registries"]),
            framework,
        )
    hostname = table(framework)["hostnames"][region]
    tag = f"{framework_version}-{instance.processor}-{py_version}"
    family = instance.name.split(".")[1] if instance.name.startswith("ml.") else ""
    key = f"{framework}-{tag}"
    if (smdistributed or family == "p4d") and key in _AUTO_CONTAINER_VERSIONS:
        tag = f"{tag}-{_AUTO_CONTAINER_VERSIONS[key]}"
    return f"{row['registries'][region]}.dkr.{hostname}/{row['repository']}:{tag}"


def has_region(framework_version: str, py_version: str, region: str, framework: str = "pytorch") -> bool:
    return region in version_config(framework_version, py_version, framework)["registries"]


# --- regeneration (development only; needs the sagemaker package) ---------------------------------


def version_tuple(version: str) -> tuple[int, ...]:
    """``'2.1.0'`` as ``(2, 1, 0)`` (each part's leading digits, 0 where it has none), to compare."""
    parts: list[int] = []
    for part in str(version).split("."):
        digits = re.match(r"\d+", part)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


def generate_table(
    sdk_config: dict[str, Any], hostname_of: Any, framework: str = "pytorch"
) -> dict[str, Any]:
    """Build the table from the SDK's ``<framework>.json`` dict; ``hostname_of(region)`` gives the
    ECR hostname (the SDK takes it from botocore's endpoint data)."""
    training = sdk_config["training"]
    rows: dict[str, Any] = {}
    regions: set[str] = set()
    for version, config in training["versions"].items():
        if "py_versions" not in config:  # one repository per Python version (TensorFlow 1.13.1)
            rows[version] = {
                "py_versions": list(config),
                "by_py": {
                    py: {"repository": c["repository"], "registries": dict(sorted(c["registries"].items()))}
                    for py, c in config.items()
                },
            }
            for c in config.values():
                regions.update(c["registries"])
            continue
        rows[version] = {
            "py_versions": list(config["py_versions"]),
            "repository": config["repository"],
            "registries": dict(sorted(config["registries"].items())),
        }
        regions.update(config["registries"])
    return {
        "source": f"sagemaker {SDK_VERSION} image_uri_config/{framework}.json (training)",
        "processors": list(training["processors"]),
        "version_aliases": dict(training["version_aliases"]),
        "versions": rows,
        "hostnames": {region: hostname_of(region) for region in sorted(regions)},
    }


def _regenerate() -> None:  # pragma: no cover - development tool
    import sagemaker  # noqa: F401  (only here: the runtime never needs it)
    from sagemaker import image_uris as sdk_image_uris
    from sagemaker import utils as sdk_utils

    def hostname_of(region: str) -> str:
        endpoint = sdk_utils._botocore_resolver().construct_endpoint("ecr", region)
        return endpoint["hostname"] if endpoint else f"ecr.{region}.amazonaws.com"

    for framework in FRAMEWORKS:
        data = generate_table(sdk_image_uris.config_for_framework(framework), hostname_of, framework)
        path = table_path(framework)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path} ({len(data['versions'])} versions)")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--regenerate"]:
        _regenerate()
    else:
        print("usage: python -m smlaunch.sdk.request.image_uris --regenerate", file=sys.stderr)
        sys.exit(2)
