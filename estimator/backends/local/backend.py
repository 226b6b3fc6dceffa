"""The local backend: every host of the job emulated on this machine (no AWS), by an executor.

The session chooses the executor (:mod:`estimator.backends.local.executors`): local processes (the
default, :class:`~estimator.backends.local.executors.process.ProcessExecutor`) or one Docker
container per host (:class:`~estimator.backends.local.executors.docker.DockerExecutor`). The
executor adds its checks and settings here and starts the hosts in the agent; all the rest is this
backend's and the agent's, whatever the executor.

``reserve(spec)`` claims the job's name by creating the job directory ``<session.root>/<job>/``
(one ``rename`` of a directory holding the claim, :mod:`estimator.backends.local.store`: of two
submitters of one name exactly one gets it, before either stages code there);
``submit(spec)`` checks the spec, fills the directory (layout in
:mod:`estimator.backends.local.state`), and starts ONE detached supervisor process per job,
``python -m estimator.backends.local.agent <job dir>``, then returns at once. The agent writes the
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

Over 500 lines but one concept: the four operations of the backend contract on a job directory
(reserve/submit, describe, logs, stop) and the checks only this machine can make before them.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import psutil

from estimator import hyperparameters as hp
from estimator import naming
from estimator.backends.base import Backend, Capabilities, refuse_earlier_output
from estimator.backends.local import data as local_data
from estimator.backends.local import early_start, layout, store
from estimator.backends.local.executors.base import Executor
from estimator.backends.local.executors.process import ProcessExecutor
from estimator.backends.local.layout import file_uri_path, instance_ranks, machine_gpu_count
from estimator.backends.local.metrics import METRICS_FILE, final_metric_data, read_metric_records
from estimator.backends.local.spot import request_interruption, spot_faults
from estimator.backends.local.state import STORE_FULL_FIX, JobDir, JobState, host_report, write_json_atomic
from estimator.backends.status import instance_count, summary_lines, transition_line
from estimator.errors import ConfigurationError, JobNameTakenError, SmlaunchError, no_space_errors
from estimator.metrics import LOCAL_SOURCE, MetricRecord
from estimator.spec import TrainingJobSpec
from runtime import contract
from runtime.channels import ChannelError
from runtime.progress import ProgressBar, interactive_output
from runtime.transfer import TransferEngine

if TYPE_CHECKING:
    from estimator.local_session import LocalSession

REQUIREMENTS_CACHE_DIR = ".requirements"
"""Under the session's root: the layered environments of ``requirements.txt``, one per file hash, and
each running job's copy (:mod:`runtime.requirements`)."""
_TIME_FIELDS = ("CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime")
_POLL_SECONDS = 0.1
"""While following a log that has nothing new, the job's state and its agent are looked at this often."""
_FOLLOW_SECONDS = 0.01
"""...and ``state.json`` is stat'ed this often (re-read when it changed), so that the job's end is
seen within about this long after the agent wrote it."""
_PROGRESS_SECONDS = 0.5
"""While following a log, the transfer bars are brought up to date at least this often."""
_STATUS_LINE = re.compile(rf"^\[{LOCAL_SOURCE}\] \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \w+ - ", re.M)
"""A status line the agent (or ``submit``) wrote into the job log, one per transition."""


class JobNotFoundError(SmlaunchError, KeyError):
    """No local job of that name under the session's root."""

    def __str__(self) -> str:
        # KeyError's str() is the repr of its key: the message in quotes.
        return str(self.args[0]) if self.args else ""


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
    agent_module: str = "estimator.backends.local.agent"
    """The module run as ``python -m <agent_module> <job dir>``, whatever the executor."""

    def __init__(self, session: LocalSession, executor: Executor | None = None) -> None:
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
        directory; before, it is a claim (:mod:`estimator.backends.local.store`)."""
        return job.agent_file.exists()

    def _existing(self, job_name: str) -> JobDir:
        """The job directory of a started job whose ``spec.json`` names this very job; else
        :class:`JobNotFoundError` (saying when the name is only claimed), a
        :class:`~estimator.backends.local.store.DamagedRecordError`, or a
        :class:`~estimator.backends.local.store.ForeignRecordError` (a copy of another job's
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
        Abandoned, Damaged or Foreign (:mod:`estimator.backends.local.store`)."""
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

    def check(self, spec: TrainingJobSpec) -> None:
        """Capabilities, plus what only this machine can tell: writable output path and job root,
        ``file://`` inputs that exist, checkpoint and TensorBoard paths each host can have, a job name
        not used yet (unless this backend reserved it), no earlier artifacts at
        ``<output_path>/<job>/output/`` (they would be overwritten), and ManifestFile channels that
        parse and name existing objects (AugmentedManifestFile is not emulated). Raises before
        anything starts. The executor's own checks come first (Docker: an engine answers and has the
        image), before the local checks create the output directory or read manifests."""
        self.executor.check(spec)
        super().check(spec)
        self._check_outside_store(spec)  # before anything below creates a directory there
        output = spec.OutputDataConfig.S3OutputPath
        if urlparse(output).scheme == "file":
            _require_writable_dir("output_path", output, file_uri_path(output))
        _require_writable_dir("sagemaker_session.root", str(self.session.root), Path(self.session.root))
        for channel in spec.InputDataConfig or []:
            source = channel.DataSource.S3DataSource
            if source is None:
                raise ConfigurationError(
                    f"inputs[{channel.ChannelName!r}]",
                    channel.DataSource.model_dump(exclude_none=True),
                    "only S3DataSource channels (s3:// or file:// URIs) run locally",
                    "pass an s3:// or file:// URI",
                )
            if source.S3DataType == "AugmentedManifestFile":
                raise ConfigurationError(
                    f"inputs[{channel.ChannelName!r}].s3_data_type",
                    source.S3DataType,
                    "augmented manifests (JSON Lines records with attribute_names) are not emulated locally",
                    "run the job on SageMaker, or use s3_data_type='ManifestFile' (a list of object keys) "
                    "or 'S3Prefix'",
                )
            if urlparse(source.S3Uri).scheme == "file":
                path = file_uri_path(source.S3Uri)
                if not path.exists():
                    raise ConfigurationError(
                        f"inputs[{channel.ChannelName!r}]",
                        source.S3Uri,
                        f"{path} does not exist",
                        "point the channel at an existing file or directory",
                    )
                if source.S3DataType != "S3Prefix":
                    raise ConfigurationError(
                        f"inputs[{channel.ChannelName!r}].s3_data_type",
                        source.S3DataType,
                        "manifest files are not supported for file:// channels",
                        "use S3Prefix",
                    )
        self._check_container_dirs(spec)
        environment = layout.job_environment(spec, {"knobs": self._knobs(spec)})
        if spot_faults(environment) and not spec.EnableManagedSpotTraining:
            raise ConfigurationError(
                f"environment[{contract.SMLAUNCH_FAULTS!r}]"
                if contract.SMLAUNCH_FAULTS in (spec.Environment or {})
                else "faults",
                environment[contract.SMLAUNCH_FAULTS],
                "a spot fault interrupts a managed-spot job, and this job does not use managed spot",
                "pass use_spot_instances=True (and max_wait), or drop the spot fault",
            )
        if spec.TrainingJobName not in self._reserved and self.job_dir(spec.TrainingJobName).path.exists():
            raise self._name_taken(spec.TrainingJobName)
        refuse_earlier_output(spec, self.session.s3_client)
        self._check_manifests(spec)  # last: the only check that reads data

    def _check_outside_store(self, spec: TrainingJobSpec) -> None:
        """No ``file://`` place the job writes (artifacts, checkpoints, TensorBoard) or reads
        (channels) inside the job store, where ``smlaunch rm``/``gc`` delete it with a job, except the
        default output path (the store itself: each job's artifacts in its own directory, which go
        with it); no checkpoint prefix or channel holding the store (the job would read itself)."""
        root = Path(self.session.root)
        output = spec.OutputDataConfig.S3OutputPath
        if urlparse(output).scheme == "file":
            path = file_uri_path(output)
            if not store.same_directory(path, root):  # the default output path is the store
                store.refuse_inside_store(root, "output_path", output, path / spec.TrainingJobName)
        places = [
            (f"inputs[{c.ChannelName!r}]", c.DataSource.S3DataSource.S3Uri, True)
            for c in spec.InputDataConfig or []
            if c.DataSource.S3DataSource is not None
        ]
        if spec.CheckpointConfig is not None:
            places.append(("checkpoint_s3_uri", spec.CheckpointConfig.S3Uri, True))
        if spec.TensorBoardOutputConfig is not None:
            places.append(
                ("tensorboard_output_config.s3_output_path", spec.TensorBoardOutputConfig.S3OutputPath, False)
            )
        for field, uri, contains in places:
            if urlparse(uri).scheme == "file":
                store.refuse_inside_store(root, field, uri, file_uri_path(uri), contains=contains)

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
        ``rename``, which fails when it exists (:func:`estimator.backends.local.store.claim`)."""
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

    def _check_manifests(self, spec: TrainingJobSpec) -> None:
        """Read every ManifestFile channel and prove each object it names exists, so a bad manifest
        fails ``fit()`` before any job directory, host or download exists (staging would read it
        again, after the other channels had been downloaded)."""
        manifests = [
            (c.ChannelName, c.DataSource.S3DataSource.S3Uri)
            for c in spec.InputDataConfig or []
            if c.DataSource.S3DataSource and c.DataSource.S3DataSource.S3DataType == "ManifestFile"
        ]
        if not manifests:
            return
        from botocore.exceptions import BotoCoreError, ClientError

        unreachable = (ClientError, BotoCoreError, OSError)
        engine = TransferEngine(client_factory=self.session.s3_client, progress=False)
        for name, uri in manifests:
            field = f"inputs[{name!r}]"
            try:
                entries = local_data.read_manifest(engine, uri)
            except ChannelError as exc:
                raise ConfigurationError(
                    field,
                    uri,
                    f"not a valid manifest: {exc}",
                    'write it as a JSON list [{"prefix": "s3://bucket/prefix/"}, "relative/key", ...]',
                ) from None
            except unreachable as exc:
                raise ConfigurationError(
                    field,
                    uri,
                    f"the manifest cannot be read ({type(exc).__name__}: {exc})",
                    "check the manifest's URI, that it exists and that your credentials can read it",
                ) from None
            try:
                local_data.expand_manifest(engine, entries, uri)
            except ChannelError as exc:
                raise ConfigurationError(
                    field,
                    uri,
                    str(exc),
                    "upload the missing object(s), or remove them from the manifest",
                ) from None
            except unreachable as exc:
                raise ConfigurationError(
                    field,
                    uri,
                    f"the manifest's objects cannot be listed ({type(exc).__name__}: {exc})",
                    "check the manifest's prefix and that your credentials can list it",
                ) from None

    def _check_container_dirs(self, spec: TrainingJobSpec) -> None:
        """Checkpoints' and TensorBoard's ``LocalPath`` must each be an absolute path every host can
        have to itself: under ``/opt/ml`` (mapped into each host's tree), or anywhere with
        containers (each host's directory is mounted there)."""
        if spec.CheckpointConfig is not None and spec.CheckpointConfig.LocalPath is not None:
            self._check_container_dir(
                "checkpoint_local_path",
                spec.CheckpointConfig.LocalPath,
                contract.DEFAULT_CHECKPOINT_LOCAL_PATH,
            )
        if spec.TensorBoardOutputConfig is not None and spec.TensorBoardOutputConfig.LocalPath is not None:
            self._check_container_dir(
                "tensorboard_output_config.container_local_output_path",
                spec.TensorBoardOutputConfig.LocalPath,
                contract.DEFAULT_TENSORBOARD_LOCAL_PATH,
            )
        checkpoints, tensorboard = layout.checkpoint_local_path(spec), layout.tensorboard_local_path(spec)
        if checkpoints is not None and tensorboard is not None:
            ckpt, tb = (PurePosixPath(posixpath.normpath(p)) for p in (checkpoints, tensorboard))
            if ckpt == tb or ckpt in tb.parents or tb in ckpt.parents:
                raise ConfigurationError(
                    "checkpoint_local_path",
                    checkpoints,
                    f"overlaps the TensorBoard LocalPath {tensorboard!r}: one directory would be synced "
                    "to two places (and checkpoint deletions would delete TensorBoard files)",
                    "give checkpoints and TensorBoard output separate directories",
                )

    def _check_container_dir(self, field: str, value: str, default: str) -> None:
        if not value.startswith("/"):
            raise ConfigurationError(field, value, "must be an absolute path", f"pass e.g. {default!r}")
        local_path = PurePosixPath(posixpath.normpath(value))
        base = PurePosixPath(contract.DEFAULT_BASE_DIR)
        if local_path == base or local_path in base.parents:
            raise ConfigurationError(
                field,
                value,
                "is /opt/ml itself or above it",
                f"pass a directory of its own, e.g. {default!r}",
            )
        if layout.below_opt_ml(value) is None and not self.executor.mounts_container_paths:
            raise ConfigurationError(
                field,
                value,
                "hosts run as processes on this machine, each with its own emulated /opt/ml tree; a "
                "path outside /opt/ml would be one directory shared by every host (and outside the job)",
                f"use a path under /opt/ml (e.g. {default!r}), or "
                "LocalSession(executor='docker'), which mounts each host's directory at that path",
            )

    def _knobs(self, spec: TrainingJobSpec) -> dict[str, str]:
        """The session's knobs for the host runtimes, less those the job's ``environment=`` sets."""
        given = spec.Environment or {}
        return {k: v for k, v in self.session.settings.host_environment().items() if k not in given}

    def settings(self, spec: TrainingJobSpec) -> dict[str, Any]:
        """How this machine runs ``spec``: resolved once at submit and logged by the agent."""
        ranks = self.session.processes_per_host or instance_ranks(spec.ResourceConfig.InstanceType)
        emulated = layout.emulated_gpus(spec.ResourceConfig.InstanceType, self.session.emulate_cuda)
        settings: dict[str, Any] = {
            "processes_per_host": max(1, int(ranks)),
            "stop_grace_seconds": float(self.session.stop_grace_seconds),
            "artifact_conflicts": self.session.artifact_conflicts,
            "install_requirements": self.session.install_requirements,
            "requirements_cache": str(Path(self.session.root) / REQUIREMENTS_CACHE_DIR)
            if self.executor.layered_requirements
            else None,
            "num_gpus": emulated["gpus"] if emulated else (0 if machine_gpu_count() == 0 else None),
            "emulate_cuda": emulated,
            "python": sys.executable,
            "s3_endpoint_url": None,
            "s3_region_name": None,
            "knobs": self._knobs(spec),
        }
        if _uses_s3(spec):
            meta = getattr(self.session.s3_client(), "meta", None)
            settings["s3_endpoint_url"] = getattr(meta, "endpoint_url", None)
            settings["s3_region_name"] = getattr(meta, "region_name", None)
        settings.update(self.executor.settings(spec))
        return settings

    def submit(self, spec: TrainingJobSpec) -> None:
        """Fill the (reserved) job directory and start its agent; returns once the agent process
        exists. Reserves the name first when the caller did not; on failure, releases it (a full
        job store raises :class:`~estimator.errors.NoSpaceLeftError` naming the path). Warns when
        the store has less free space than the code and the ``s3://`` inputs the job will copy."""
        self.check(spec)
        if spec.TrainingJobName not in self._reserved:
            self.reserve(spec)
        try:
            self._warn_when_short_of_space(spec)
            with no_space_errors(self.job_dir(spec.TrainingJobName).path, STORE_FULL_FIX):
                self._start(spec)
        except BaseException:
            self.release(spec)
            raise
        self._reserved.discard(spec.TrainingJobName)
        self.executor.submitted(self.job_dir(spec.TrainingJobName))

    def _warn_when_short_of_space(self, spec: TrainingJobSpec) -> None:
        """Each host extracts the code, and ``s3://`` File-mode channels are downloaded into the job
        directory: warn (the job would fail "No space left on device") when the store has less room
        than that."""
        needed, parts = 0, []
        submit = (spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY)
        with contextlib.suppress(ValueError, TypeError, OSError):
            code = file_uri_path(str(hp.decode_value(submit or '""')))
            size = code.stat().st_size * spec.ResourceConfig.InstanceCount
            needed += size
            parts.append(f"code {size / 2**20:.1f} MiB")
        downloaded = [
            c.DataSource.S3DataSource
            for c in spec.InputDataConfig or []
            if local_data.channel_mode(spec, c) == "File"
        ]  # FastFile and Pipe stream
        remote = [s.S3Uri for s in downloaded if s is not None and urlparse(s.S3Uri).scheme == "s3"]
        if remote:
            from botocore.exceptions import BotoCoreError, ClientError

            engine = TransferEngine(client_factory=self.session.s3_client, progress=False)
            with contextlib.suppress(BotoCoreError, ClientError, OSError):
                size = sum(obj.size for uri in remote for obj in engine.list(uri))
                needed += size
                parts.append(f"s3:// inputs {size / 2**20:.1f} MiB")
        free = shutil.disk_usage(self.session.root).free
        if free < needed:
            warnings.warn(
                f"the job store {self.session.root} has {free / 2**20:.1f} MiB free, less than job "
                f'{spec.TrainingJobName} copies there ({", ".join(parts)}): it will fail with "No space '
                f'left on device" unless space is freed. Fix: {STORE_FULL_FIX}',
                stacklevel=3,
            )

    def _start(self, spec: TrainingJobSpec) -> None:
        job = self.job_dir(spec.TrainingJobName)
        for log in (job.job_log, job.agent_log):  # before the agent (or sbatch) opens them
            job.open_log(log).close()
        write_json_atomic(job.spec_file, spec.to_request())
        settings = self.settings(spec)
        write_json_atomic(job.settings_file, settings)
        self.executor.plan_early_start(spec, settings, job)
        created = time.time()
        starting = {
            "Status": contract.SECONDARY_STARTING,
            "StartTime": created,
            "StatusMessage": "Launching requested emulated hosts",
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
        :mod:`estimator.backends.local.early_start` when the executor planned the hosts) and record
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
        try:
            write_json_atomic(
                job.agent_file, {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time()}
            )
        except BaseException:  # no one could see or stop this agent: it must not run
            proc.kill()
            proc.wait()
            raise

    # --- describe / logs / stop -------------------------------------------------------------

    def _agent_alive(self, job: JobDir) -> bool | None:
        """Whether the job's agent still runs (None: not started yet); an unreadable ``agent.json``
        raises :class:`~estimator.backends.local.store.DamagedRecordError`."""
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
        # smlaunch's addition, as Attempts: the launch plan each host resolved (runtime.launchers).
        plans = {
            name: host_report(contract.Paths(job.host_base(name)).output_dir / contract.TOPOLOGY_FILE)
            for name in layout.host_names(instance_count(description))
        }
        if any(plans.values()):
            description["HostTopology"] = {name: plan for name, plan in plans.items() if plan}
        return description

    def metric_records(self, job_name: str, metric_names: Sequence[str] | None = None) -> list[MetricRecord]:
        """Every value of the job's ``MetricDefinitions`` its hosts printed so far, with the time the
        agent read the line and the host that printed it (:mod:`estimator.backends.local.metrics`)."""
        records = read_metric_records(self._existing(job_name).logs_dir / METRICS_FILE)
        return [r for r in records if not metric_names or r.name in metric_names]

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Lines of the merged job log, each secondary-status transition among them where it
        happened (``submit`` and the agent write them there, :mod:`estimator.backends.status`,
        prefixed ``[smlaunch]``); with ``follow``, tail it until the job is terminal, then end with
        the training seconds and one closing line (``Completed in 33 s; model: <uri>``,
        ``Failed: <reason>``, ``Stopped by user``)."""
        for block in self.log_blocks(job_name, follow):
            yield from block

    def log_blocks(self, job_name: str, follow: bool = False) -> Iterator[list[str]]:
        """:meth:`log_lines` as they are read: up to 64 KiB of whole lines at a time."""
        job = self._existing(job_name)
        bars = TransferBars(job.progress_file) if follow else None
        checked = 0.0
        buffer = b""
        logged = 0  # status lines seen in the log: the transitions it has told
        ended = _EndWatch(job, self._agent_alive)
        with open(job.job_log, "rb") as handle:
            while True:
                if bars is not None and time.monotonic() - checked >= _PROGRESS_SECONDS:
                    checked = time.monotonic()
                    bars.update()
                chunk = handle.read(1 << 16)
                if not chunk:
                    if not follow:
                        break
                    if not ended():
                        time.sleep(_FOLLOW_SECONDS)
                        continue
                    # The agent closes the job log before it writes a terminal state: drain.
                    chunk = handle.read()
                    if not chunk:
                        break
                buffer += chunk
                end = buffer.rfind(b"\n") + 1
                if end:  # whole lines only, decoded together
                    text, buffer = buffer[: end - 1].decode("utf-8", errors="replace"), buffer[end:]
                    if f"[{LOCAL_SOURCE}] " in text:
                        logged += len(_STATUS_LINE.findall(text))
                    yield text.split("\n")
        if buffer:
            yield [buffer.decode("utf-8", errors="replace")]
        if bars is not None:
            bars.update(final=True)
            yield self._ending(job_name, logged)

    def _ending(self, job_name: str, logged: int) -> list[str]:
        """What follows a followed job's log: the transitions no agent logged (one that died: its
        job's end is the backend's), the training seconds, and the closing line."""
        description = self.describe(job_name)
        missed = description.get("SecondaryStatusTransitions", [])[logged:]
        return [f"[{LOCAL_SOURCE}] {transition_line(transition)}" for transition in missed] + summary_lines(
            description, LOCAL_SOURCE, billable_seconds=False
        )

    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Ask the agent to stop the job (SIGTERM to every host, SIGKILL after the grace period).

        ``reason="spot"`` emulates a spot interruption instead (managed-spot jobs only): the attempt
        is interrupted and the job restarts on fresh hosts (:mod:`estimator.backends.local.spot`).
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


class _EndWatch:
    """Whether a followed job has ended (terminal state, or its agent gone), cheap enough to ask every
    :data:`_FOLLOW_SECONDS`: ``state.json`` is re-read when a ``stat`` shows it replaced, and at
    least every :data:`_POLL_SECONDS` (a replacement a ``stat`` cannot tell apart); the agent's
    liveness is checked every :data:`_POLL_SECONDS`."""

    def __init__(self, job: JobDir, agent_alive: Callable[[JobDir], bool | None]) -> None:
        self._job = job
        self._agent_alive = agent_alive
        self._seen: tuple[int, int, int] | None = None
        self._looked_at = 0.0

    def __call__(self) -> bool:
        try:
            stat = os.stat(self._job.state_file)
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError:
            seen = None
        now = time.monotonic()
        if seen == self._seen and now - self._looked_at < _POLL_SECONDS:
            return False
        self._seen, self._looked_at = seen, now
        if JobState.of(self._job.read_state()).is_terminal:
            return True
        return self._agent_alive(self._job) is False


class TransferBars:
    """Draws the agent's large transfers (channel downloads, checkpoint uploads) in the process that
    follows the job: one :class:`runtime.progress.ProgressBar` per transfer published in
    ``progress.json`` (a widget in Jupyter, text in a terminal, nothing in a pipe), replaced by its
    summary line when it ends. A transfer that ended before the follower saw it is not drawn."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._id: str | None = None
        self._bar: ProgressBar | None = None
        self._shown = 0
        self._done_ids: set[str] = set()

    def update(self, final: bool = False) -> None:
        """Catch up with the file; with ``final`` (the job ended) close any bar left open."""
        try:
            state = json.loads(self._path.read_text())
        except (OSError, ValueError):
            state = None
        if state is not None and state.get("id") not in self._done_ids:
            if state["id"] != self._id:
                self._close()
                if state["closed"]:  # it ran and ended between two looks: nothing to draw
                    self._done_ids.add(state["id"])
                    return
                self._id, self._shown = state["id"], 0
                self._bar = ProgressBar(int(state["total"]), str(state["label"]), interactive_output())
            assert self._bar is not None
            self._bar(int(state["done"]) - self._shown)
            self._shown = int(state["done"])
            if state["closed"]:
                self._close(str(state.get("summary") or ""))
        if final:
            self._close()

    def _close(self, summary: str = "") -> None:
        if self._bar is None or self._id is None:
            return
        self._bar.close()
        if summary:
            self._bar.report(summary)
        self._done_ids.add(self._id)
        self._bar, self._id = None, None


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


def _require_writable_dir(field: str, value: str, path: Path) -> None:
    """Create ``path`` if needed and prove it writable with a probe file, or raise naming ``field``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".smlaunch-probe-"):
            pass
    except OSError as exc:
        raise ConfigurationError(
            field,
            value,
            f"not a writable directory ({exc.strerror or exc})",
            "pass a directory you can write to (file:///path/you/own) or an s3:// URI",
        ) from None


def _agent_environment() -> dict[str, str]:
    env = dict(os.environ)
    # The agent must import this very checkout even when it is not installed (tests, notebooks).
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
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
