"""The Slurm platform: :mod:`.backend` submits the emulated platform's agent with ``sbatch``;
:mod:`.client` talks to ``sbatch``/``squeue``/``scontrol``. The hosts start through the emulated
platform's Slurm executor (:mod:`smlaunch.sdk.backends.emulated.executors.slurm`).
"""
