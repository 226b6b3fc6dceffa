"""``SlurmSession``: run jobs on a Slurm cluster, with the same contract as a local run.

A :class:`~smlaunch.sdk.sessions.local.LocalSession` whose jobs live on a directory every node mounts and
whose
hosts are ``srun`` tasks of one ``sbatch`` allocation (:mod:`smlaunch.sdk.backends.slurm.backend`). This
module
holds the session's arguments and their checks; the commands are :mod:`smlaunch.sdk.backends.slurm.client`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.sessions.local import LocalSession

if TYPE_CHECKING:
    from smlaunch.sdk.backends.base import Backend


_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SLURM_JOBS_DIR = "jobs"
"""Under ``SlurmSession.shared_dir``: one folder per job (``<shared_dir>/jobs/<job>/``)."""
SBATCH_OWNED_OPTIONS = {
    "--nodes": "instance_count", "-N": "instance_count", "--ntasks": "instance_count",
    "-n": "instance_count", "--ntasks-per-node": "instance_count", "--time": "max_run",
    "-t": "max_run", "--job-name": "job_name", "-J": "job_name", "--output": "the job tree",
    "-o": "the job tree", "--error": "the job tree", "-e": "the job tree",
    "--partition": "SlurmSession(partition=...)", "-p": "SlurmSession(partition=...)",
    "--account": "SlurmSession(account=...)", "-A": "SlurmSession(account=...)",
    "--qos": "SlurmSession(qos=...)", "-q": "SlurmSession(qos=...)",
    "--gpus-per-node": "SlurmSession(gpus_per_node=...)", "--requeue": "use_spot_instances",
    "--no-requeue": "use_spot_instances", "--array": "one job per fit()", "-a": "one job per fit()",
    "--wrap": "the generated batch script", "--parsable": "the generated batch script",
    "--container-image": "SlurmSession(container_image=...)",
}  # fmt: skip
"""sbatch options smlaunch sets itself, and what to use instead of passing them in ``extra_sbatch_args``."""


def _slurm_name(field: str, value: object, example: str) -> str | None:
    require_type(field, value, (str, type(None)), f"pass the name as a string, e.g. {example!r}")
    if value is not None and not _SLURM_NAME_RE.fullmatch(str(value)):
        raise ConfigurationError(
            field,
            value,
            "not a Slurm name (letters, digits, '_', '.', '+', '-')",
            f"pass the name as Slurm lists it, e.g. {example!r}",
        )
    return value  # type: ignore[return-value]


class SlurmSession(LocalSession):
    """Run jobs on a Slurm cluster (as SageMaker HyperPod does): one ``sbatch`` per job, one
    ``srun`` task per allocated node running ``python -m smlaunch.runtime``, the same ``/opt/ml`` contract,
    ``SM_*`` variables, launchers, artifacts, statuses, logs and failure policy as locally
    (:mod:`smlaunch.sdk.backends.slurm.backend`).

    ``shared_dir`` (required): a directory every node mounts at the same path (NFS, Lustre); job
    trees live under ``<shared_dir>/jobs/<job>/`` and ``file://`` code, data and outputs must be
    on it for the nodes to see them. ``partition``, ``account``, ``qos``: passed to ``sbatch``
    (default: the cluster's default partition, your default account and QOS). ``python``: the
    interpreter on the nodes, with smlaunch and the training script's packages installed (default:
    this one, which must then exist at the same path on the nodes). ``extra_sbatch_args``: more
    ``sbatch`` options (``["--constraint=a100", "--exclusive"]``); the ones smlaunch sets itself are
    refused, naming the argument to use instead. ``gpus_per_node``: ``--gpus-per-node`` (default:
    the instance type's GPUs, on partitions with ``gpu`` generic resources; 0 asks for none).
    ``container_image``: run each host in this image through pyxis/enroot (``srun
    --container-image``, with ``shared_dir`` mounted at the same path). ``slurm_client``: a
    :class:`~smlaunch.sdk.backends.slurm.client.SlurmClient` (tests inject one). The other arguments
    are :class:`LocalSession`'s (``processes_per_host``, ``stop_grace_seconds``,
    ``artifact_conflicts``, ``install_requirements``, ``s3_client``, ``mlflow``; CUDA is never
    emulated unless ``emulate_cuda=True``).
    """

    def __init__(
        self,
        shared_dir: str | Path | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        python: str | None = None,
        extra_sbatch_args: list[str] | tuple[str, ...] | None = None,
        gpus_per_node: int | None = None,
        container_image: str | None = None,
        slurm_client: Any | None = None,
        processes_per_host: int | None = None,
        stop_grace_seconds: float | None = None,
        s3_client: Any | None = None,
        artifact_conflicts: Literal["warn", "error"] | None = None,
        install_requirements: bool | None = None,
        instance_count_quota: int | None = None,
        emulate_cuda: bool | None = False,
        mlflow: str | None = None,
    ) -> None:
        shared_fix = "pass shared_dir='/path/every/node/mounts' (an NFS or Lustre directory)"
        require_type("shared_dir", shared_dir, (str, os.PathLike), shared_fix)
        shared = Path(shared_dir).expanduser()  # type: ignore[arg-type]
        if not shared.is_absolute():
            raise ConfigurationError(
                "shared_dir",
                shared_dir,
                "must be an absolute path (the nodes resolve it from their own working directory)",
                shared_fix,
            )
        if not shared.is_dir():
            raise ConfigurationError("shared_dir", shared_dir, "is not an existing directory", shared_fix)
        self.shared_dir = shared.resolve()
        self.partition = _slurm_name("partition", partition, "gpu")
        self.account = _slurm_name("account", account, "ml-team")
        self.qos = _slurm_name("qos", qos, "normal")
        python_fix = "pass the interpreter's path on the nodes, e.g. '/shared/venv/bin/python'"
        require_type("python", python, (str, os.PathLike, type(None)), python_fix)
        if python is not None and (not os.path.isabs(python) or any(c.isspace() for c in str(python))):
            raise ConfigurationError("python", python, "must be an absolute path without spaces", python_fix)
        self.python = str(python) if python is not None else sys.executable
        self.extra_sbatch_args = _check_sbatch_args(extra_sbatch_args)
        if gpus_per_node is not None and (
            not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or gpus_per_node < 0
        ):
            raise ConfigurationError(
                "gpus_per_node",
                gpus_per_node,
                "must be an integer >= 0",
                "pass the GPUs to request on each node, or leave it unset",
            )
        self.gpus_per_node = gpus_per_node
        image_fix = "pass an image pyxis can import, e.g. 'nvcr.io#nvidia/pytorch:24.05-py3'"
        require_type("container_image", container_image, (str, type(None)), image_fix)
        if container_image is not None and (not container_image or any(c.isspace() for c in container_image)):
            raise ConfigurationError(
                "container_image", container_image, "must be an image name without spaces", image_fix
            )
        self.container_image = container_image
        super().__init__(
            root=self.shared_dir / SLURM_JOBS_DIR,
            processes_per_host=processes_per_host,
            s3_client=s3_client,
            stop_grace_seconds=stop_grace_seconds,
            artifact_conflicts=artifact_conflicts,
            install_requirements=install_requirements,
            instance_count_quota=instance_count_quota,
            emulate_cuda=emulate_cuda,
            mlflow=mlflow,
        )
        self._slurm_client = slurm_client

    def __repr__(self) -> str:
        return f"SlurmSession(shared_dir={str(self.shared_dir)!r}, partition={self.partition!r})"

    def slurm_client(self) -> Any:
        """The :class:`~smlaunch.sdk.backends.slurm.client.SlurmClient` (created on first use)."""
        if self._slurm_client is None:
            from smlaunch.sdk.backends.slurm.client import SlurmClient

            self._slurm_client = SlurmClient()
        return self._slurm_client

    def backend(self) -> Backend:
        """The Slurm backend that submits this session's jobs with ``sbatch`` (created once)."""
        if self._backend is None:
            from smlaunch.sdk.backends.slurm.backend import SlurmBackend

            self._backend = SlurmBackend(session=self)
        return self._backend


def _check_sbatch_args(args: object) -> tuple[str, ...]:
    fix = "pass a list of sbatch options, e.g. ['--constraint=a100', '--exclusive']"
    if args is None:
        return ()
    if isinstance(args, str) or not isinstance(args, (list, tuple)):
        raise ConfigurationError("extra_sbatch_args", args, "must be a list of strings", fix)
    for arg in args:
        if not isinstance(arg, str) or not arg.startswith("-") or "\n" in arg:
            raise ConfigurationError(
                "extra_sbatch_args",
                args,
                f"{arg!r} is not an sbatch option (one '--name[=value]' per item)",
                fix,
            )
        name = arg.split("=", 1)[0]
        owned = SBATCH_OWNED_OPTIONS.get(name) or next(
            (
                use
                for option, use in SBATCH_OWNED_OPTIONS.items()
                if len(option) == 2 and name.startswith(option) and name != option and name[1] != "-"
            ),
            None,
        )
        if owned is not None:
            raise ConfigurationError(
                "extra_sbatch_args", args, f"{arg!r} is set by smlaunch", f"drop it and use {owned} instead"
            )
    return tuple(args)
