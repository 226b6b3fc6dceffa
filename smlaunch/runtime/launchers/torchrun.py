"""torchrun-style DDP (``torch_distributed``, ``pytorchddp``): this host starts its ranks itself.

No ``torchrun`` binary and no elastic agent: the runtime's supervisor already does what the agent
would (spawn, prefix, fail fast, forward signals), and skipping the agent keeps the launch within
a second. Each rank gets what ``torchrun`` exports, so ``init_process_group("env://")``, Lightning
and Accelerate work unchanged:

``RANK = node_rank * nproc + local_rank``, ``LOCAL_RANK``, ``WORLD_SIZE = nnodes * nproc``,
``LOCAL_WORLD_SIZE = nproc``, ``MASTER_ADDR`` (the master host's resolved address),
``MASTER_PORT``, ``NODE_RANK = GROUP_RANK`` (this host's index among the distribution hosts),
``GROUP_WORLD_SIZE``, ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``ROLE_NAME``, ``TORCHELASTIC_RUN_ID``
(the job name), ``TORCHELASTIC_RESTART_COUNT=0``, ``TORCHELASTIC_MAX_RESTARTS=0``, and
``OMP_NUM_THREADS=1`` when several ranks share a host and the user did not set it (as torchrun).
The rank variables (and ``TF_CONFIG``) come from :func:`smlaunch.contract.framework_env.framework_env_for`,
shared with the other ranked launchers; the ``TORCHELASTIC_*``, ``GROUP_WORLD_SIZE`` and
``ROLE_NAME`` extras are what torchrun's agent adds. Lightning then picks its
``TorchElasticEnvironment``, which reads exactly these variables and spawns nothing itself.

Rank 0 hosts the rendezvous store (``env://``) at ``MASTER_ADDR:MASTER_PORT``.
``nproc`` (ranks per host) is ``SMLAUNCH_PROCESSES_PER_HOST`` if set, else the GPU count, else 1
(:attr:`Environment.processes_per_host`). The process-group backend is the script's choice; the
topology block notes the one that fits: NCCL with GPUs, gloo on CPU (also when the host's GPUs are
emulated on the CPU, where a request for NCCL gets gloo).
"""

from __future__ import annotations

from typing import ClassVar

from smlaunch import contract
from smlaunch.contract.framework_env import framework_env_for
from smlaunch.runtime.env_vars import process_env, program_argv
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec, ranks_text
from smlaunch.runtime.launchers.launcher import Launcher


class TorchrunLauncher(Launcher):
    name: ClassVar[str] = "torchrun"

    def plan(self) -> LaunchPlan:
        env = self.env
        nnodes = len(env.distribution_hosts)
        nproc = env.processes_per_host
        node_rank = env.host_rank
        world_size = nnodes * nproc
        argv = program_argv(env, self.python)
        base = process_env(env)
        if nproc > 1 and "OMP_NUM_THREADS" not in env.environ:
            base["OMP_NUM_THREADS"] = "1"
        if env.num_gpus > 0 and not env.host_addresses:
            # On SageMaker's network (not a loopback emulation) NCCL must use the job's interface.
            base.setdefault("NCCL_SOCKET_IFNAME", env.network_interface_name)
        # What torchrun's agent adds to the framework variables every ranked launcher shares.
        torchrun_extras = {
            "GROUP_WORLD_SIZE": str(nnodes),
            "ROLE_NAME": "default",
            "TORCHELASTIC_RUN_ID": env.run_id,
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
        }
        processes = []
        for local_rank in range(nproc):
            rank_env = {**base, **framework_env_for(env, local_rank, nproc), **torchrun_extras}
            rank = int(rank_env[contract.RANK])
            processes.append(
                ProcessSpec(
                    label=f"rank {rank}", argv=list(argv), env=rank_env, cwd=str(env.code_dir), rank=rank
                )
            )
        first = node_rank * nproc
        backend = "nccl" if env.num_gpus > 0 and not env.cuda_emulated else "gloo"
        summary = f"{ranks_text(first, nproc, world_size)} on host {node_rank + 1} of {nnodes}, {backend}"
        topology = {
            "hosts": ", ".join(env.distribution_hosts),
            "node rank": f"{node_rank} of {nnodes} ({env.current_host})",
            "ranks on this host": f"{first}..{first + nproc - 1} ({nproc} per host)",
            "world size": world_size,
            "master": f"{env.master_hostname} at {env.master_addr}:{env.master_port}",
            "backend": (
                "gloo (CUDA emulated on CPU: NCCL requests use gloo)"
                if env.cuda_emulated
                else "nccl (GPUs)"
                if env.num_gpus > 0
                else "gloo (CPU; no GPU on this host)"
            ),
        }
        return LaunchPlan(launcher=self.name, processes=processes, topology=topology, summary=summary)
