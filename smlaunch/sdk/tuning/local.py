"""A store-kept tuning job: its directory, its start, and what any process reads of it.

A tuning job started on a ``LocalSession``, a ``SlurmSession`` or a ``KubernetesSession`` is the
directory ``<store>/.tuning/<name>/`` (the store: the session's root; on Slurm ``<shared_dir>/jobs``,
which every node mounts; on Kubernetes the session's ``tuning_root`` on the submitting machine,
:func:`smlaunch.sdk.tuning.platform.store_root`; ``.tuning`` is a name no training job can have, so
``smlaunch list`` and ``gc`` never take it for a job), a
:class:`~smlaunch.sdk.backends.emulated.state.JobDir` holding:

- ``spec.json``   the CreateHyperParameterTuningJob request, written by :func:`start`;
- ``trial.json``  the trials' CreateTrainingJob request (the estimator's, under the tuning job's
  name), the distribution's strategy and the session as plain data (``platform``:
  :mod:`smlaunch.sdk.tuning.platform`): what the agent submits each trial from, with the trial's
  name and hyperparameters;
- ``agent.json``  the detached tuning agent (:mod:`smlaunch.sdk.tuning.agent`), like a job's, and
  the machine it runs on (``host``: on Slurm the store is shared, the agent's pid is that machine's);
- ``state.json``  written ONLY by the agent, atomically: ``HyperParameterTuningJobStatus``, the
  counters, ``BestTrainingJob`` and every trial's summary (ListTrainingJobsForHyperParameterTuningJob's
  ``TrainingJobSummaries``);
- ``stop``        present once ``stop_tuning_job()`` asked; ``logs/agent.log`` the agent's output.

Each trial is a normal training job of the same session (on Slurm, one ``sbatch`` each; on
Kubernetes, a job of the cluster), named ``<tuning job>-NNN-<8 hex>`` as SageMaker names them.
Every handle reads these files only, so ``HyperparameterTuner.attach(name,
sagemaker_session=LocalSession(root))`` (or ``SlurmSession(shared_dir)``, or a
``KubernetesSession`` of the same cluster and namespace on the same machine) in another process
sees the same tuning job.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from smlaunch import contract
from smlaunch.contract.processes import environment_importing_smlaunch
from smlaunch.sdk.backends.emulated.state import PRIVATE_DIR_MODE, JobDir, write_json_atomic
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError, SmlaunchError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.spec import TrainingJobSpec
from smlaunch.sdk.tuning import platform
from smlaunch.sdk.tuning.trials import SUMMARIES as SUMMARIES  # the layout, in one place
from smlaunch.sdk.tuning.trials import TUNING_DIR as TUNING_DIR

TRIAL_FILE = "trial.json"
IN_PROGRESS = "InProgress"
STOPPING = "Stopping"
TERMINAL = ("Completed", "Failed", "Stopped")
"""The statuses after which a tuning job's agent has ended."""
TIME_FIELDS = ("CreationTime", "LastModifiedTime", "HyperParameterTuningEndTime", "TrainingStartTime",
               "TrainingEndTime")  # fmt: skip


class TuningJobNotFoundError(SmlaunchError, KeyError):
    """No local tuning job of that name under the session's root."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def in_local_store(session: Any) -> bool:
    """Whether ``session`` keeps its tuning jobs in a job store: a ``LocalSession``, a
    ``SlurmSession`` or a ``KubernetesSession`` (:func:`smlaunch.sdk.tuning.platform.runs_in_store`)."""
    return platform.runs_in_store(session)


def tuning_dir(root: Path, name: str) -> JobDir:
    """The directory of the local tuning job ``name`` under the store ``root``."""
    return JobDir(contract.child_path(Path(root) / TUNING_DIR, name, "tuning job name", single=True))


@contextlib.contextmanager
def claimed(root: Path, name: str) -> Iterator[JobDir]:
    """Create the tuning job's directory (:class:`~smlaunch.sdk.errors.JobNameTakenError` when the
    name is used) for the code to be staged in and :func:`start` to fill; removed again when the
    block raises, so a failed ``fit()`` leaves the name free."""
    job = tuning_dir(root, name)
    job.path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    try:
        job.path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        raise JobNameTakenError(
            "job_name",
            name,
            f"a local tuning job of that name exists under {root}",
            "pass another job_name, or leave it unset for a timestamped one",
        ) from None
    try:
        yield job
    except BaseException:
        if not job.agent_file.exists():
            shutil.rmtree(job.path, ignore_errors=True)
        raise


def code_in_tuning_dir(spec: TrainingJobSpec, root: Path, name: str) -> TrainingJobSpec:
    """``spec`` with its code staged in the tuning job's directory (``source/sourcedir.tar.gz``)
    when the estimator would stage it in the job store itself (the default output path): there it
    would be a directory named like a job that no job owns. Other code locations are kept."""
    raw = spec.HyperParameters.get(contract.HP_SUBMIT_DIRECTORY)
    uri = urlparse(str(hp.decode_value(raw))) if raw is not None else None
    staged_in_store = Path(root).expanduser().resolve() / spec.TrainingJobName / "source"
    if uri is None or uri.scheme != "file" or Path(unquote(uri.path)).parent != staged_in_store:
        return spec
    moved = (
        tuning_dir(Path(root).expanduser().resolve(), name).path / "source" / contract.SOURCEDIR_TARBALL
    ).as_uri()
    return spec.model_copy(
        update={"HyperParameters": {**spec.HyperParameters, contract.HP_SUBMIT_DIRECTORY: json.dumps(moved)}}
    )


def code_uri(spec: TrainingJobSpec) -> str | None:
    """Where :func:`code_in_tuning_dir` moved ``spec``'s code, or None when it kept it."""
    raw = spec.HyperParameters.get(contract.HP_SUBMIT_DIRECTORY)
    uri = str(hp.decode_value(raw)) if raw is not None else ""
    return uri if uri.startswith("file:") and f"/{TUNING_DIR}/" in uri else None


def start(
    job: JobDir, request: dict[str, Any], spec: TrainingJobSpec, strategy: str, session: dict[str, Any]
) -> None:
    """Fill the :func:`claimed` directory of the tuning job ``request`` names (its trials are
    ``spec`` with the trial's name and hyperparameters, submitted with ``strategy`` on the session
    ``session`` records: :func:`smlaunch.sdk.tuning.platform.record`) and start its agent on this
    machine, detached."""
    write_json_atomic(job.spec_file, request)
    write_json_atomic(
        job.path / TRIAL_FILE, {"spec": spec.to_request(), "strategy": strategy, "platform": session}
    )
    created = time.time()
    job.write_state(
        {
            "HyperParameterTuningJobStatus": IN_PROGRESS,
            "CreationTime": created,
            "LastModifiedTime": created,
            **counters([]),
            SUMMARIES: [],
        }
    )
    with job.open_log(job.agent_log) as agent_log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "smlaunch.sdk.tuning.agent", str(job.path)],
            stdin=subprocess.DEVNULL,
            stdout=agent_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the tuning job outlives the notebook, as a training job does
            close_fds=True,
            env=dict(environment_importing_smlaunch(), PYTHONUNBUFFERED="1"),
        )
    job.record_agent(proc, host=socket.gethostname())  # its pid is this machine's


def counters(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """``TrainingJobStatusCounters`` and ``ObjectiveStatusCounters`` of the trials ``summaries``
    (a Failed trial is a NonRetryableError, as SageMaker counts a script's failure)."""
    jobs = dict.fromkeys(("Completed", "InProgress", "RetryableError", "NonRetryableError", "Stopped"), 0)
    objectives = dict.fromkeys(("Succeeded", "Pending", "Failed"), 0)
    for summary in summaries:
        status = summary["TrainingJobStatus"]
        jobs[
            "NonRetryableError" if status == "Failed" else "InProgress" if status == "Stopping" else status
        ] += 1
        objectives[summary["ObjectiveStatus"]] += 1
    return {"TrainingJobStatusCounters": jobs, "ObjectiveStatusCounters": objectives}


def _existing(root: Path, name: str) -> JobDir:
    job = tuning_dir(root, name)
    if not job.agent_file.exists():
        raise TuningJobNotFoundError(f"no local tuning job {name!r} under {root}")
    return job


def _times(record: dict[str, Any]) -> dict[str, Any]:
    return {
        key: datetime.fromtimestamp(value, tz=timezone.utc)
        if key in TIME_FIELDS and value is not None
        else value
        for key, value in record.items()
    }


def agent_alive(job: JobDir) -> bool | None:
    """Whether the tuning job's agent runs; None where this process cannot tell: the agent runs on
    another machine (a Slurm store that another login node shares), so ``state.json`` is taken as
    it is."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        host = job.read_json(job.agent_file).get("host")
        if host is not None and host != socket.gethostname():
            return None
    return job.agent_alive()


def _state(job: JobDir) -> dict[str, Any]:
    """``state.json``; an agent that died before writing a terminal status makes it Failed."""
    state = job.read_state()
    if state["HyperParameterTuningJobStatus"] not in TERMINAL and agent_alive(job) is False:
        state = dict(
            state,
            HyperParameterTuningJobStatus="Failed",
            FailureReason=f"InternalServerError: the smlaunch tuning agent died. See {job.agent_log}",
        )
    return state


def raw_state(root: Path, name: str) -> dict[str, Any]:
    """``state.json`` of the local tuning job ``name`` as the agent wrote it (times as numbers)."""
    return _state(_existing(root, name))


def describe(root: Path, name: str) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob of the local tuning job ``name``."""
    job = _existing(root, name)
    state = _state(job)
    description = dict(job.read_json(job.spec_file))
    description["HyperParameterTuningJobArn"] = (
        f"arn:aws:sagemaker:local:000000000000:hyper-parameter-tuning-job/{name.lower()}"
    )
    description.pop("Tags", None)
    description.update(_times({k: v for k, v in state.items() if k != SUMMARIES}))
    end = state.get("HyperParameterTuningEndTime") or time.time()
    description["ConsumedResources"] = {"RuntimeInSeconds": max(0, int(end - state["CreationTime"]))}
    for key in ("BestTrainingJob", "OverallBestTrainingJob"):
        if description.get(key):
            description[key] = _times(description[key])
    return description


def training_job_summaries(root: Path, name: str) -> list[dict[str, Any]]:
    """ListTrainingJobsForHyperParameterTuningJob's ``TrainingJobSummaries``: every trial so far,
    in the order the trials started."""
    return [_times(summary) for summary in _state(_existing(root, name))[SUMMARIES]]


def stop(root: Path, name: str) -> None:
    """Ask the tuning job's agent to stop it: it stops the running trials through the training
    jobs' stop path, then ends Stopped. One that already ended is left as is."""
    job = _existing(root, name)
    if _state(job)["HyperParameterTuningJobStatus"] not in TERMINAL:
        job.stop_file.touch()


def refuse_without_metrics(request: dict[str, Any]) -> None:
    """A local tuning job reads each trial's objective from its logs: it needs the metric definitions."""
    if not request["TrainingJobDefinition"]["AlgorithmSpecification"].get("MetricDefinitions"):
        raise ConfigurationError(
            "metric_definitions",
            None,
            "a local tuning job reads each trial's objective from its logs with the metric definitions",
            "pass metric_definitions=[{'Name': objective_metric_name, 'Regex': 'loss=([0-9.]+)'}]",
        )
