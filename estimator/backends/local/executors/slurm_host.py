"""What each ``srun`` step of a Slurm job runs on its node: ``python -m
estimator.backends.local.executors.slurm_host``, started by
:class:`~estimator.backends.local.executors.slurm.SlurmExecutor` in the host's tree.

It gives the host its tree at ``/opt/ml`` in a private mount namespace
(:class:`~estimator.backends.local.executors.spawn.PrivateOptMl`, as local process hosts get),
so scripts that use literal ``/opt/ml`` paths work on the node, with the job store hidden but what
the executor's ``SMLAUNCH_STORE_VIEW`` keeps (:func:`.layout.host_view`) (for an ``orted``, with the
requirements cache sealed as the runtime seals it for its ranks), then replaces itself
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
        if argv:
            _seal_requirements()  # an orted: it starts ranks, as the runtime's supervisor does
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


def _seal_requirements() -> None:
    """Seal the requirements cache for what this process becomes, as the host runtime seals it for
    the ranks it starts (:func:`runtime.requirements.seal_hook`): the ranks of an MPI host other
    than the master's are started by the ``orted`` this step runs, not by its runtime."""
    cache = os.environ.get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    job = os.environ.get(contract.TRAINING_JOB_NAME_ENV)
    if not cache or not job:
        return
    from runtime.requirements import job_environment_root, seal_hook

    seal = seal_hook(
        Path(cache), job_environment_root(Path(cache), job), lambda line: print(line, flush=True)
    )
    if seal is not None:
        seal()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
