"""The platform a store-kept tuning job's trials run on: the seam between the tuning agent and a
session's backend.

A tuning job that smlaunch runs itself (not SageMaker's) keeps its state in a job store, a directory
every process that asks about it reads (:mod:`smlaunch.sdk.tuning.local`), and its agent
(:mod:`smlaunch.sdk.tuning.agent`) submits each trial as a normal training job of the session. All
the agent asks of the platform is :class:`TrialPlatform`: submit a trial, describe it, read its
metrics, stop it. The session is recorded in the tuning job's ``trial.json`` as plain data
(:func:`record`) and the detached agent rebuilds the platform from it (:func:`open_platform`):

- ``local``: a ``LocalSession`` (its settings); the trials are this machine's jobs;
- ``slurm``: a ``SlurmSession`` (its shared directory, Slurm options and settings); the store is
  ``<shared_dir>/jobs``, each trial one ``sbatch`` of the Slurm backend;
- ``kubernetes``: a ``KubernetesSession`` (its arguments, :meth:`~smlaunch.sdk.sessions.kubernetes.
  KubernetesSession.arguments`); the trials are jobs of the cluster, and the tuning job is kept on
  this machine under the session's ``tuning_root`` (:func:`store_root`), since the cluster holds
  only training jobs.

A new platform plugs in with a kind here (what to record, how to reopen it, where its tuning jobs
are kept) whose backend has the four methods; a session of local semantics that has no kind is
refused before anything starts (:func:`refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from smlaunch.sdk.request.spec import JobRequest

LOCAL = "local"
SLURM = "slurm"
KUBERNETES = "kubernetes"
SLURM_OPTIONS = (
    "partition",
    "account",
    "qos",
    "python",
    "extra_sbatch_args",
    "gpus_per_node",
    "container_image",
)
"""A ``SlurmSession``'s own arguments, besides ``shared_dir``, that its trials are submitted with."""
SLURM_SETTINGS = (
    "processes_per_host",
    "stop_grace_seconds",
    "artifact_conflicts",
    "install_requirements",
    "instance_count_quota",
    "emulate_cuda",
)
"""The settings a ``SlurmSession`` takes as arguments (the others it resolves as any session does)."""


class TrialPlatform(Protocol):
    """What a tuning agent needs of the platform its trials run on; every backend of
    :mod:`smlaunch.sdk.backends` has it (each trial is a normal training job of that backend)."""

    def submit(self, request: JobRequest) -> None:
        """Start the trial ``request`` describes (its name is the trial's); raise if refused."""

    def describe(self, job_name: str) -> dict[str, Any]:
        """DescribeTrainingJob of the trial ``job_name`` (``TrainingJobStatus``, times,
        ``FinalMetricDataList``, ``FailureReason``)."""
        ...

    def metric_records(self, job_name: str, metric_names: Sequence[str] | None = None) -> list[Any]:
        """Every value of the named metrics the trial has printed so far, in order (early stopping
        reads the objective's)."""
        ...

    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Stop the trial through the training job's stop path (it ends Stopped)."""


def runs_in_store(session: Any) -> bool:
    """Whether ``session``'s tuning jobs run in a job store (a ``LocalSession``'s, a
    ``SlurmSession``'s, a ``KubernetesSession``'s ``tuning_root``), not on SageMaker."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession
    from smlaunch.sdk.sessions.local import LocalSession

    return isinstance(session, (LocalSession, KubernetesSession))


def store_root(session: Any) -> Path:
    """The store holding ``session``'s tuning jobs (each ``<store>/.tuning/<name>``): a
    ``LocalSession``'s or ``SlurmSession``'s ``root``, a ``KubernetesSession``'s ``tuning_root``."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession

    return Path(session.tuning_root if isinstance(session, KubernetesSession) else session.root)


def place(session: Any) -> str:
    """How a message names ``session``'s tuning jobs: ``local``, ``Slurm`` or ``Kubernetes``."""
    kind = record_kind(session)
    return {LOCAL: "local", SLURM: "Slurm", KUBERNETES: "Kubernetes"}[kind]


def record_kind(session: Any) -> str:
    """The kind :func:`record` gives ``session``."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession
    from smlaunch.sdk.sessions.slurm import SlurmSession

    if isinstance(session, SlurmSession):
        return SLURM
    return KUBERNETES if isinstance(session, KubernetesSession) else LOCAL


def refusal(session: Any) -> tuple[str, str, str, str]:
    """``(field, value, problem, fix)`` for a local-semantics session that runs no tuning jobs."""
    name = type(session).__name__
    return (
        "sagemaker_session",
        name,
        "tuning jobs run on SageMaker and in the job store of a LocalSession, SlurmSession or "
        f"KubernetesSession; a {name} has none",
        "pass smlaunch.Session(), smlaunch.LocalSession(), smlaunch.SlurmSession(shared_dir=...) or "
        "smlaunch.KubernetesSession(...) to the estimator, or run one fit() per hyperparameter set "
        "and compare their training_job_analytics",
    )


def check_trials(session: Any, request: JobRequest) -> None:
    """Refuse, before the tuning job starts, trials ``session``'s platform would refuse each: its
    backend's capabilities (pure) and, on Slurm, what the cluster offers (``sinfo``: Slurm
    answers, the partition is up and has the nodes); on Kubernetes the backend's whole check,
    which only reads the cluster (the namespace exists, a node admits and can hold a host). The
    checks that write (output paths) stay with each trial's submit."""
    from smlaunch.sdk.backends.base import Backend

    backend = session.backend()
    kind = record_kind(session)
    if kind == KUBERNETES:
        backend.check(request)
        return
    Backend.check(backend, request)  # the base class's: capabilities only, not the store's checks
    if kind == SLURM:
        backend.check_cluster(request)


def record(session: Any) -> dict[str, Any]:
    """``session`` as plain data in ``trial.json``: ``{"kind", "settings"[, "slurm"]}``, or for a
    ``KubernetesSession`` ``{"kind", "kubernetes"}`` (its arguments, its settings among them)."""
    kind = record_kind(session)
    if kind == KUBERNETES:
        return {"kind": KUBERNETES, "kubernetes": session.arguments()}
    recorded: dict[str, Any] = {"kind": LOCAL, "settings": session.settings.model_dump(mode="json")}
    if kind == SLURM:
        options = {name: getattr(session, name) for name in SLURM_OPTIONS}
        options["extra_sbatch_args"] = list(options["extra_sbatch_args"])
        recorded.update(kind=SLURM, slurm={"shared_dir": str(session.shared_dir), **options})
    return recorded


def open_platform(trial: dict[str, Any]) -> TrialPlatform:
    """The platform the trials of ``trial.json`` (``trial``) run on, rebuilt from its record."""
    recorded = trial.get("platform") or {"kind": LOCAL, "settings": trial["settings"]}
    if recorded["kind"] == KUBERNETES:
        from smlaunch.sdk.sessions.kubernetes import KubernetesSession

        cluster: TrialPlatform = KubernetesSession(**recorded["kubernetes"]).backend()
        return cluster
    settings = recorded["settings"]
    if recorded["kind"] == SLURM:
        from smlaunch.sdk.sessions.slurm import SlurmSession

        shared = {name: settings[name] for name in SLURM_SETTINGS if name in settings}
        backend: TrialPlatform = SlurmSession(**recorded["slurm"], **shared).backend()
        return backend
    if recorded["kind"] != LOCAL:
        kinds = ", ".join(repr(kind) for kind in (LOCAL, SLURM, KUBERNETES))
        raise ValueError(f"trial.json: platform kind {recorded['kind']!r} is not one of {kinds}")
    from smlaunch.sdk.sessions.local import LocalSession

    local_backend: TrialPlatform = LocalSession(**settings).backend()
    return local_backend
