"""Which local tuning job a training job of the store is a trial of.

A local tuning job's trials are normal training jobs named ``<tuning job>-NNN-<8 hex>`` (as
SageMaker names them); the tuning job's ``state.json`` lists each one it started. A training job is
a trial of the tuning job its name's prefix names only when that tuning job lists it, so a job that
merely looks like one is none. What a trial's DescribeTrainingJob shows as ``TuningJobArn`` and
``smlaunch list``'s tuning job column come from here. Reads only; never writes the store. It
holds the store layout's two names (``local`` imports them) and imports nothing of the tuning job's
own, since the emulated backend's ``describe`` uses it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

TUNING_DIR = ".tuning"
"""Under the session's root: one directory per local tuning job (:mod:`smlaunch.sdk.tuning.local`)."""
SUMMARIES = "TrainingJobSummaries"
"""In ``state.json``: every trial's summary, as ListTrainingJobsForHyperParameterTuningJob's."""
TRIAL_NAME = re.compile(r"^(?P<tuning>.+)-\d{3}-[0-9a-f]{8}$")
"""A trial's name: its tuning job's name, its number and 8 hex digits."""


def tuning_job_arn(name: str) -> str:
    """The ARN of the local tuning job ``name``, as its DescribeHyperParameterTuningJob gives it."""
    return f"arn:aws:sagemaker:local:000000000000:hyper-parameter-tuning-job/{name.lower()}"


def _trial_names(state_file: Path) -> set[str]:
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
        return {str(summary["TrainingJobName"]) for summary in state.get(SUMMARIES) or []}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # no tuning job, or damaged
        return set()


def tuning_job_of(root: Path, job_name: str) -> str | None:
    """The name of the local tuning job (under the store ``root``) whose trial ``job_name`` is, or
    None."""
    match = TRIAL_NAME.match(job_name)
    if match is None:
        return None
    tuning = match.group("tuning")
    state_file = Path(root) / TUNING_DIR / tuning / "state.json"
    return tuning if job_name in _trial_names(state_file) else None


def trials_of_store(root: Path) -> dict[str, str]:
    """Every trial of the local store ``root``'s tuning jobs -> its tuning job's name."""
    trials: dict[str, str] = {}
    for state_file in sorted((Path(root) / TUNING_DIR).glob("*/state.json")):
        trials.update(dict.fromkeys(_trial_names(state_file), state_file.parent.name))
    return trials
