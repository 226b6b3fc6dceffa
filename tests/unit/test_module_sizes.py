"""No module under ``smlaunch/`` is over 500 lines unless it is one concept, and says which.

A long module is a smell when it holds several things a reader would look for apart (issue 27:
URIs, a hash cache and an engine in one file). The modules that are long because their one concept
is big are listed here, each with that concept, and those still to be split apart from them, each
with what it holds; a new long module fails until it is split or listed, and a listed module that
shrank must leave the list, so the lists stay true.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MAX_LINES = 500

ONE_CONCEPT: dict[str, str] = {
    "smlaunch/contract/archive.py": "tarballs: deterministic packing and the one safe extractor",
    "smlaunch/contract/transfer/engine.py": "TransferEngine, whose paths share listing and hashing",
    "smlaunch/rank/compat/horovod_shim/horovod/torch/mpi_ops.py": "horovod.torch.mpi_ops' API, name by name",
    "smlaunch/rank/cuda_emulation.py": "torch's CUDA surface emulated on the CPU, patched as one whole",
    "smlaunch/rank/smp/model.py": "smp.DistributedModel: partitioning, stages and local views of one model",
    "smlaunch/sdk/backends/emulated/agent.py": "the agent: a job's state machine and its failure policy",
    "smlaunch/sdk/backends/emulated/backend.py": "the emulated platform's submit, describe, logs and stop",
    "smlaunch/sdk/backends/emulated/data.py": "channel delivery on this machine: File, FastFile, Pipe",
    "smlaunch/sdk/estimator.py": "the SDK's public Estimator: constructor, attributes, plan/fit, attach",
    "smlaunch/sdk/request/distribution.py": "the distribution argument: its models, rules and wire keys",
    "smlaunch/sdk/request/validation.py": "the estimator's argument checks, one function each",
}
"""Module (path from the repository root) -> the one concept that makes it long."""

TO_SPLIT: dict[str, str] = {}
"""Long modules that hold more than one concept, each with the concepts to split it into; one split
below the limit must leave the list."""


def _lines() -> dict[str, int]:
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in (ROOT / "smlaunch").rglob("*.py")
    }


def test_every_module_over_500_lines_is_one_listed_concept() -> None:
    long = {path: count for path, count in _lines().items() if count > MAX_LINES}
    assert sorted(set(long) - set(ONE_CONCEPT) - set(TO_SPLIT)) == [], "split it, or list its one concept"


def test_every_listed_module_is_still_over_500_lines() -> None:
    lines = _lines()
    shrunk = sorted(path for path in {**ONE_CONCEPT, **TO_SPLIT} if lines.get(path, 0) <= MAX_LINES)
    assert shrunk == [], "gone or no longer long: take it off ONE_CONCEPT"
