"""SDK v3's distributed configs (``sagemaker.train.distributed``): ``Torchrun`` (optionally with
``SMP``, SageMaker model parallelism v2's parameters) and ``MPI``.

Their ``model_dump()`` is what the job's ``distributed.json`` holds, as v3 writes it; the host
runtime reads it back (:mod:`smlaunch.runtime.v3`) and runs the job's ranks accordingly.
"""

from __future__ import annotations

import json
from typing import Any

from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.train.configs import BaseConfig


class SMP(BaseConfig):
    """SageMaker model parallelism v2's parameters, sent as the ``mp_parameters`` hyperparameter."""

    hybrid_shard_degree: int | None = None
    sm_activation_offloading: bool | None = None
    activation_loading_horizon: int | None = None
    fsdp_cache_flush_warnings: bool | None = None
    allow_empty_shards: bool | None = None
    tensor_parallel_degree: int | None = None
    context_parallel_degree: int | None = None
    expert_parallel_degree: int | None = None
    random_seed: int | None = None

    def _to_mp_hyperparameters(self) -> dict[str, str]:
        """``{"mp_parameters": <the set fields as JSON>}``, as v3 adds it to the hyperparameters."""
        return {"mp_parameters": json.dumps(self.model_dump(exclude_none=True))}


class DistributedConfig(BaseConfig):
    """Base of the distributed configs."""

    @property
    def driver_script(self) -> str:
        """The v3 driver script that runs it (named in its log line)."""
        raise NotImplementedError

    @property
    def strategy(self) -> Strategy:
        """The launch strategy that runs it (what backends check their capabilities against)."""
        raise NotImplementedError

    def _to_json(self) -> dict[str, Any]:
        """``distributed.json``'s content."""
        return self.model_dump()


class Torchrun(DistributedConfig):
    """``torchrun`` on every host: ``process_count_per_node`` ranks each (default: the GPUs)."""

    process_count_per_node: int | None = None
    smp: SMP | None = None

    @property
    def driver_script(self) -> str:
        """``torchrun_driver.py``."""
        return "torchrun_driver.py"

    @property
    def strategy(self) -> Strategy:
        """``torch_distributed``: the host starts torchrun's ranks."""
        return Strategy.TORCH_DISTRIBUTED


class MPI(DistributedConfig):
    """``mpirun`` from the first host: ``process_count_per_node`` ranks per host, with
    ``mpi_additional_options`` added to its command line."""

    process_count_per_node: int | None = None
    mpi_additional_options: list[str] | None = None

    @property
    def driver_script(self) -> str:
        """``mpi_driver.py``."""
        return "mpi_driver.py"

    @property
    def strategy(self) -> Strategy:
        """``mpi``: the first host's ``mpirun`` starts every rank."""
        return Strategy.MPI


__all__ = ["MPI", "SMP", "DistributedConfig", "Torchrun"]
