"""Job references: a job name that may say where the job lives, and the one rule that finds it.

Accepted wherever a job name is (``smlaunch describe|logs|stop|metrics|rm``, ``Estimator.attach``,
``TrainingJobAnalytics``), as TorchX's ``scheduler://session/app`` handles are:

- ``local:NAME``: the local job store (``LocalSession().root``, ``$SMLAUNCH_HOME/jobs``);
  ``local:STORE:NAME`` names another store directory (``LocalSession(root=STORE)``);
- ``slurm:SHARED_DIR:NAME``: a Slurm cluster's store (``SlurmSession(shared_dir=SHARED_DIR)``);
- ``kubernetes:NAMESPACE:NAME``: a Kubernetes cluster's namespace (``KubernetesSession(namespace=
  NAMESPACE)``: your kubeconfig, or the in-cluster configuration);
- ``sagemaker:NAME``: Amazon SageMaker (``Session()``: your AWS credentials and region);
- ``NAME`` alone: the local job store when it has a directory of that name, else SageMaker.

Job names never hold ``:`` (SageMaker's pattern), so a colon always starts a reference. This module
parses and resolves; it starts nothing and reads only whether a store directory exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import naming

LOCAL = "local"
SLURM = "slurm"
SAGEMAKER = "sagemaker"
KUBERNETES = "kubernetes"
SCHEMES = (LOCAL, SLURM, SAGEMAKER, KUBERNETES)
FORMS = (
    "NAME, local:NAME, local:STORE:NAME, slurm:SHARED_DIR:NAME, kubernetes:NAMESPACE:NAME or sagemaker:NAME"
)


@dataclass(frozen=True)
class JobRef:
    """A parsed reference: the job's ``name``, its ``scheme`` (None for a bare name) and, for
    ``local:STORE:NAME`` and ``slurm:SHARED_DIR:NAME``, the ``store`` directory."""

    name: str
    scheme: str | None = None
    store: str | None = None

    def __str__(self) -> str:
        return ":".join(part for part in (self.scheme, self.store, self.name) if part)


def parse(reference: object, field: str = "JOB") -> JobRef:
    """``reference`` as a :class:`JobRef`; a malformed one is a :class:`ConfigurationError` naming
    the accepted forms."""
    if not isinstance(reference, str) or ":" not in reference:
        return JobRef(naming.validate_job_name(reference, field))
    scheme, _, rest = reference.partition(":")
    store, colon, name = rest.rpartition(":")
    problem = None
    if scheme not in SCHEMES:
        problem = f"unknown place {scheme!r}"
    elif scheme == SAGEMAKER and colon:
        problem = "sagemaker: takes a job name only (the region is your AWS configuration's)"
    elif scheme == SLURM and not store:
        problem = "slurm: needs the cluster's shared directory"
    elif scheme == KUBERNETES and not store:
        problem = "kubernetes: needs the job's namespace"
    elif colon and not store:
        problem = "the store directory is empty"
    if problem is not None:
        raise ConfigurationError(field, reference, problem, f"write the job as {FORMS}")
    try:
        return JobRef(naming.validate_job_name(name, field), scheme, store or None)
    except ConfigurationError as exc:
        raise ConfigurationError(field, reference, f"{name!r}: {exc.problem}", exc.fix) from None


def session_kind(session: Any) -> str:
    """Which scheme a session's jobs have: ``slurm``, ``kubernetes``, ``local`` or ``sagemaker``."""
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession
    from smlaunch.sdk.sessions.slurm import SlurmSession

    if isinstance(session, SlurmSession):
        return SLURM
    if isinstance(session, KubernetesSession):
        return KUBERNETES
    return LOCAL if getattr(session, "is_local", False) else SAGEMAKER


def session_for(ref: JobRef, default_local: Any | None = None) -> Any:
    """The session that holds ``ref``'s job. A bare name is looked for in ``default_local`` (default
    ``LocalSession()``): its store has a directory of that name, else SageMaker."""
    from smlaunch.sdk.sessions.local import LocalSession

    if ref.scheme == SLURM:
        from smlaunch.sdk.sessions.slurm import SlurmSession

        return SlurmSession(shared_dir=os.path.expanduser(str(ref.store)))
    if ref.scheme == KUBERNETES:
        from smlaunch.sdk.sessions.kubernetes import KubernetesSession

        return KubernetesSession(namespace=str(ref.store))
    if ref.scheme == LOCAL:
        if ref.store is not None:
            return LocalSession(root=Path(ref.store).expanduser())
        return default_local if default_local is not None else LocalSession()
    if ref.scheme is None:
        local = default_local if default_local is not None else LocalSession()
        if os.path.lexists(Path(local.root) / ref.name):
            return local
    from smlaunch.sdk.sessions.sagemaker import Session

    return Session()


def not_found_anywhere(
    field: str, name: str, local_root: Path, error: ConfigurationError, fix: str
) -> ConfigurationError:
    """A bare name the local store ``local_root`` lacks and SageMaker could not be asked about
    (``error``): both places named, rather than only an AWS credentials error."""
    return ConfigurationError(
        field, name, f"no local job of that name under {local_root}, and on SageMaker: {error.problem}", fix
    )


def resolve(
    reference: object, sagemaker_session: Any | None = None, field: str = "training_job_name"
) -> tuple[Any, str]:
    """The session of the job ``reference`` names, and the job's name. With ``sagemaker_session``
    the job is looked for there only, and a reference to another place is refused."""
    ref = parse(reference, field)
    if sagemaker_session is None:
        return session_for(ref), ref.name
    kind = session_kind(sagemaker_session)
    same_store = ref.store is None or (kind == KUBERNETES and ref.store == sagemaker_session.namespace)
    if ref.scheme is not None and (ref.scheme != kind or not same_store):
        raise ConfigurationError(
            field,
            reference,
            f"names a job of {ref.scheme}{':' + ref.store if ref.store else ''}, but "
            f"sagemaker_session is a {type(sagemaker_session).__name__}",
            f"pass the bare name {ref.name!r}, or leave sagemaker_session out",
        )
    return sagemaker_session, ref.name
