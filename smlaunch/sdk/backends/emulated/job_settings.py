"""``settings.json``: how this machine runs one job, decided once at submit (:class:`JobSettings`).

The emulated platform's backend resolves a job's settings (:meth:`JobSettings.resolve`) from the
spec, the session's knobs and what it knows of this machine, writes them into the job directory,
and the job's agent and its executor read them back, typed (``JobSettings.model_validate_json``).
:meth:`JobSettings.resolve` is the only place outside the instance catalog that turns an instance
type into ranks per host, GPUs and CUDA emulation; the hosts are told what it decided
(``SMLAUNCH_PROCESSES_PER_HOST``, ``SMLAUNCH_NUM_GPUS``, ``SMLAUNCH_EMULATE_CUDA``:
:func:`.layout.host_environment`).

Each executor keeps its own fields in :attr:`JobSettings.executor` (one model per executor,
told apart by ``name``, the executor's name in :data:`.executors.EXECUTORS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from smlaunch.sdk.request import catalog
from smlaunch.sdk.request.spec import TrainingJobSpec


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmulatedGpus(_Value):
    """The GPUs every rank of a host emulates on the CPU (``smlaunch/rank/cuda_emulation.py`` reads
    them from ``SMLAUNCH_EMULATE_CUDA``)."""

    gpus: int = Field(ge=1)
    model: str
    """The GPU model the ranks see (``V100``; ``GPU`` when the catalog does not know it)."""
    memory_gib: float = Field(gt=0)
    """Memory of one emulated GPU."""


class ProcessSettings(_Value):
    """The process executor's fields: hosts are processes of the agent on this machine."""

    name: Literal["process"] = "process"
    python: str
    """The interpreter each host runtime runs (``python -m smlaunch.runtime``): the submitter's."""


class DockerSettings(_Value):
    """The Docker executor's fields: one container per host."""

    name: Literal["docker"] = "docker"
    image: str
    """The image every host's container runs (present in the local engine)."""
    uid: int
    """The submitter's uid: the containers run as it, so the files they write are the submitter's."""
    gid: int
    """The submitter's gid."""
    entrypoint: list[str] | None = None
    """The request's ``ContainerEntrypoint``, run (with :attr:`arguments`) instead of ``train``
    where the image has no smlaunch runtime: a ModelTrainer job's ``sm_train.sh``, as SageMaker
    runs it."""
    arguments: list[str] | None = None
    """The request's ``ContainerArguments``, with :attr:`entrypoint`."""


class SlurmSettings(_Value):
    """The Slurm executor's fields: one ``srun`` step per host on the agent's allocation."""

    name: Literal["slurm"] = "slurm"
    python: str
    """The interpreter on the nodes (``SlurmSession(python=...)``)."""
    container_image: str | None = None
    """The image pyxis runs each step in, or None: the steps run ``python`` on the nodes."""
    shared_dir: str
    """The directory every node mounts at the same path (``SlurmSession(shared_dir=...)``)."""


class KubernetesSettings(_Value):
    """The Kubernetes executor's fields: one pod per host, started by the agent's pod."""

    name: Literal["kubernetes"] = "kubernetes"
    namespace: str
    host_pods: list[dict[str, Any]]
    """Each host's pod as planned at submit (:func:`smlaunch.sdk.backends.kubernetes.plan.host_pods`);
    the agent adds each host's variables when it starts them."""
    host_network: bool = False
    """The pods share their node's network (hosts aliased to 127.0.0.1)."""


ExecutorSettings = Annotated[
    ProcessSettings | DockerSettings | SlurmSettings | KubernetesSettings, Field(discriminator="name")
]
"""One executor's own fields, told apart by ``name``."""

E = TypeVar("E", ProcessSettings, DockerSettings, SlurmSettings, KubernetesSettings)


class SessionKnobs(Protocol):
    """The knobs of the session (:class:`smlaunch.sdk.sessions.settings.Settings`) a job's
    settings follow from."""

    @property
    def processes_per_host(self) -> int | None: ...

    @property
    def emulate_cuda(self) -> bool | None: ...

    @property
    def stop_grace_seconds(self) -> float: ...

    @property
    def artifact_conflicts(self) -> Literal["warn", "error"]: ...

    @property
    def install_requirements(self) -> bool: ...


class JobSettings(_Value):
    """How this machine runs one job; written to ``settings.json`` at submit, read by the agent."""

    executor: ExecutorSettings
    """The executor that starts the hosts, with its own fields."""
    processes_per_host: int = Field(ge=1)
    """Ranks per host of the one-rank-per-accelerator launchers (``SMLAUNCH_PROCESSES_PER_HOST``)."""
    num_gpus: int | None = Field(default=None, ge=0)
    """The GPUs each host's runtime is told it has (``SMLAUNCH_NUM_GPUS``); None: it counts them."""
    emulate_cuda: EmulatedGpus | None = None
    """The GPUs each rank emulates on the CPU, or None (real GPUs, or none)."""
    gpu_devices: bool = False
    """The hosts get this machine's GPU devices: the instance type has GPUs (``local_gpu``: this
    machine's) and this machine has some. Containers are given them; processes see them anyway."""
    stop_grace_seconds: float = Field(ge=0, allow_inf_nan=False)
    """SIGTERM -> SIGKILL grace when the job stops, fails or runs out of time."""
    artifact_conflicts: Literal["warn", "error"] = "warn"
    """Two hosts writing one artifact path with different bytes: warn, or fail the job."""
    install_requirements: bool = True
    """Whether the hosts install ``requirements.txt`` of ``source_dir``."""
    requirements_cache: Path | None = None
    """Where the hosts keep the layered environments of ``requirements.txt``
    (:mod:`smlaunch.runtime.requirements_cache`), or None where hosts have interpreters of their own."""
    s3_endpoint_url: str | None = None
    """The S3 endpoint the session talks to, given to the hosts (None: boto3's own, or no S3)."""
    s3_region_name: str | None = None
    """The session's S3 region, given to the hosts."""
    knobs: dict[str, str] = Field(default_factory=dict)
    """The session's knobs for the host runtimes (``SMLAUNCH_*`` variables), less those the job's
    ``environment=`` sets."""

    @classmethod
    def resolve(
        cls,
        spec: TrainingJobSpec,
        session: SessionKnobs,
        executor: ProcessSettings | DockerSettings | SlurmSettings | KubernetesSettings,
        *,
        machine_gpus: int,
        host_gpus: int | None,
        requirements_cache: Path | None = None,
        knobs: Mapping[str, str] | None = None,
        s3_endpoint_url: str | None = None,
        s3_region_name: str | None = None,
    ) -> JobSettings:
        """The settings of ``spec`` run by ``executor`` with ``session``'s knobs (pure).

        ``machine_gpus``: this machine's GPUs (what ``local_gpu`` means, and what CUDA emulation
        compares the instance type with). ``host_gpus``: what each host is told it has when it
        emulates none, None to let it count them (the nodes of a Slurm cluster).

        Ranks per host: ``LocalSession(processes_per_host=N)``, else the type's accelerators (GPUs,
        or Trainium's NeuronCores, as SageMaker's toolkit counts them; ``local_gpu``: this machine's
        GPUs), at least 1. CUDA is emulated when ``emulate_cuda`` is True and the type has GPUs, or
        (None, the default) when it has more than this machine; never when it is False.
        """
        instance = catalog.lookup(spec.ResourceConfig.InstanceType)
        accelerators = instance.accelerator_ranks
        ranks = session.processes_per_host or (machine_gpus if accelerators is None else accelerators)
        emulated = None
        if session.emulate_cuda is not False and instance.gpus:
            if session.emulate_cuda or machine_gpus < instance.gpus:
                emulated = EmulatedGpus(
                    gpus=instance.gpus,
                    model=instance.accelerator_model or "GPU",
                    memory_gib=instance.accelerator_memory_gib or 16.0,
                )
        instance_gpus = machine_gpus if instance.gpus is None else instance.gpus
        return cls(
            executor=executor,
            processes_per_host=max(1, ranks),
            num_gpus=emulated.gpus if emulated else host_gpus,
            emulate_cuda=emulated,
            gpu_devices=instance_gpus > 0 and machine_gpus > 0,
            stop_grace_seconds=session.stop_grace_seconds,
            artifact_conflicts=session.artifact_conflicts,
            install_requirements=session.install_requirements,
            requirements_cache=requirements_cache,
            s3_endpoint_url=s3_endpoint_url,
            s3_region_name=s3_region_name,
            knobs=dict(knobs or {}),
        )

    def executor_fields(self, kind: type[E]) -> E:
        """The executor's own fields, as the executor whose model is ``kind`` reads them."""
        if not isinstance(self.executor, kind):
            wanted = kind.model_fields["name"].default
            raise ValueError(
                f"settings.json executor.name: {self.executor.name!r} is not {wanted!r}: this job's "
                f"hosts are started by the {self.executor.name} executor; run its agent with that one"
            )
        return self.executor

    def s3_environment(self) -> dict[str, str]:
        """The variables that point a host's boto3 at the S3 the session talks to (e.g. a test's
        moto server): the runtime fetches ``s3://`` code with boto3, which honours them."""
        env = {}
        if self.s3_endpoint_url:
            env["AWS_ENDPOINT_URL_S3"] = self.s3_endpoint_url
        if self.s3_region_name:
            env["AWS_REGION"] = self.s3_region_name
        return env
