"""smddp-compatible data parallel (``distribution={"smdistributed": {"dataparallel": {...}}}``).

SageMaker runs smddp jobs through ``mpirun`` plus AWS's ``smddprun`` (reference §4.6) because its
all-reduce server needs them. Our smddp is torch's own DDP (``smlaunch/rank/compat``), which needs neither:
each host starts one rank per GPU of its instance type directly, exactly as the torchrun-style
launcher does (this class is that launcher with a different name and three extra variables), so
the rendezvous, the log prefixes and the failure policy are the same as for ``torch_distributed``.

Ranks per host: the instance type's GPUs; ``SMLAUNCH_PROCESSES_PER_HOST`` when emulating a GPU
instance type on a machine without those GPUs; 1 on a CPU instance.

Extra environment, as smddp's runner exports it where it means something without AWS's library:
``SMDATAPARALLEL_USE_SINGLENODE=1`` (one host) or ``SMDATAPARALLEL_USE_HOMOGENEOUS=1`` (several),
and ``SAGEMAKER_INSTANCE_TYPE`` (from ``sagemaker_instance_type``, else the host's instance type).
``sagemaker_distributed_dataparallel_custom_mpi_options`` has no effect (there is no mpirun); a
non-empty value is shown in the topology block so nobody believes it was applied. The
``smdistributed`` shims reach the ranks through :func:`~smlaunch.runtime.env_vars.process_env`'s
``PYTHONPATH``, only where AWS's library is not installed.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from smlaunch import contract
from smlaunch.runtime.launchers.base import LaunchPlan
from smlaunch.runtime.launchers.torchrun import TorchrunLauncher


class SmddpLauncher(TorchrunLauncher):
    name: ClassVar[str] = "smddp"

    def smddp_env(self) -> dict[str, str]:
        """The SMDATAPARALLEL-style variables every rank of this host gets."""
        env = self.env
        instance_type = env.framework_params.get(contract.HP_INSTANCE_TYPE) or env.current_instance_type
        layout = (
            "SMDATAPARALLEL_USE_SINGLENODE"
            if len(env.distribution_hosts) == 1
            else ("SMDATAPARALLEL_USE_HOMOGENEOUS")
        )
        return {layout: "1", "SAGEMAKER_INSTANCE_TYPE": str(instance_type)}

    def plan(self) -> LaunchPlan:
        base = super().plan()
        extra = self.smddp_env()
        processes = [dataclasses.replace(p, env={**p.env, **extra}) for p in base.processes]
        topology = dict(base.topology)
        topology["backend"] = "smddp = " + str(topology.get("backend", ""))
        options = str(self.env.framework_params.get(contract.HP_SMDDP_CUSTOM_MPI_OPTIONS) or "").strip()
        if options:
            topology["custom_mpi_options"] = f"{options!r} ignored (smlaunch's smddp does not use mpirun)"
        return LaunchPlan(launcher=self.name, processes=processes, topology=topology, summary=base.summary)
