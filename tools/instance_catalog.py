"""Regenerate ``smlaunch/sdk/request/data/instance_types.json``: one row per SageMaker training instance type.

Run ``python tools/instance_catalog.py`` after upgrading botocore. The names come from the installed
botocore's SageMaker service model (the ``TrainingInstanceType`` enum, the list CreateTrainingJob
accepts); the facts of each name come from the family tables below. A name whose family is not in
the tables stops the script, naming the family, so a new family is added here deliberately, with
its source, rather than guessed.

Sources of the facts (public AWS documentation):

- vCPUs and memory: the EC2 instance type pages ("Amazon EC2 instance types", general purpose,
  compute optimized, memory optimized, accelerated computing specifications). For the families of
  EC2's regular naming scheme a size's vCPUs follow from its name (``large`` 2, ``xlarge`` 4,
  ``Nxlarge`` 4N) and memory is a fixed GiB per vCPU for the family (m 4, c 2, r 8); the
  irregular families (c4, c5n, t3, every accelerated family) are listed size by size.
- GPU model, count and memory per GPU: the EC2 accelerated computing specifications and the
  instance pages for P and G instances (p6-b300: "2.1 TB" of GPU memory over 8 GPUs; p6e-gb200: the
  GB200 NVL72's 13.4 TB over 72 GPUs).
- Trainium devices, NeuronCores and memory per device: the EC2 Trn1/Trn2 pages and the AWS Neuron
  documentation. ``neuron_cores`` is the count per host that SageMaker's training toolkit uses for
  ranks per host (``sagemaker_training.environment.num_neurons``: the ``nc_count`` sum of
  ``neuron-ls``, and 64 for ``trn2.48xlarge``, whose 128 physical cores run as 64 logical cores at
  the default logical NeuronCore configuration of 2).
- EFA: the EC2 "Supported instance types" list of Elastic Fabric Adapter; cross-checked with the
  ``SM_EFA_NCCL_INSTANCES`` list of ``sagemaker-training`` and the instance resource table of
  ``aws/sagemaker-hyperpod-cli`` (``src/sagemaker/hyperpod/training/constants.py``).
- Unknown stays unknown: G7 (NVIDIA RTX PRO 4500 Blackwell Server Edition, 32 GB per GPU) has no
  published per-size GPU count or memory in those sources, so those fields are ``null``; SageMaker
  jobs on them run, local emulation refuses them saying why.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "smlaunch" / "sdk" / "request" / "data" / "instance_types.json"

# --- CPU families ---------------------------------------------------------------------------------
# family -> (GiB of memory per vCPU, sizes with EFA)
RATIO_FAMILIES: dict[str, tuple[float, frozenset[str]]] = {
    "m4": (4, frozenset()),
    "m5": (4, frozenset()),
    "m6i": (4, frozenset({"32xlarge"})),
    "m7i": (4, frozenset({"48xlarge"})),
    "m8i": (4, frozenset({"48xlarge", "96xlarge"})),
    "m7i-flex": (4, frozenset()),
    "m8i-flex": (4, frozenset()),
    "c5": (2, frozenset()),
    "c6i": (2, frozenset({"32xlarge"})),
    "c7i": (2, frozenset({"48xlarge"})),
    "c8i": (2, frozenset({"48xlarge", "96xlarge"})),
    "c7i-flex": (2, frozenset()),
    "c8i-flex": (2, frozenset()),
    "r5": (8, frozenset()),
    "r5d": (8, frozenset()),
    "r6i": (8, frozenset({"32xlarge"})),
    "r7i": (8, frozenset({"48xlarge"})),
    "r8i": (8, frozenset({"48xlarge", "96xlarge"})),
    "r8i-flex": (8, frozenset()),
}
# family -> size -> (vCPUs, memory GiB, EFA)
IRREGULAR_CPU_FAMILIES: dict[str, dict[str, tuple[int, float, bool]]] = {
    "c4": {
        "xlarge": (4, 7.5, False),
        "2xlarge": (8, 15, False),
        "4xlarge": (16, 30, False),
        "8xlarge": (36, 60, False),
    },
    "c5n": {
        "xlarge": (4, 10.5, False),
        "2xlarge": (8, 21, False),
        "4xlarge": (16, 42, False),
        "9xlarge": (36, 96, True),
        "18xlarge": (72, 192, True),
    },
    "t3": {
        "medium": (2, 4, False),
        "large": (2, 8, False),
        "xlarge": (4, 16, False),
        "2xlarge": (8, 32, False),
    },
}

# --- accelerated families -------------------------------------------------------------------------
# family -> (kind, model, memory GiB per device, {size: (vCPUs, memory GiB, devices, NeuronCores, EFA)})
# ``None`` where the sources used do not publish the number.
_Size = tuple[int, "float | None", "int | None", "int | None", "bool | None"]
# G6 has G5's sizes: same vCPUs, memory, GPU count and EFA per size.
_G5_SIZES: dict[str, _Size] = {
    "xlarge": (4, 16, 1, None, False),
    "2xlarge": (8, 32, 1, None, False),
    "4xlarge": (16, 64, 1, None, False),
    "8xlarge": (32, 128, 1, None, True),
    "12xlarge": (48, 192, 4, None, True),
    "16xlarge": (64, 256, 1, None, True),
    "24xlarge": (96, 384, 4, None, True),
    "48xlarge": (192, 768, 8, None, True),
}
ACCELERATED_FAMILIES: dict[str, tuple[str, str, float, dict[str, _Size]]] = {
    "p2": (
        "nvidia",
        "K80",
        12,
        {
            "xlarge": (4, 61, 1, None, False),
            "8xlarge": (32, 488, 8, None, False),
            "16xlarge": (64, 732, 16, None, False),
        },
    ),
    "p3": (
        "nvidia",
        "V100",
        16,
        {
            "2xlarge": (8, 61, 1, None, False),
            "8xlarge": (32, 244, 4, None, False),
            "16xlarge": (64, 488, 8, None, False),
        },
    ),
    "p3dn": ("nvidia", "V100", 32, {"24xlarge": (96, 768, 8, None, True)}),
    "p4d": ("nvidia", "A100", 40, {"24xlarge": (96, 1152, 8, None, True)}),
    "p4de": ("nvidia", "A100", 80, {"24xlarge": (96, 1152, 8, None, True)}),
    "p5": (
        "nvidia",
        "H100",
        80,
        {"4xlarge": (16, 256, 1, None, True), "48xlarge": (192, 2048, 8, None, True)},
    ),
    "p5e": ("nvidia", "H200", 141, {"48xlarge": (192, 2048, 8, None, True)}),
    "p5en": ("nvidia", "H200", 141, {"48xlarge": (192, 2048, 8, None, True)}),
    "p6-b200": ("nvidia", "B200", 180, {"48xlarge": (192, 2048, 8, None, True)}),
    "p6-b300": ("nvidia", "B300", 268, {"48xlarge": (192, 4096, 8, None, True)}),
    "p6e-gb200": ("nvidia", "GB200", 186, {"36xlarge": (144, 960, 4, None, True)}),
    "g4dn": (
        "nvidia",
        "T4",
        16,
        {
            "xlarge": (4, 16, 1, None, False),
            "2xlarge": (8, 32, 1, None, False),
            "4xlarge": (16, 64, 1, None, False),
            "8xlarge": (32, 128, 1, None, True),
            "12xlarge": (48, 192, 4, None, True),
            "16xlarge": (64, 256, 1, None, True),
        },
    ),
    "g5": ("nvidia", "A10G", 24, _G5_SIZES),
    "g6": ("nvidia", "L4", 24, _G5_SIZES),
    "g6e": (
        "nvidia",
        "L40S",
        48,
        {
            "xlarge": (4, 32, 1, None, False),
            "2xlarge": (8, 64, 1, None, False),
            "4xlarge": (16, 128, 1, None, False),
            "8xlarge": (32, 256, 1, None, True),
            "12xlarge": (48, 384, 4, None, True),
            "16xlarge": (64, 512, 1, None, True),
            "24xlarge": (96, 768, 4, None, True),
            "48xlarge": (192, 1536, 8, None, True),
        },
    ),
    "g7e": (
        "nvidia",
        "RTX PRO 6000 Blackwell Server Edition",
        96,
        {
            "2xlarge": (8, 64, 1, None, False),
            "4xlarge": (16, 128, 1, None, False),
            "8xlarge": (32, 256, 1, None, True),
            "12xlarge": (48, 512, 2, None, True),
            "24xlarge": (96, 1024, 4, None, True),
            "48xlarge": (192, 2048, 8, None, True),
        },
    ),
    "g7": (
        "nvidia",
        "RTX PRO 4500 Blackwell Server Edition",
        32,
        {
            size: (4 * int(size[:-6]), None, None, None, None)
            for size in ("2xlarge", "4xlarge", "8xlarge", "12xlarge", "24xlarge", "48xlarge")
        },
    ),
    "trn1": (
        "neuron",
        "Trainium",
        32,
        {"2xlarge": (8, 32, 1, 2, False), "32xlarge": (128, 512, 16, 32, True)},
    ),
    "trn1n": ("neuron", "Trainium", 32, {"32xlarge": (128, 512, 16, 32, True)}),
    "trn2": ("neuron", "Trainium2", 96, {"48xlarge": (192, 2048, 16, 64, True)}),
}

_SIZE = re.compile(r"^(?:(?P<n>\d+)?xlarge|large|medium)$")


def _vcpus_from_size(size: str) -> int:
    match = _SIZE.match(size)
    if match is None:
        raise ValueError(f"size {size!r} does not follow EC2's naming scheme")
    if size in ("large", "medium"):
        return 2
    return 4 * int(match.group("n") or 1)


def row(name: str) -> dict[str, Any]:
    """The catalog row of one ``ml.<family>.<size>`` name; ``KeyError`` names an unknown family."""
    _, family, size = name.split(".")
    base: dict[str, Any] = {
        "name": name,
        "accelerator": "none",
        "accelerator_count": 0,
        "accelerator_model": None,
        "accelerator_memory_gib": None,
        "neuron_cores": None,
    }
    if family in ACCELERATED_FAMILIES:
        kind, model, device_memory, sizes = ACCELERATED_FAMILIES[family]
        vcpus, memory, devices, cores, efa = sizes[size]
        return {
            **base,
            "vcpus": vcpus,
            "memory_gib": memory,
            "accelerator": kind,
            "accelerator_count": devices,
            "accelerator_model": model,
            "accelerator_memory_gib": device_memory,
            "neuron_cores": cores,
            "efa": efa,
        }
    if family in IRREGULAR_CPU_FAMILIES:
        vcpus, memory, efa = IRREGULAR_CPU_FAMILIES[family][size]
        return {**base, "vcpus": vcpus, "memory_gib": memory, "efa": efa}
    if family in RATIO_FAMILIES:
        per_vcpu, efa_sizes = RATIO_FAMILIES[family]
        vcpus = _vcpus_from_size(size)
        return {**base, "vcpus": vcpus, "memory_gib": vcpus * per_vcpu, "efa": size in efa_sizes}
    raise KeyError(f"family {family!r} of {name} is not in tools/instance_catalog.py: add it with its source")


def _order(name: str) -> tuple[str, int, str]:
    _, family, size = name.split(".")
    return family, _vcpus_from_size(size) if _SIZE.match(size) else 0, size


FIELD_SOURCES = {
    "vcpus": "vCPUs, EC2 instance type specifications",
    "memory_gib": "memory in GiB, EC2 instance type specifications",
    "accelerator": "nvidia (GPUs), neuron (AWS Trainium devices) or none",
    "accelerator_count": "GPUs or Neuron devices, EC2 accelerated computing specifications",
    "accelerator_model": "GPU or Neuron device model, EC2 accelerated computing specifications",
    "accelerator_memory_gib": "memory of one device, EC2 accelerated computing specifications",
    "neuron_cores": "NeuronCores per host as sagemaker_training.environment.num_neurons counts them",
    "efa": "EFA support, EC2 'Supported instance types' list of Elastic Fabric Adapter",
    "null": "not published in the sources used",
}
FIELDS = (
    "name",
    "vcpus",
    "memory_gib",
    "accelerator",
    "accelerator_count",
    "accelerator_model",
    "accelerator_memory_gib",
    "neuron_cores",
    "efa",
)


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def build(names: list[str], botocore_version: str) -> dict[str, Any]:
    """The data file's content for ``names`` (botocore's enum), sorted by family then size."""
    rows = [row(name) for name in sorted(set(names), key=_order)]
    return {
        "source": (
            f"TrainingInstanceType of botocore {botocore_version}'s SageMaker model; facts from "
            "the AWS EC2 instance type pages, see tools/instance_catalog.py"
        ),
        "fields": FIELD_SOURCES,
        "types": [{key: _plain(r[key]) for key in FIELDS} for r in rows],
    }


def dump(data: dict[str, Any]) -> str:
    """The file's text: one type per line, so a regeneration's diff shows the types that changed."""
    rows = ",\n".join("  " + json.dumps(r) for r in data["types"])
    fields = json.dumps(data["fields"], indent=2).replace("\n", "\n ")
    return (
        f'{{\n "source": {json.dumps(data["source"])},\n "fields": {fields},\n "types": [\n{rows}\n ]\n}}\n'
    )


def botocore_training_types() -> tuple[list[str], str]:
    """``TrainingInstanceType`` of the installed botocore, and botocore's version."""
    import botocore
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return list(model.shape_for("TrainingInstanceType").enum), botocore.__version__


def main() -> int:
    names, version = botocore_training_types()
    try:
        data = build(names, version)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 1
    OUTPUT.write_text(dump(data))
    print(f"wrote {OUTPUT} ({len(data['types'])} types)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
