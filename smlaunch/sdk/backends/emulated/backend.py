"""The local backend: every host of the job emulated on this machine (no AWS), by an executor.

The session chooses the executor (:mod:`smlaunch.sdk.backends.emulated.executors`): local processes (the
default, :class:`~smlaunch.sdk.backends.emulated.executors.process.executor.ProcessExecutor`) or one Docker
container per host (:class:`~smlaunch.sdk.backends.emulated.executors.docker.executor.DockerExecutor`). The
executor adds its checks and settings here and starts the hosts in the agent; all the rest is this
backend's and the agent's, whatever the executor.

``reserve(spec)`` claims the job's name by creating the job directory ``<session.root>/<job>/``
(one ``rename`` of a directory holding the claim, :mod:`smlaunch.sdk.backends.emulated.store`: of two
submitters of one name exactly one gets it, before either stages code there);
``submit(request)`` checks the job, fills the directory (layout in
:mod:`smlaunch.sdk.backends.emulated.state`), and starts ONE detached supervisor process per job,
``python -m smlaunch.sdk.backends.emulated.agent <job dir>``, then returns at once. The agent writes the
hosts' ``/opt/ml`` trees, has the executor start the hosts, streams their logs, applies the
failure, stop and ``max_run`` policy, packages the artifacts and keeps ``state.json`` current (see
its docstring for the policy).

Every other operation reads or writes files of the job directory only, so any handle in any
Python process (``LocalSession(root).backend().describe(name)``) can describe, stream, wait on or
stop a job that another process submitted.

``max_retry_attempts`` is accepted and recorded (``RetryStrategy`` in ``describe()``) and honoured
as SageMaker defines it: SageMaker retries a job only when it fails with an internal error of the
platform (``InternalServerError``), never for the script (``AlgorithmError``) or its configuration
(``ClientError``). Locally the platform's own failures are smlaunch's (the agent's exception, or the
agent killed), which a second run on the same machine would repeat; so no local job is retried, and
a failed script fails at once, as on SageMaker.

One concept: the operations of the backend contract on a job directory (reserve/submit,
describe, logs, stop). The checks only this machine can make before a submit are
:mod:`smlaunch.sdk.backends.emulated.preflight`'s; following a job's log (its transfer bars, its
end) is :mod:`smlaunch.sdk.backends.emulated.follow`'s.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.contract.processes import environment_importing_smlaunch
from smlaunch.sdk.backends.base import Backend, Capabilities, refuse_earlier_output
from smlaunch.sdk.backends.emulated import early_start, layout, preflight, store
from smlaunch.sdk.backends.emulated.executors.base import Executor
from smlaunch.sdk.backends.emulated.executors.process.executor import ProcessExecutor
from smlaunch.sdk.backends.emulated.follow import read_log
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, SessionKnobs
from smlaunch.sdk.backends.emulated.layout import machine_gpu_count
from smlaunch.sdk.backends.emulated.metrics import METRICS_FILE, final_metric_data, read_metric_records
from smlaunch.sdk.backends.emulated.spot import request_interruption
from smlaunch.sdk.backends.emulated.state import (
    STORE_FULL_FIX,
    JobDir,
    JobState,
    host_report,
    write_json_atomic,
)
from smlaunch.sdk.backends.status import instance_count, transition_line
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError, SmlaunchError, no_space_errors
from smlaunch.sdk.jobs.metrics import LOCAL_SOURCE, MetricRecord
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request import naming
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.tuning import trials

REQUIREMENTS_CACHE_DIR = ".requirements"
"""Under the session's root: the layered environments of ``requirements.txt``, one per file hash, and
each running job's copy (:mod:`smlaunch.runtime.requirements_cache`)."""
_TIME_FIELDS = ("CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime")


class JobNotFoundError(SmlaunchError, KeyError):
    """No local job of that name under the session's root."""

    def __str__(self) -> str:
        # KeyError's str() is the repr of its key: the message in quotes.
        return str(self.args[0]) if self.args else ""


class HostKnobs(SessionKnobs, Protocol):
    """The session's knobs (:class:`smlaunch.sdk.sessions.settings.Settings`): those a job's
    settings follow from, and the variables the host runtimes read."""

    def host_environment(self) -> dict[str, str]: ...


class JobStore(Protocol):
    """What the backend reads of its session (:class:`~smlaunch.sdk.sessions.local.LocalSession`,
    ``SlurmSession``), so that the backend never imports the session: where jobs live, the knobs,
    and the S3 client for ``s3://`` inputs, outputs and checkpoints."""

    @property
    def root(self) -> Path: ...

    @property
    def settings(self) -> HostKnobs: ...

    def s3_client(self) -> Any: ...


class LocalBackend(Backend):
    """Run jobs on this machine with the session's executor; see the module docstring."""

    capabilities = Capabilities(
        name="local",
        uri_schemes=frozenset({"file", "s3"}),
        input_modes=frozenset({"File", "FastFile", "Pipe"}),
        spot=True,
        spot_interruptions=True,
        checkpoints=True,
        retry_strategy=True,
        interrupt_stops_job=True,
    )
    agent_module: str = "smlaunch.sdk.backends.emulated.agent"
    """The module run as ``python -m <agent_module> <job dir>``, whatever the executor."""

    def __init__(self, session: JobStore, executor: Executor | None = None) -> None:
        self.session = session
        self.executor: Executor = executor or ProcessExecutor()
        """How the job's hosts start (chosen by the session): processes, or containers."""
        if self.executor.name != ProcessExecutor.name:
            self.capabilities = LocalBackend.capabilities.model_copy(update={"name": self.executor.name})
        self._reserved: set[str] = set()

    # --- where things are -------------------------------------------------------------------

    def job_dir(self, job_name: str) -> JobDir:
        naming.validate_job_name(job_name)  # a name is one path component: never '..' or 'a/b'
        return JobDir(contract.child_path(self.session.root, job_name, "job name", single=True))

    def _started(self, job: JobDir) -> bool:
        """Whether the job's agent was started (``agent.json``): from then on the agent owns the
        directory; before, it is a claim (:mod:`smlaunch.sdk.backends.emulated.store`)."""
        return job.agent_file.exists()

    def _existing(self, job_name: str) -> JobDir:
        """The job directory of a started job whose ``spec.json`` names this very job; else
        :class:`JobNotFoundError` (saying when the name is only claimed), a
        :class:`~smlaunch.sdk.backends.emulated.store.DamagedRecordError`, or a
        :class:`~smlaunch.sdk.backends.emulated.store.ForeignRecordError` (a copy of another job's
        directory: acting on the job it names would act on another directory)."""
        job = self.job_dir(job_name)
        missing = f"no local training job {job_name!r} under {self.session.root}"
        if not job.path.is_dir():
            raise JobNotFoundError(missing)
        if not self._started(job):
            status, detail, _ = store.describe_claim(job.path)
            raise JobNotFoundError(f"{missing}: its directory is {status}: {detail}")
        spec = store.read_record(job.spec_file)
        named = store.record_field(job.spec_file, spec, "TrainingJobName", str)
        if named != job_name:
            raise store.ForeignRecordError(
                "job_name",
                job_name,
                f"{job.spec_file} is the record of job {named!r}: {job.path} is a copy or a renamed "
                "job directory, not a job of its own",
                f"name the job itself ({named!r}), or delete the copy yourself (rm -r {job.path})",
            )
        return job

    def _read_state(self, job: JobDir) -> dict[str, Any]:
        """``state.json``, checked enough to describe it (else ``DamagedRecordError``)."""
        state = store.read_record(job.state_file)
        status = state.get("TrainingJobStatus")
        if status not in {s.value for s in JobState}:
            raise store.DamagedRecordError(job.state_file, f"TrainingJobStatus is {status!r}")
        transitions = state.get("SecondaryStatusTransitions", [])
        if not isinstance(transitions, list) or not all(isinstance(t, dict) for t in transitions):
            raise store.DamagedRecordError(
                job.state_file, "SecondaryStatusTransitions is not a list of objects"
            )
        return state

    def entry(self, job_name: str) -> store.Entry:
        """What the store's directory ``job_name`` is: a job (with its description), or Claimed,
        Abandoned, Damaged or Foreign (:mod:`smlaunch.sdk.backends.emulated.store`)."""
        job = self.job_dir(job_name)
        if not job.path.is_dir():
            raise JobNotFoundError(f"no local training job {job_name!r} under {self.session.root}")
        if not self._started(job):
            status, detail, at = store.describe_claim(job.path)
            created = _to_datetime(at) if at is not None else store.directory_time(job.path)
            return store.Entry(job_name, job.path, status, None, detail, created, status == store.CLAIMED)
        try:
            description = self.describe(job_name)
        except store.DamagedRecordError as exc:
            try:
                running = bool(self._agent_alive(job))
            except store.DamagedRecordError:
                running = False  # who runs in it cannot be told: the record is what is damaged
            return store.Entry(
                job_name, job.path, store.DAMAGED, None, str(exc), store.directory_time(job.path), running
            )
        except store.ForeignRecordError as exc:
            created = store.directory_time(job.path)
            return store.Entry(job_name, job.path, store.FOREIGN, None, exc.problem, created)
        status = description["TrainingJobStatus"]
        running = status not in contract.TERMINAL_STATUSES or bool(self._agent_alive(job))
        created = description.get("CreationTime")
        return store.Entry(job_name, job.path, status, description, None, created, running)

    def entries(self) -> Iterator[store.Entry]:
        """Every directory of the job store named like a job, as :meth:`entry` sees it."""
        try:
            children = sorted(self.session.root.iterdir())
        except FileNotFoundError:
            return
        for path in children:
            try:
                naming.validate_job_name(path.name)
            except ConfigurationError:
                continue  # not a job's: the requirements cache, a removal or a claim under way
            if path.is_dir():
                yield self.entry(path.name)

    # --- check / submit ---------------------------------------------------------------------

    def check(self, request: JobRequest) -> None:
        """Capabilities, plus what only this machine can tell: writable output path and job root,
        ``file://`` inputs that exist, checkpoint and TensorBoard paths each host can have, a job name
        not used yet (unless this backend reserved it), no earlier artifacts at
        ``<output_path>/<job>/output/`` (they would be overwritten), and ManifestFile channels that
        parse and name existing objects (AugmentedManifestFile is not emulated). Raises before
        anything starts. The executor's own checks come first (Docker: an engine answers and has the
        image), before the local checks create the output directory or read manifests."""
        spec = request.spec
        self.executor.check(spec)
        super().check(request)
        root = Path(self.session.root)
        preflight.check_outside_store(spec, root)  # before anything below creates a directory there
        preflight.check_writable(spec, root)
        preflight.check_channels(spec)
        preflight.check_local_paths(spec, self.executor, root)
        preflight.check_spot_faults(spec, self._knobs(spec))
        if spec.TrainingJobName not in self._reserved and self.job_dir(spec.TrainingJobName).path.exists():
            raise self._name_taken(spec.TrainingJobName)
        refuse_earlier_output(spec, self.session.s3_client)
        preflight.check_manifests(spec, self.session.s3_client)  # last: the only check that reads data

    def _name_taken(self, job_name: str) -> JobNameTakenError:
        job = self.job_dir(job_name)
        fix = "pass another job_name, or leave it unset for a fresh timestamped name"
        if self._started(job):
            where = f"a job of that name exists under {self.session.root}"
        else:
            status, detail, _ = store.describe_claim(job.path)
            where = (
                f"{job.path} exists: a submit of that name is in progress, or one was interrupted "
                f"({status}: {detail})"
            )
            if status != store.CLAIMED:
                fix += f"; or free the name: smlaunch rm {job_name}"
        return JobNameTakenError("job_name", job_name, where, fix)

    def reserve(self, spec: TrainingJobSpec) -> None:
        """Claim the name: create ``<root>/<job>/`` holding this process's claim with one
        ``rename``, which fails when it exists (:func:`smlaunch.sdk.backends.emulated.store.claim`)."""
        job = self.job_dir(spec.TrainingJobName)
        try:
            with no_space_errors(job.path, STORE_FULL_FIX):  # a directory may need a block too
                store.claim(job.path)
        except FileExistsError:
            raise self._name_taken(spec.TrainingJobName) from None
        self._reserved.add(spec.TrainingJobName)

    def release(self, spec: TrainingJobSpec) -> None:
        """Remove a reserved job directory whose agent was never started (code staged into it,
        half-written files), so the failed submit leaves nothing behind and the name is free."""
        if spec.TrainingJobName not in self._reserved:
            return
        self._reserved.discard(spec.TrainingJobName)
        job = self.job_dir(spec.TrainingJobName)
        if not self._started(job):
            shutil.rmtree(job.path, ignore_errors=True)

    def _knobs(self, spec: TrainingJobSpec) -> dict[str, str]:
        """The session's knobs for the host runtimes, less those the job's ``environment=`` sets."""
        given = spec.Environment or {}
        return {k: v for k, v in self.session.settings.host_environment().items() if k not in given}

    def settings(self, spec: TrainingJobSpec) -> JobSettings:
        """How this machine runs ``spec`` (:meth:`JobSettings.resolve`): resolved once at submit
        and logged by the agent."""
        meta = getattr(self.session.s3_client(), "meta", None) if _uses_s3(spec) else None
        machine_gpus = machine_gpu_count()
        return JobSettings.resolve(
            spec,
            self.session.settings,
            self.executor.settings(spec),
            machine_gpus=machine_gpus,
            host_gpus=self._host_gpus(machine_gpus),
            requirements_cache=Path(self.session.root) / REQUIREMENTS_CACHE_DIR
            if self.executor.layered_requirements
            else None,
            knobs=self._knobs(spec),
            s3_endpoint_url=getattr(meta, "endpoint_url", None),
            s3_region_name=getattr(meta, "region_name", None),
        )

    def _host_gpus(self, machine_gpus: int) -> int | None:
        """What a host that emulates no GPU is told it has: none on a machine without GPUs, else
        None (its runtime counts the GPUs it sees)."""
        return 0 if machine_gpus == 0 else None

    def submit(self, request: JobRequest) -> None:
        """Fill the (reserved) job directory and start its agent; returns once the agent process
        exists. Reserves the name first when the caller did not; on failure, releases it (a full
        job store raises :class:`~smlaunch.sdk.errors.NoSpaceLeftError` naming the path). Warns when
        the store has less free space than the code and the ``s3://`` inputs the job will copy."""
        spec = request.spec
        self.check(request)
        if spec.TrainingJobName not in self._reserved:
            self.reserve(spec)
        try:
            preflight.warn_when_short_of_space(spec, Path(self.session.root), self.session.s3_client)
            with no_space_errors(self.job_dir(spec.TrainingJobName).path, STORE_FULL_FIX):
                self._start(spec)
        except BaseException:
            self.release(spec)
            raise
        self._reserved.discard(spec.TrainingJobName)
        self.executor.submitted(self.job_dir(spec.TrainingJobName))

    def _start(self, spec: TrainingJobSpec) -> None:
        job = self.job_dir(spec.TrainingJobName)
        for log in (job.job_log, job.agent_log):  # before the agent (or sbatch) opens them
            job.open_log(log).close()
        write_json_atomic(job.spec_file, spec.to_request())
        settings = self.settings(spec)
        write_json_atomic(job.settings_file, settings.model_dump(mode="json"))
        self.executor.plan_early_start(spec, settings, job)
        created = time.time()
        starting = {
            "Status": contract.SECONDARY_STARTING,
            "StartTime": created,
            "StatusMessage": f"Launching requested {self.executor.hosts_called}",
        }
        # The job log opens with the first transition, as the agent logs each of the others.
        with job.open_log(job.job_log) as job_log:
            job_log.write(f"[{LOCAL_SOURCE}] {transition_line(starting)}\n".encode())
        job.write_state(
            {
                "TrainingJobStatus": contract.STATUS_IN_PROGRESS,
                "SecondaryStatus": contract.SECONDARY_STARTING,
                "SecondaryStatusTransitions": [starting],
                "CreationTime": created,
                "LastModifiedTime": created,
            }
        )
        self._start_agent(job)

    def _start_agent(self, job: JobDir) -> None:
        """Start the job's agent (``python -m <agent_module> <job dir>``, or its hosts-first entry
        :mod:`smlaunch.sdk.backends.emulated.early_start` when the executor planned the hosts) and record
        it in ``agent.json``; its files are written."""
        module = early_start.__name__ if job.early_start_file.exists() else self.agent_module
        with job.open_log(job.agent_log) as agent_log:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, str(job.path)],
                stdin=subprocess.DEVNULL,
                stdout=agent_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the notebook must not reach the job; stop() does
                close_fds=True,
                # A host runtime forked by early_start shows this environment in /proc: it names
                # the job there as every other process of the job does (executors.forked).
                env=dict(_agent_environment(), **{contract.TRAINING_JOB_NAME_ENV: job.path.name}),
            )
        job.record_agent(proc)

    # --- describe / logs / stop -------------------------------------------------------------

    def _agent_alive(self, job: JobDir) -> bool | None:
        """Whether the job's agent still runs (None: not started yet); an unreadable ``agent.json``
        raises :class:`~smlaunch.sdk.backends.emulated.store.DamagedRecordError`."""
        try:
            return job.agent_alive()
        except (ValueError, KeyError, TypeError):
            agent = store.read_record(job.agent_file)  # raises when the JSON is what is damaged
            store.record_field(job.agent_file, agent, "pid", int)
            store.record_field(job.agent_file, agent, "create_time", (int, float))
            raise store.DamagedRecordError(job.agent_file, "not an agent's record") from None

    def _agent_lost(self, job: JobDir, state: dict[str, Any]) -> dict[str, Any]:
        """The state to report once the agent is gone without having written a terminal state."""
        return _agent_lost(job, state)

    def describe(self, job_name: str) -> dict[str, Any]:
        job = self._existing(job_name)
        request = store.read_record(job.spec_file)
        state = self._read_state(job)
        if not JobState.of(state).is_terminal and self._agent_alive(job) is False:
            state = self._agent_lost(job, self._read_state(job))
        description: dict[str, Any] = dict(request)
        description["TrainingJobArn"] = (
            f"arn:aws:sagemaker:local:000000000000:training-job/{job_name.lower()}"
        )
        try:
            for key, value in state.items():
                description[key] = _to_datetime(value) if key in _TIME_FIELDS else value
            description["SecondaryStatusTransitions"] = [
                {k: (_to_datetime(v) if k in ("StartTime", "EndTime") else v) for k, v in transition.items()}
                for transition in state.get("SecondaryStatusTransitions", [])
            ]
        except (OverflowError, ValueError, OSError) as exc:
            raise store.DamagedRecordError(job.state_file, f"a time is not a timestamp ({exc})") from None
        final = final_metric_data(self.metric_records(job_name))
        if final:
            description["FinalMetricDataList"] = final
        tuning = trials.tuning_job_of(self.session.root, job_name)
        if tuning is not None:  # a trial of a local tuning job, as SageMaker describes one
            description["TuningJobArn"] = trials.tuning_job_arn(tuning)
        # smlaunch's addition, as Attempts: the launch plan each host resolved (smlaunch.runtime.launchers).
        plans = {
            name: host_report(contract.Paths(job.host_base(name)).output_dir / contract.TOPOLOGY_FILE)
            for name in layout.host_names(instance_count(description))
        }
        if any(plans.values()):
            description["HostTopology"] = {name: plan for name, plan in plans.items() if plan}
        return description

    def metric_records(self, job_name: str, metric_names: Sequence[str] | None = None) -> list[MetricRecord]:
        """Every value of the job's ``MetricDefinitions`` its hosts printed so far, with the time the
        agent read the line and the host that printed it (:mod:`smlaunch.sdk.backends.emulated.metrics`)."""
        records = read_metric_records(self._existing(job_name).logs_dir / METRICS_FILE)
        return [r for r in records if not metric_names or r.name in metric_names]

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Lines of the merged job log, each secondary-status transition among them where it
        happened (``submit`` and the agent write them there, :mod:`smlaunch.sdk.backends.status`,
        prefixed ``[smlaunch]``); with ``follow``, tail it until the job is terminal, then end with
        the training seconds and one closing line (``Completed in 33 s; model: <uri>``,
        ``Failed: <reason>``, ``Stopped by user``)."""
        for block in self.log_blocks(job_name, follow):
            yield from block

    def log_blocks(self, job_name: str, follow: bool = False) -> Iterator[list[str]]:
        """:meth:`log_lines` as they are read: up to 64 KiB of whole lines at a time."""
        job = self._existing(job_name)
        yield from read_log(job, follow, self._agent_alive, lambda: self.describe(job_name))

    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Ask the agent to stop the job (SIGTERM to every host, SIGKILL after the grace period).

        ``reason="spot"`` emulates a spot interruption instead (managed-spot jobs only): the attempt
        is interrupted and the job restarts on fresh hosts (:mod:`smlaunch.sdk.backends.emulated.spot`).
        """
        job = self._existing(job_name)
        if JobState.of(self._read_state(job)).is_terminal:
            return
        if reason is not None:
            if reason != "spot":
                raise ConfigurationError("reason", reason, "unknown stop reason", "pass reason='spot'")
            request_interruption(job.path, TrainingJobSpec.model_validate(job.read_json(job.spec_file)))
            return
        job.stop_file.touch()


def _uses_s3(spec: TrainingJobSpec) -> bool:
    uris = [spec.OutputDataConfig.S3OutputPath]
    uris += [c.DataSource.S3DataSource.S3Uri for c in spec.InputDataConfig or [] if c.DataSource.S3DataSource]
    if spec.CheckpointConfig is not None:
        uris.append(spec.CheckpointConfig.S3Uri)
    if spec.TensorBoardOutputConfig is not None:
        uris.append(spec.TensorBoardOutputConfig.S3OutputPath)
    # The code: the hosts fetch an s3:// submit directory themselves (one the user named, too).
    uris.append(str(hp.decode_value((spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY) or '""')))
    return any(urlparse(uri).scheme == "s3" for uri in uris)


def _agent_environment() -> dict[str, str]:
    env = environment_importing_smlaunch()
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _agent_lost(job: JobDir, state: dict[str, Any]) -> dict[str, Any]:
    """The state to report when the agent died without writing a terminal state (e.g. SIGKILL).

    Its host runtimes died with it (PDEATHSIG), so the job is over: report it Failed.
    """
    if JobState.of(state).is_terminal:
        return state
    agent = json.loads(job.agent_file.read_text())
    state = dict(state)
    ended = time.time()
    state["TrainingJobStatus"] = contract.STATUS_FAILED
    state["SecondaryStatus"] = contract.SECONDARY_FAILED
    state["FailureReason"] = (
        f"InternalServerError: the smlaunch agent of this job (pid {agent['pid']}) died; "
        "its hosts were killed with it. See " + str(job.agent_log)
    )
    state.setdefault("TrainingEndTime", ended)
    return state


def _to_datetime(value: Any) -> Any:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    return value
