"""smlaunch runtime: what runs on every host of a training job (``python -m runtime`` or ``train``).

It reads ``/opt/ml`` (or ``$SAGEMAKER_BASE_DIR``), provides the ``SM_*`` environment as SageMaker's
training toolkit does, picks the launcher, runs the user's script and reports the outcome. It never
imports ``estimator``; importing it has no side effects (no directories made, no paths frozen).

**The shared layer.** The estimator (the notebook side) may import these modules of ``runtime`` and
no others (:data:`SHARED_LAYER`; ``tests/unit/test_layering.py`` enforces it). Each is pure: none
imports torch, the supervisor, the watchdog or a launcher.

- :mod:`runtime.contract`: the ``/opt/ml`` layout, the ``SM_*`` / ``SMLAUNCH_*`` names, statuses.
- :mod:`runtime.archive`: safe tarballs (``sourcedir.tar.gz``, ``model.tar.gz``) and checksums.
- :mod:`runtime.transfer`: S3 and file transfers, verified and retried.
- :mod:`runtime.progress`: progress bars, and progress files another process draws.
- :mod:`runtime.channels`: which objects of a channel reach which host (sharding, manifests).
- :mod:`runtime.faults`: the ``SMLAUNCH_FAULTS`` specification (the injector,
  :mod:`runtime.fault_injector`, runs on hosts only).
- :mod:`runtime.errors`: :class:`~runtime.errors.FieldError`, "this field, this value, this fix",
  the base of the estimator's ``ConfigurationError`` and the host's ``HostConfigurationError``.
- :mod:`runtime.processes`: ``free_port``, exit-code decoding, die-with-parent, subreaper, used by
  the local agent and the host supervisor alike.
- :mod:`runtime.fastfile`: the FUSE server for ``FastFile`` channels, which the local agent runs.
- :mod:`runtime.mpi_slurm`: how ``mpirun`` on a Slurm cluster asks the Slurm executor to start each
  host's ``orted`` (request and answer files), and the ``plm_rsh_agent`` that asks.
- :mod:`runtime.artifact_tree`: which entries of a directory the user's code wrote are delivered
  (regular files; no link out, no loop, no FIFO), for the agent's packing and syncs.
- :mod:`runtime.hyperparameters`: the toolkit's reading of wire hyperparameters (``truthy`` is what
  the SDK side uses to read a launcher flag as the runtime will).
- :mod:`runtime.framework_env`: the rank variables frameworks read, and the framework a job's image
  stands for (``SAGEMAKER_TRAINING_MODULE``),
  which the agent sets for each host as the image would.
- :mod:`runtime.mounts`: mount-namespace primitives, for the local executors (``/opt/ml`` per host,
  the store hidden) and the host runtime (the requirements cache sealed from the ranks).
"""

SHARED_LAYER = (
    "runtime",
    "runtime.contract",
    "runtime.archive",
    "runtime.transfer",
    "runtime.progress",
    "runtime.channels",
    "runtime.faults",
    "runtime.errors",
    "runtime.processes",
    "runtime.fastfile",
    "runtime.mpi_slurm",
    "runtime.artifact_tree",
    "runtime.hyperparameters",
    "runtime.framework_env",
    "runtime.mounts",
)
"""The ``runtime`` modules the estimator may import (see above)."""
