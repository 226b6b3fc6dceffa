"""What each ``srun`` step of a Slurm job runs on its node: ``python -m
smlaunch.sdk.backends.emulated.executors.slurm.host``, started by
:class:`~smlaunch.sdk.backends.emulated.executors.slurm.executor.SlurmExecutor` in the host's tree.

It gives the host its tree at ``/opt/ml`` in a private mount namespace
(:class:`~smlaunch.sdk.backends.emulated.executors.process.spawn.PrivateOptMl`, as local process hosts get),
so scripts that use literal ``/opt/ml`` paths work on the node, with the job store hidden but what
the executor's ``SMLAUNCH_STORE_VIEW`` keeps (:func:`.layout.host_view`) (for an ``orted``, with the
requirements cache sealed as the runtime seals it for its ranks), then replaces itself
with ``python -m smlaunch.runtime`` (same process: Slurm's signals reach the runtime); with arguments, it
runs that command instead (an MPI host's ``orted``, started by the master's ``mpirun`` through
:func:`~smlaunch.sdk.backends.emulated.executors.slurm.executor.mpi_step_prefix`), with a session
directory of its own (:func:`run_orted`). Where the node cannot give
a
private ``/opt/ml`` (no user namespaces, no ``/opt``), it says why once and runs the runtime
anyway: ``SM_*`` paths work, literal ones do not. Imports nothing of the estimator but that class.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from smlaunch import contract
from smlaunch.contract.processes import exit_code_of
from smlaunch.sdk.backends.emulated.executors.process.spawn import STORE_VIEW_ENV, PrivateOptMl

ORTE_TMPDIR_ENV = "OMPI_MCA_orte_tmpdir_base"
"""Where OpenMPI's daemons and ranks put their session directories (an MCA parameter)."""
STEP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What Slurm sends every process of a step to end it: :func:`run_orted` outlives the daemon."""


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
    if argv:
        return run_orted(argv)
    command = [sys.executable, "-m", "smlaunch.runtime"]
    os.execvp(command[0], command)
    return 1  # not reached: execv replaced this process or raised


def run_orted(command: list[str]) -> int:
    """Run ``command`` (an ``orted``) with OpenMPI's session files in a new private directory, removed
    when it ends; its exit code (``128 + N`` for signal ``N``).

    OpenMPI keeps a daemon's session files in ``<tmp>/ompi.<hostname>.<uid>/jf.<job family>``. Nodes
    that share one machine (several ``slurmd -N`` on one host, as test clusters run) give every
    ``orted`` of the job the same directory, and two daemons creating it at once fail ``orte_init``
    (``mkdir ... File exists``, exit code 213) before they call back: ``mpirun``, which has no
    startup timeout, then waits for that daemon forever. One directory per daemon removes the race.

    This process stays, without the signals Slurm sends to the whole step (the daemon gets them
    too, and ends), to remove the directory after it; a SIGKILL leaves an empty directory behind.
    """
    base = tempfile.mkdtemp(prefix="smlaunch-ompi-")  # 0700, unguessable; OpenMPI adds its tree
    try:
        for sig in STEP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        proc = subprocess.Popen(
            command, env={**os.environ, ORTE_TMPDIR_ENV: base}, preexec_fn=_default_step_signals
        )
        return exit_code_of(proc.wait())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _default_step_signals() -> None:
    """In the daemon, before it starts: the default action for :data:`STEP_SIGNALS` again."""
    for sig in STEP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _seal_requirements() -> None:
    """Seal the requirements cache for what this process becomes, as the host runtime seals it for
    the ranks it starts (:func:`smlaunch.runtime.requirements_cache.seal_hook`): the ranks of an MPI
    host other than the master's are started by the ``orted`` this step runs, not by its runtime."""
    cache = os.environ.get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    job = os.environ.get(contract.TRAINING_JOB_NAME_ENV)
    if not cache or not job:
        return
    from smlaunch.runtime.requirements_cache import job_environment_root, seal_hook

    seal = seal_hook(
        Path(cache), job_environment_root(Path(cache), job), lambda line: print(line, flush=True)
    )
    if seal is not None:
        seal()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
