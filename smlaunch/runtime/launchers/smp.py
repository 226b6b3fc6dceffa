"""smp model parallel (``distribution={"smdistributed": {"modelparallel": {...}}, "mpi": {...}}``).

SageMaker starts smp v1 jobs under ``mpirun``; smlaunch's smp (``smlaunch/rank/smp`` behind the
``smdistributed.modelparallel.torch`` shim) needs only torch.distributed, so this host starts its
``sagemaker_mpi_num_of_processes_per_host`` ranks itself, exactly like :class:`TorchrunLauncher`
(same supervisor, same torch variables), and adds what an ``mpirun`` child would see, so smp's
auto-init rule (``SM_HP_MP_PARAMETERS`` and ``OMPI_COMM_WORLD_RANK`` set) and scripts that read the
OpenMPI variables work: ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``, ``OMPI_COMM_WORLD_NODE_RANK``.

``SM_HP_MP_PARAMETERS`` (the ``mp_parameters`` hyperparameter) is among the ``SM_*`` variables every
rank gets; the validation of its content is smp's own, at ``smp.init`` in the script. The shims reach
the ranks through :func:`~smlaunch.runtime.env_vars.process_env`'s ``PYTHONPATH`` only when the real
``smdistributed`` is not importable. ``sagemaker_mpi_custom_mpi_options`` has no meaning without
``mpirun`` and is reported in the topology block, not applied.
"""

from __future__ import annotations

from typing import ClassVar

from smlaunch import contract
from smlaunch.runtime.env_vars import to_env_vars
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec
from smlaunch.runtime.launchers.torchrun import TorchrunLauncher


class SmpLauncher(TorchrunLauncher):
    name: ClassVar[str] = "smp"

    def plan(self) -> LaunchPlan:
        base = super().plan()
        env = self.env
        nproc = env.processes_per_host
        world = len(env.distribution_hosts) * nproc
        processes = []
        for spec in base.processes:
            rank_env = dict(spec.env)
            rank_env.update(
                {
                    "OMPI_COMM_WORLD_RANK": rank_env[contract.RANK],
                    "OMPI_COMM_WORLD_SIZE": str(world),
                    "OMPI_COMM_WORLD_LOCAL_RANK": rank_env[contract.LOCAL_RANK],
                    "OMPI_COMM_WORLD_LOCAL_SIZE": str(nproc),
                    "OMPI_COMM_WORLD_NODE_RANK": str(env.host_rank),
                }
            )
            processes.append(
                ProcessSpec(
                    label=spec.label,
                    argv=spec.argv,
                    env=rank_env,
                    cwd=spec.cwd,
                    rank=spec.rank,
                    split_line=spec.split_line,
                )
            )
        topology = dict(base.topology)
        topology["mp_parameters"] = to_env_vars(env).get("SM_HP_MP_PARAMETERS", "{}")
        custom = env.framework_params.get(contract.HP_MPI_CUSTOM_OPTIONS)
        if custom:
            topology["custom mpi options"] = f"{custom} (ignored: ranks are started without mpirun)"
        return LaunchPlan(launcher=self.name, processes=processes, topology=topology, summary=base.summary)
