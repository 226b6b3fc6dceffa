"""``python -m smlaunch.runtime.launchers.mpi.rank <entry argv...>``: what ``mpirun`` starts for each rank.

``mpirun`` gives a rank only OpenMPI's variables (``OMPI_COMM_WORLD_RANK``, ``..._SIZE``, ...).
This wrapper turns them into what torch, Lightning and SageMaker scripts read, then ``exec``\\s the
entry point in the same process (same pid, so the supervisor's registry and stack dumps still
reach it; the script runs exactly as ``python train.py args`` would):

- the torch / framework variables of :func:`smlaunch.contract.framework_env.framework_env`
  (``RANK = OMPI_COMM_WORLD_RANK``, ``LOCAL_RANK = rank % ppn``, ``NODE_RANK = rank // ppn``, ...);
- the rank's host: ranks are placed host-major (``--map-by slot``), so rank ``R`` runs on
  ``hosts[R // ppn]``; its ``SM_CURRENT_HOST`` / ``CURRENT_HOST`` / ``SM_CURRENT_HOST_RANK`` say so;
- in a local emulation (one ``mpirun`` on this machine serving every emulated host) the whole
  environment of the rank's emulated host (its ``SM_MODEL_DIR``, channels, ``SM_TRAINING_ENV``, ...)
  and its code directory as working directory, so each rank sees the ``/opt/ml`` tree of its host;
- a Python entry point runs as ``python -m mpi4py train.py`` when mpi4py is installed (see
  :func:`with_mpi4py_runner`), so an uncaught exception aborts every rank.

The rank map comes in ``SMLAUNCH_MPI_RANK_MAP``: a JSON object, or the path of a file holding one:
``{"hosts": [...], "ppn": N, "master_addr": ..., "master_port": ..., "addresses": {host: addr},
"env": {host: {name: value}}, "cwd": {host: dir}}`` (``env`` and ``cwd`` optional).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from smlaunch import contract
from smlaunch.contract.framework_env import framework_env
from smlaunch.rank.boot import BOOT_DIR, RANK_DIR_ENV


def load_rank_map(value: str) -> dict[str, Any]:
    text = value if value.lstrip().startswith("{") else open(value, encoding="utf-8").read()
    data = json.loads(text)
    if not isinstance(data, dict) or not data.get("hosts") or int(data.get("ppn", 0)) < 1:
        raise ValueError(
            f"{contract.SMLAUNCH_MPI_RANK_MAP}: needs 'hosts' and 'ppn' >= 1, got {value[:200]!r}"
        )
    return data


def rank_environment(
    rank_map: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[dict[str, str], str | None]:
    """The environment and working directory of the rank described by OpenMPI's ``environ``. Pure."""
    rank = int(environ["OMPI_COMM_WORLD_RANK"])
    world_size = int(environ.get("OMPI_COMM_WORLD_SIZE", rank + 1))
    hosts = list(rank_map["hosts"])
    ppn = int(rank_map["ppn"])
    node_rank = min(rank // ppn, len(hosts) - 1)
    host = hosts[node_rank]
    addresses = rank_map.get("addresses") or {}
    env = dict(environ)
    env.update((rank_map.get("env") or {}).get(host, {}))
    if environ.get(RANK_DIR_ENV):  # keep the rank bootstrap first on the emulated host's path
        entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
        env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR, *entries])
    env.update(
        framework_env(
            rank=rank,
            local_rank=rank - node_rank * ppn,
            local_world_size=ppn,
            node_rank=node_rank,
            num_nodes=len(hosts),
            master_addr=str(rank_map.get("master_addr") or addresses.get(hosts[0], hosts[0])),
            master_port=int(rank_map.get("master_port") or contract.MASTER_PORT),
            host_addresses=[str(addresses.get(h, h)) for h in hosts],
            world_size=world_size,
        )
    )
    env["SM_CURRENT_HOST"] = host
    env["CURRENT_HOST"] = host
    env[contract.SM_CURRENT_HOST_RANK] = str(node_rank)
    cwd = (rank_map.get("cwd") or {}).get(host)
    return env, cwd


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m smlaunch.runtime.launchers.mpi.rank <program> [args...]", file=sys.stderr)
        return 2
    value = os.environ.get(contract.SMLAUNCH_MPI_RANK_MAP)
    if not value or "OMPI_COMM_WORLD_RANK" not in os.environ:
        print(
            f"smlaunch.runtime.launchers.mpi.rank: run under mpirun with "
            f"{contract.SMLAUNCH_MPI_RANK_MAP} set",
            file=sys.stderr,
        )
        return 2
    env, cwd = rank_environment(load_rank_map(value), os.environ)
    if cwd:
        os.chdir(cwd)
    argv = with_mpi4py_runner(argv)
    sys.stdout.flush()
    os.execve(argv[0] if os.path.isabs(argv[0]) else _which(argv[0], env), argv, env)
    return 127  # not reached


def with_mpi4py_runner(argv: list[str]) -> list[str]:
    """``python train.py`` becomes ``python -m mpi4py train.py`` when mpi4py is installed, as in the
    toolkit: mpi4py's runner calls ``MPI_Abort`` on an uncaught exception. Without it, a rank that
    raised would block in ``MPI_Finalize`` (run at exit) while its peers wait in a collective, and
    mpirun would never see it fail."""
    import importlib.util

    if len(argv) >= 2 and argv[1].endswith(".py") and os.path.basename(argv[0]).startswith("python"):
        if os.path.realpath(argv[0]) == os.path.realpath(sys.executable) and importlib.util.find_spec(
            "mpi4py"
        ):
            return [argv[0], "-m", "mpi4py", *argv[1:]]
    return argv


def _which(program: str, env: Mapping[str, str]) -> str:
    import shutil

    if os.sep in program:
        return os.path.abspath(program)
    return shutil.which(program, path=env.get("PATH")) or program


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
