"""The instance catalog: every ``ml.`` training type smlaunch knows, as data.

Owns the facts about instance types (vCPUs, memory, GPUs, EFA) that validation and the launchers
need: ``processes_per_host`` is checked against the GPU count, smddp needs GPUs, the image is
``cpu`` or ``gpu`` by type, and a local run emulates the type's rank count. It holds no behaviour
beyond lookup, and does no I/O.

Covered families: p3 (incl. p3dn), p4d, p4de, p5 (p5.48xlarge, p5e, p5en), g4dn, g5, g6, c5, m5,
plus SageMaker local mode's ``local`` (CPU) and ``local_gpu``. For ``local_gpu`` the GPU count is
that of the machine, so :attr:`InstanceType.gpus` is ``None`` there ("determined by the host").

Sources: the EC2 / SageMaker instance type pages (vCPU, memory in GiB, GPU model, memory per GPU
in GiB, EFA support).
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ConfigDict

from estimator.errors import ConfigurationError
from runtime import contract


class InstanceType(BaseModel):
    """One training instance type. ``gpus=None`` means "whatever GPUs this machine has"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    vcpus: int | None
    memory_gib: float | None
    gpus: int | None
    gpu_model: str | None = None
    gpu_memory_gib: float | None = None
    """Memory of one GPU."""
    efa: bool = False

    @property
    def is_gpu(self) -> bool:
        """True for types with GPUs (``local_gpu`` included)."""
        return self.gpus is None or self.gpus > 0

    @property
    def is_local(self) -> bool:
        return self.name in (contract.LOCAL_INSTANCE_TYPE, contract.LOCAL_GPU_INSTANCE_TYPE)

    @property
    def processor(self) -> str:
        """``gpu`` or ``cpu``: the Deep Learning Container flavour for this type."""
        return "gpu" if self.is_gpu else "cpu"


# name, vCPUs, memory GiB, GPUs, GPU model, GPU memory GiB (each), EFA
_ROWS: tuple[tuple[str, int | None, float | None, int | None, str | None, float | None, bool], ...] = (
    ("ml.p3.2xlarge", 8, 61, 1, "V100", 16, False),
    ("ml.p3.8xlarge", 32, 244, 4, "V100", 16, False),
    ("ml.p3.16xlarge", 64, 488, 8, "V100", 16, False),
    ("ml.p3dn.24xlarge", 96, 768, 8, "V100", 32, True),
    ("ml.p4d.24xlarge", 96, 1152, 8, "A100", 40, True),
    ("ml.p4de.24xlarge", 96, 1152, 8, "A100", 80, True),
    ("ml.p5.48xlarge", 192, 2048, 8, "H100", 80, True),
    ("ml.p5e.48xlarge", 192, 2048, 8, "H200", 141, True),
    ("ml.p5en.48xlarge", 192, 2048, 8, "H200", 141, True),
    ("ml.g4dn.xlarge", 4, 16, 1, "T4", 16, False),
    ("ml.g4dn.2xlarge", 8, 32, 1, "T4", 16, False),
    ("ml.g4dn.4xlarge", 16, 64, 1, "T4", 16, False),
    ("ml.g4dn.8xlarge", 32, 128, 1, "T4", 16, True),
    ("ml.g4dn.12xlarge", 48, 192, 4, "T4", 16, True),
    ("ml.g4dn.16xlarge", 64, 256, 1, "T4", 16, True),
    ("ml.g5.xlarge", 4, 16, 1, "A10G", 24, False),
    ("ml.g5.2xlarge", 8, 32, 1, "A10G", 24, False),
    ("ml.g5.4xlarge", 16, 64, 1, "A10G", 24, False),
    ("ml.g5.8xlarge", 32, 128, 1, "A10G", 24, True),
    ("ml.g5.12xlarge", 48, 192, 4, "A10G", 24, True),
    ("ml.g5.16xlarge", 64, 256, 1, "A10G", 24, True),
    ("ml.g5.24xlarge", 96, 384, 4, "A10G", 24, True),
    ("ml.g5.48xlarge", 192, 768, 8, "A10G", 24, True),
    ("ml.g6.xlarge", 4, 16, 1, "L4", 24, False),
    ("ml.g6.2xlarge", 8, 32, 1, "L4", 24, False),
    ("ml.g6.4xlarge", 16, 64, 1, "L4", 24, False),
    ("ml.g6.8xlarge", 32, 128, 1, "L4", 24, True),
    ("ml.g6.12xlarge", 48, 192, 4, "L4", 24, True),
    ("ml.g6.16xlarge", 64, 256, 1, "L4", 24, True),
    ("ml.g6.24xlarge", 96, 384, 4, "L4", 24, True),
    ("ml.g6.48xlarge", 192, 768, 8, "L4", 24, True),
    ("ml.c5.xlarge", 4, 8, 0, None, None, False),
    ("ml.c5.2xlarge", 8, 16, 0, None, None, False),
    ("ml.c5.4xlarge", 16, 32, 0, None, None, False),
    ("ml.c5.9xlarge", 36, 72, 0, None, None, False),
    ("ml.c5.18xlarge", 72, 144, 0, None, None, False),
    ("ml.m5.large", 2, 8, 0, None, None, False),
    ("ml.m5.xlarge", 4, 16, 0, None, None, False),
    ("ml.m5.2xlarge", 8, 32, 0, None, None, False),
    ("ml.m5.4xlarge", 16, 64, 0, None, None, False),
    ("ml.m5.12xlarge", 48, 192, 0, None, None, False),
    ("ml.m5.24xlarge", 96, 384, 0, None, None, False),
    # SageMaker local mode: the machine itself. vCPUs and memory are the host's.
    (contract.LOCAL_INSTANCE_TYPE, None, None, 0, None, None, False),
    (contract.LOCAL_GPU_INSTANCE_TYPE, None, None, None, None, None, False),
)

CATALOG: dict[str, InstanceType] = {
    row[0]: InstanceType(
        name=row[0], vcpus=row[1], memory_gib=row[2], gpus=row[3], gpu_model=row[4],
        gpu_memory_gib=row[5], efa=row[6],
    )
    for row in _ROWS
}


def names() -> list[str]:
    """Every known instance type name, catalog order."""
    return list(CATALOG)


def suggestions(name: str, limit: int = 3) -> list[str]:
    """The nearest known names (difflib), e.g. ``local-gpu`` -> ``local_gpu``."""
    candidate = name.strip().lower()
    if candidate and not candidate.startswith("ml.") and not candidate.startswith("local"):
        candidate = "ml." + candidate
    return difflib.get_close_matches(candidate, names(), n=limit, cutoff=0.6)


def lookup(name: object, field: str = "instance_type") -> InstanceType:
    """The catalog entry for ``name``, or :class:`ConfigurationError` naming the nearest names."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            field, name, "must be an instance type name such as 'ml.p3.2xlarge' or 'local'",
            "pass one of the types listed by estimator.catalog.names()",
        )
    found = CATALOG.get(name)
    if found is not None:
        return found
    near = suggestions(name)
    hint = f"did you mean {' or '.join(repr(n) for n in near)}?" if near else (
        "see estimator.catalog.names() for the supported types"
    )
    raise ConfigurationError(field, name, "unknown instance type", hint)
