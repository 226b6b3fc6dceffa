"""What each ``srun`` step of a Slurm job runs on its node: ``python -m
estimator.backends.local.executors.slurm_host``, started by
:class:`~estimator.backends.local.executors.slurm.SlurmExecutor` in the host's tree.

It gives the host its tree at ``/opt/ml`` in a private mount namespace
(:class:`~estimator.backends.local.executors.spawn.PrivateOptMl`, as local process hosts get),
so scripts that use literal ``/opt/ml`` paths work on the node, with the job store hidden but what
the executor's ``SMLAUNCH_STORE_VIEW`` keeps (:func:`.layout.host_view`), then replaces itself
with ``python -m runtime`` (same process: Slurm's signals reach the runtime); with arguments, it
becomes that command instead (an MPI host's ``orted``, started by the master's ``mpirun`` through
:func:`~estimator.backends.local.executors.slurm.mpi_step_prefix`). Where the node cannot give a
private ``/opt/ml`` (no user namespaces, no ``/opt``), it says why once and runs the runtime
anyway: ``SM_*`` paths work, literal ones do not. Imports nothing of the estimator but that class.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from estimator.backends.local.executors.spawn import STORE_VIEW_ENV, PrivateOptMl
from runtime import contract


def main(argv: list[str]) -> int:
    tree = Path(os.environ[contract.BASE_DIR_ENV])
    mounts = PrivateOptMl.from_view(json.loads(os.environ.get(STORE_VIEW_ENV) or "null"))
    why = mounts.unavailable(tree)
    if why is None:
        mounts.hook(tree)()  # unshare and bind-mount in this process, which the runtime becomes
    else:
        node = os.environ.get("SLURMD_NODENAME", "this node")
        print(
            f"No private /opt/ml on {node} ({why}): scripts must take their paths from SM_* "
            "variables, and the job store is not hidden from them "
            "(or use SlurmSession(container_image=...))",
            flush=True,
        )
    command = argv or [sys.executable, "-m", "runtime"]
    os.execvp(command[0], command)
    return 1  # not reached: execv replaced this process or raised


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
