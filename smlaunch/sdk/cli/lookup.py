"""Where a job is, for the job commands (:mod:`smlaunch.sdk.cli.jobs`): ``JOB``, ``--last`` and the
place flags turned into a session and a job name.

``JOB`` is a name or a job reference (:mod:`smlaunch.sdk.jobs.jobref`), found by the rule
``Estimator.attach`` follows: local jobs live under ``$SMLAUNCH_HOME/jobs`` (``LocalSession().root``,
or ``--store DIR``); a bare name not found there is looked up on SageMaker (``Session()``: your AWS
credentials and region). ``--sagemaker`` and ``--slurm SHARED_DIR`` say the place as
``sagemaker:NAME`` and ``slurm:SHARED_DIR:NAME`` do; ``--last`` is the newest job of the place
``list`` shows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from smlaunch.sdk.cli.output import when
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.jobs import jobref


def local_session(args: Any) -> Any:
    """The session ``list``, ``rm`` and ``gc`` act on: ``--slurm``'s, else the local store ``--store``
    names (which must exist), else the root setting's."""
    from smlaunch.sdk.sessions.local import LocalSession
    from smlaunch.sdk.sessions.slurm import SlurmSession

    if getattr(args, "slurm", None):
        return SlurmSession(shared_dir=args.slurm)
    store = getattr(args, "store", None)
    if store and not Path(store).expanduser().exists():
        # A misspelt --store would read as an empty store: nothing listed, nothing to collect.
        raise ConfigurationError(
            "--store",
            store,
            "no such directory",
            "pass an existing job store, or leave --store out for the root setting's",
        )
    return LocalSession(root=store)


def _reference(text: str, args: argparse.Namespace) -> jobref.JobRef:
    """``JOB`` at the place ``--sagemaker`` or ``--slurm`` names (the two must agree); ``--store``
    is the local store a bare name and ``local:NAME`` are looked for in."""
    ref = jobref.parse(text)
    if getattr(args, "sagemaker", False):
        place = jobref.JobRef(ref.name, jobref.SAGEMAKER)
    elif getattr(args, "slurm", None):
        place = jobref.JobRef(ref.name, jobref.SLURM, args.slurm)
    else:
        return ref
    if ref.scheme is not None and ref != place:
        raise ConfigurationError(
            "JOB", text, f"names another place than the flags ({place})", "give the place once"
        )
    return place


def newest_job(args: argparse.Namespace) -> str:
    """``--last``: the most recently created job of the place ``smlaunch list`` would show."""
    if getattr(args, "sagemaker", False):
        from smlaunch.sdk.sessions.sagemaker import Session

        summaries = Session().list_training_jobs(max_results=1)
        names: list[str] = [summary["TrainingJobName"] for summary in summaries]
    else:
        entries = local_entries(local_session(args))
        names = [e.name for e in entries if e.description is not None]
    if not names:
        raise ConfigurationError("--last", True, "there is no job yet", "start one with smlaunch run")
    return names[0]


def _job_text(args: argparse.Namespace, text: str | None) -> str:
    if getattr(args, "last", False) == (text is not None):
        raise ConfigurationError(
            "JOB",
            text,
            "give a job or --last, not both or neither",
            f"e.g. smlaunch {getattr(args, 'command', None) or 'describe'} --last",
        )
    if text is None and getattr(args, "tuning", False):
        from smlaunch.sdk.cli.tuning import newest_tuning_job

        name = newest_tuning_job(args, local_session(args))
        print(f"--last: {name}", file=sys.stderr)
        return name
    if text is None:
        name = newest_job(args)
        print(f"--last: {name}", file=sys.stderr)
        return name
    return text


def with_job(handler: Callable[[Any, Any], int]) -> Callable[[Any, Any], int]:
    """``handler`` for ``JOB`` or ``--last``: sets ``args.job`` to the job's name, ``args.session``
    to where it is (the reference's place, else the local store when it has the job, else SageMaker)
    and ``args.tuning_session`` to where the tuning job of that name is when the command acts on one
    (:func:`smlaunch.sdk.cli.tuning.tuning_session`; None: a training job)."""

    def run(args: argparse.Namespace, out: TextIO) -> int:
        from smlaunch.sdk.cli.tuning import tuning_session

        text = _job_text(args, args.job)
        ref = _reference(text, args)
        if ref.scheme == jobref.SAGEMAKER:
            args.sagemaker = True
        here = local_session(args)
        args.session = jobref.session_for(ref, default_local=here)
        args.tuning_session = tuning_session(ref, args, here)
        args.job = ref.name
        return handler(args, out)

    return run


def with_jobs(handler: Callable[[Any, Any], int]) -> Callable[[Any, Any], int]:
    """``handler`` for ``JOB...`` or ``--last`` of one local store, or of one Kubernetes namespace:
    ``args.jobs`` as names, ``args.store`` as the store a ``local:STORE:NAME`` reference names and
    ``args.kubernetes`` as the namespace ``kubernetes:NAMESPACE:NAME`` references name (else None)."""

    def run(args: argparse.Namespace, out: TextIO) -> int:
        texts = args.jobs or [None]
        refs = [jobref.parse(_job_text(args, None if args.last and not args.jobs else t)) for t in texts]
        namespaces = {ref.store for ref in refs if ref.scheme == jobref.KUBERNETES}
        args.kubernetes = next(iter(namespaces)) if len(namespaces) == 1 else None
        for text, ref in zip(texts, refs, strict=True):
            if args.kubernetes is not None and ref.scheme == jobref.KUBERNETES and args.store is None:
                continue
            if (
                namespaces
                or ref.scheme not in (None, jobref.LOCAL)
                or (ref.store and args.store not in (None, ref.store))
            ):
                raise ConfigurationError(
                    "JOB",
                    text,
                    "rm removes jobs of one local store, or of one Kubernetes namespace",
                    "name them as NAME or local:NAME (with --store DIR), or all as kubernetes:NAMESPACE:NAME",
                )
            args.store = ref.store or args.store
        args.jobs = [ref.name for ref in refs]
        return handler(args, out)

    return run


def describe_job(job_name: str, args: Any) -> tuple[Any, dict[str, Any]]:
    """The backend that knows ``job_name`` and its description; unknown names exit 2 naming both
    places looked in."""
    from smlaunch.sdk.backends.emulated.backend import JobNotFoundError, LocalBackend

    if getattr(args, "tuning_session", None) is not None:  # logs, metrics: a trial has them
        raise ConfigurationError(
            "JOB",
            job_name,
            "is a tuning job, which has no logs or metrics of its own",
            f"name one of its trials (smlaunch list shows them beside {job_name}), e.g. smlaunch "
            f"{getattr(args, 'command', None) or 'logs'} TRIAL",
        )
    backend = args.session.backend()
    try:
        return backend, backend.describe(job_name)
    except JobNotFoundError as exc:
        raise ConfigurationError("JOB", job_name, str(exc), "smlaunch list shows local jobs") from None
    except ConfigurationError as exc:
        if getattr(args, "sagemaker", False) or isinstance(backend, LocalBackend):
            raise
        raise jobref.not_found_anywhere(
            "JOB",
            job_name,
            local_session(args).root,
            exc,
            "check the name with `smlaunch list` (or `smlaunch list --sagemaker`)",
        ) from None


def local_entries(session: Any) -> list[Any]:
    """Every directory of the local job store (:meth:`LocalBackend.entries
    <smlaunch.sdk.backends.emulated.backend.LocalBackend.entries>`), newest first."""
    entries = list(session.backend().entries())
    epoch = datetime.fromtimestamp(0, tz=timezone.utc)
    entries.sort(key=lambda e: when(e.created) or epoch, reverse=True)
    return entries
