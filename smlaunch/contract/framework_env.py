"""The rank variables that frameworks other than the toolkit read: torch, Lightning, Accelerate, TF.

SageMaker's toolkit exports ``SM_*`` only; scripts written for ``torchrun``, PyTorch Lightning,
Hugging Face Accelerate or TensorFlow's ``MultiWorkerMirroredStrategy`` read other names. One pure
function computes them for one rank, so every ranked launcher (torchrun-style, smddp, MPI's rank
wrapper) sets the same values the same way:

- torch / torchrun: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``, ``GROUP_RANK`` (= node rank), ``ROLE_RANK`` (= rank), ``ROLE_WORLD_SIZE``;
- Lightning / Accelerate: ``NODE_RANK`` (= node rank) plus the above. Lightning's default cluster
  environment sees ``LOCAL_RANK`` and therefore does not spawn processes itself: a script with
  ``Trainer(strategy="ddp", num_nodes=2, devices=2)`` runs unchanged on 2 hosts x 2 ranks;
- TensorFlow: ``TF_CONFIG`` ``{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": rank}}``.
  One worker per rank, listed in rank order. Worker ``i`` listens on ``<address of its host>:<master
  port + 1 + i>``: emulated hosts share 127.0.0.1, so ports must differ per rank, and offsetting from
  the job's own (per-job, collision-free) master port keeps concurrent local jobs apart.

Contract: pure (no I/O, no ``os.environ``), returns strings only, and sets no ``TORCHELASTIC_*``:
those belong to torchrun's agent, so only the torchrun-style launcher adds them
(:mod:`smlaunch.runtime.launchers.torchrun`, deliberately: Lightning then picks ``TorchElasticEnvironment``,
which reads the rank variables and spawns nothing) and the launchers built on it (smddp, smp)
inherit them; ranks started by ``mpirun`` (the MPI launcher) get none.

The framework a job runs on is what SageMaker learns from the image: the ``SAGEMAKER_TRAINING_MODULE``
a framework image sets. :func:`training_module_of_image` gives it for an image URI (the local
backend passes it to its hosts), and :func:`pytorch_container_env` what the PyTorch image adds to
every process of a job, distributed or not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from smlaunch import contract


class _Topology(Protocol):
    """The parts of :class:`smlaunch.runtime.environment.Environment` that :func:`framework_env_for` reads."""

    @property
    def distribution_hosts(self) -> list[str]: ...

    @property
    def master_port(self) -> int: ...

    @property
    def host_rank(self) -> int: ...

    @property
    def master_addr(self) -> str: ...

    def address_of(self, host: str) -> str: ...


def framework_env(
    *,
    rank: int,
    local_rank: int,
    local_world_size: int,
    node_rank: int,
    num_nodes: int,
    master_addr: str,
    master_port: int,
    host_addresses: Sequence[str],
    world_size: int | None = None,
) -> dict[str, str]:
    """The framework variables of one rank.

    ``host_addresses`` lists the address of every node in node-rank order (for ``TF_CONFIG``);
    ``world_size`` defaults to ``num_nodes * local_world_size`` (homogeneous jobs).
    """
    if world_size is None:
        world_size = num_nodes * local_world_size
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"local_rank={local_rank}: must be in [0, local_world_size={local_world_size})")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}: must be in [0, world_size={world_size})")
    if len(host_addresses) != num_nodes:
        raise ValueError(f"host_addresses={list(host_addresses)}: must list {num_nodes} node addresses")
    workers = [
        f"{host_addresses[min(i // local_world_size, num_nodes - 1)]}:{master_port + 1 + i}"
        for i in range(world_size)
    ]
    tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    return {
        contract.RANK: str(rank),
        contract.LOCAL_RANK: str(local_rank),
        contract.WORLD_SIZE: str(world_size),
        contract.LOCAL_WORLD_SIZE: str(local_world_size),
        contract.MASTER_ADDR: master_addr,
        contract.MASTER_PORT_ENV: str(master_port),
        contract.NODE_RANK: str(node_rank),
        contract.GROUP_RANK: str(node_rank),
        contract.ROLE_RANK: str(rank),
        contract.ROLE_WORLD_SIZE: str(world_size),
        contract.TF_CONFIG: json.dumps(tf_config, separators=(",", ":")),
    }


def training_module_of_image(image: str | None) -> str | None:
    """The ``SAGEMAKER_TRAINING_MODULE`` the SageMaker framework image ``image`` sets, else None.

    Read from the repository name, as the SDK names them: ``pytorch-training``,
    ``huggingface-pytorch-training``, ``pytorch-training-neuronx``, ``smdistributed-modelparallel``
    (PyTorch); ``tensorflow-training``, ``huggingface-tensorflow-training`` (TensorFlow). Any other
    image (a generic algorithm, smlaunch's own) says nothing, as on SageMaker.
    """
    if not image:
        return None
    repository = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    words = repository.split("-")
    if repository == "smdistributed-modelparallel" or ("training" in words and "pytorch" in words):
        return contract.PYTORCH_TRAINING_MODULE
    if "training" in words and "tensorflow" in words:
        return contract.TENSORFLOW_TRAINING_MODULE
    return None


def pytorch_container_env(env: _Topology) -> dict[str, str]:
    """What SageMaker's PyTorch container exports for every job before it picks a runner.

    ``sagemaker_pytorch_container/training.py`` (aws/sagemaker-pytorch-training-toolkit), ``train()``
    calls ``_set_distributed_environment``: ``MASTER_ADDR`` = the master host, ``MASTER_PORT`` =
    ``7777``, whatever the distribution, so the classic ``dist.init_process_group(backend,
    rank=host_rank, world_size=len(hosts))`` of a job without ``distribution=`` rendezvouses on
    ``env://``. Here the address is the master's reachable address and the port the job's
    (:attr:`~smlaunch.runtime.environment.Environment.master_port`: 7777 unless a local job picked a free
    one).
    """
    return {contract.MASTER_ADDR: env.master_addr, contract.MASTER_PORT_ENV: str(env.master_port)}


def framework_env_for(env: _Topology, local_rank: int, local_world_size: int) -> dict[str, str]:
    """:func:`framework_env` for local rank ``local_rank`` of this host, from the host's Environment.

    Ranks are numbered host-major over the distribution hosts: ``rank = node_rank * ppn + local_rank``.
    """
    hosts = list(env.distribution_hosts)
    node_rank = env.host_rank
    return framework_env(
        rank=node_rank * local_world_size + local_rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        num_nodes=len(hosts),
        master_addr=env.master_addr,
        master_port=env.master_port,
        host_addresses=[env.address_of(h) for h in hosts],
    )
