"""The per-job supervisor of the local backend: ``python -m smlaunch.sdk.backends.emulated.agent <job dir>``.

Started detached (own session) by :meth:`LocalBackend.submit`, so the notebook returns at once and
the job survives the notebook; every handle talks to it through the files of the job directory
(:mod:`smlaunch.sdk.backends.emulated.state`). It is the only writer of ``state.json``.

One concept, kept in one module although it is over 500 lines: the job's state machine and its
failure policy, which must be read together to be trusted. Which condition ends an attempt, in
which order, is the trigger table of :mod:`smlaunch.sdk.backends.emulated.outcome`. What varies by
where hosts run lives in the executors; data, checkpoints, spot attempts, metrics and artifacts
live in their own modules.

What it does, in order: write every host's ``/opt/ml`` tree and channel views (SecondaryStatus
``Downloading``); have the job's executor start every host (``Training``; where a scheduler
places them, once it placed them all, ``Starting`` with its reason meanwhile: pods): one ``python -m
runtime`` per host as a local process (:mod:`smlaunch.sdk.backends.emulated.executors.process.executor`, the
default) or one container per host (:mod:`smlaunch.sdk.backends.emulated.executors.docker.executor`), chosen
by
``settings.json``'s ``executor.name``; copy every line the hosts print to ``logs/<host>.log`` and the
merged ``logs/job.log`` (prefixed ``[algo-N] `` unless the runtime already prefixed it); when the
hosts have ended, merge their model and output directories into ``model.tar.gz`` /
``output.tar.gz`` (``Uploading``; :mod:`smlaunch.sdk.backends.emulated.artifacts`); write the terminal
state (:class:`smlaunch.sdk.backends.emulated.state.JobState` documents the transitions). The agent owns
the job's state machine and policy; the executor only starts, signals and cleans up hosts
(:class:`smlaunch.sdk.backends.emulated.executors.base.Executor`). An executor may hand over the
first attempt's hosts already started, their trees already written
(:meth:`~smlaunch.sdk.backends.emulated.executors.base.Executor.adopt`: the process executor's early
start); the agent then does the rest in the same order, under the same policy.

Failure policy across hosts (one policy for every fault; times are bounds, not sleeps)
-------------------------------------------------------------------------------------
- **A host fails** (its runtime exits non-zero, or writes ``output/failure.json``): every other
  host runtime gets SIGTERM (the runtime forwards it to its ranks); after a short grace
  (:data:`.outcome.FAILURE_GRACE_SECONDS`, at most the stop grace) every process left in the job's
  process trees gets SIGKILL, so the whole job ends within 5 seconds. Status ``Failed``.
  ``FailureReason`` is the FIRST failure across hosts: the earliest ``time`` among the hosts'
  ``output/failure.json`` (falling back to the first runtime that exited non-zero and the tail of
  its log), naming host, rank, exit code and that rank's complete last traceback (else the tail of
  its stderr), never cut: the 1024-character limit applies to the wire form the host writes to
  ``output/failure`` for the platform, not to this description; ``ExitCode`` is that rank's exit
  code.
- **stop()** (and Ctrl-C in ``TrainingJob.wait``, which calls it; or SIGTERM/SIGINT to the agent):
  status ``Stopping``; SIGTERM to every host (user code may checkpoint), SIGKILL of what remains
  after ``stop_grace_seconds`` (default 120); status ``Stopped``.
- **A FastFile or Pipe channel fails** while the hosts run (an object vanished, a corrupt or
  non-gzip object in a Gzip channel): the script would wait for data that never comes, or see an
  epoch end early, so the job ends as for a failed host, ``FailureReason`` ``ClientError: Data
  download failed: <channel and cause>``.
- **A scheduler preempts a managed-spot job** (Slurm, ``--requeue``: it signals the agent and
  every host, then runs the agent again with ``SLURM_RESTART_COUNT`` set): a signal with no stop
  request (``stop()`` writes one before it signals) is an interruption, not a stop. The attempt
  ends ``Interrupted`` (hosts SIGTERMed, checkpoints synced) and the agent exits leaving the job
  ``InProgress``; its next run continues the job as the next attempt on fresh hosts, checkpoints
  restored, so ``describe()`` lists the attempts as for local spot runs and never says Stopped.
  The signals reach the agent and the hosts in no set order: hosts that ended "Stopped" by a signal
  the agent did not send hold the verdict up to ``PREEMPTION_HOLD_SECONDS`` for the agent's own
  (then ``Interrupted``; none: the host failure below, as on any other scheduler).
- **max_run** (``StoppingCondition.MaxRuntimeInSeconds``, counted from the hosts' start): the same
  SIGTERM / grace / SIGKILL; status ``Stopped``, SecondaryStatus ``MaxRuntimeExceeded``, and a
  FailureReason saying so.
- **The agent itself dies** (even SIGKILL; Linux; process executor: with Docker, the reaper that
  ``DockerExecutor.submitted`` started removes the containers): every host runtime was started with
  ``PR_SET_PDEATHSIG=SIGHUP`` against the agent: it SIGKILLs its ranks at once and sweeps what they
  left (daemons included: :mod:`smlaunch.runtime.supervision.containment`) before it exits; its ranks also
  have
  ``PR_SET_PDEATHSIG=SIGKILL`` against it. The agent is also a child subreaper, so ranks orphaned
  by a dying runtime are reparented to it and killed before it exits. Readers see the job
  ``Failed`` (the agent's pid is gone).
- **The job store fills up** (ENOSPC or a quota, on any write of the agent: logs, state, host
  trees, artifacts): the job ends as for a failed host, ``FailureReason`` ``ClientError: No space
  left on device: <the path that failed> (...)``. Every write of the agent survives a full disk
  (logs lines are dropped while it lasts; ``state.json`` keeps its last complete version), and the
  agent sets ``state.SPACE_RESERVE_BYTES`` aside before its hosts start, and frees it to write the
  terminal state.
- Artifacts are packaged whatever the outcome (a stopped job keeps what it saved, as on SageMaker).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import IO, Any

from smlaunch import contract
from smlaunch.contract.processes import become_subreaper, exit_code_of, line_chunks, pipe_reader
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.artifacts import package_artifacts
from smlaunch.sdk.backends.emulated.checkpoints import DirectorySync, host_syncs
from smlaunch.sdk.backends.emulated.data import JobData
from smlaunch.sdk.backends.emulated.executors import executor_class
from smlaunch.sdk.backends.emulated.executors.base import Executor, Host, LaunchContext, StartedHosts
from smlaunch.sdk.backends.emulated.job_settings import JobSettings
from smlaunch.sdk.backends.emulated.metrics import METRICS_FILE, MetricRecorder
from smlaunch.sdk.backends.emulated.outcome import (
    Fired,
    Outcome,
    Poll,
    Result,
    ended_on_their_own,
    first_trigger,
    preempted_after_end,
)
from smlaunch.sdk.backends.emulated.spot import INTERRUPT_FILE, Attempts, SpotFaults, spot_faults
from smlaunch.sdk.backends.emulated.state import STORE_FULL_FIX, JobDir, JobState, host_report
from smlaunch.sdk.backends.status import transition_line
from smlaunch.sdk.errors import NoSpaceLeftError, is_no_space
from smlaunch.sdk.request.spec import TrainingJobSpec

POLL_SECONDS = 0.05
"""How often the agent looks at stop requests, deadlines and failure files; a host's exit wakes it at once."""
PREEMPTION_HOLD_SECONDS = 5.0
"""How long a managed-spot job on a requeueing scheduler (Slurm) waits for the agent's own signal
when hosts ended "Stopped" by one the agent did not send, before it calls that a failure."""
LOG_TAIL_LINES = 20
_REASON_TAGS = ("AlgorithmError:", "ClientError:", "Framework Error:", "InternalServerError:", "Stopped:")

_MESSAGES = {
    contract.SECONDARY_DOWNLOADING: "Downloading input data",
    contract.SECONDARY_TRAINING: "Training in progress on the {hosts}",
    contract.SECONDARY_STOPPING: "Stopping the training job",
    contract.SECONDARY_UPLOADING: "Uploading generated training model",
    contract.SECONDARY_COMPLETED: "Training job completed",
    contract.SECONDARY_FAILED: "Training job failed",
    contract.SECONDARY_STOPPED: "Training job stopped",
    contract.SECONDARY_MAX_RUNTIME_EXCEEDED: "Job stopped because it exceeded MaxRuntimeInSeconds",
}


class Agent:
    """Runs one local job to a terminal state. See the module docstring for the policy."""

    def __init__(self, job: JobDir, executor: Executor | None = None) -> None:
        self.job = job
        self._adopted: StartedHosts | None = executor.adopt() if executor is not None else None
        """The first attempt's hosts when ``executor`` started them before the agent ran
        (:meth:`Executor.adopt`); None once that attempt is launched."""
        # Read before any host of the job ran (by whoever started them, or here), and never again:
        # what the agent runs the job from is what submit wrote, whatever a rank may write later.
        record = self._adopted.record if self._adopted is not None else {}
        self.spec = TrainingJobSpec.model_validate(record.get("spec") or job.read_json(job.spec_file))
        self.settings = JobSettings.model_validate_json(
            record.get("settings") or job.settings_file.read_bytes()
        )
        self.state = record.get("state") or job.read_state()
        self.executor = executor or executor_class(self.settings.executor.name).for_agent(self.settings)
        """Starts, signals and cleans up the hosts (:mod:`smlaunch.sdk.backends.emulated.executors`)."""
        names = layout.host_names(self.spec.ResourceConfig.InstanceCount)
        self.hosts = [Host(name, i, job.host_base(name)) for i, name in enumerate(names)]
        self.grace = self.settings.stop_grace_seconds
        self._log_lock = threading.Lock()
        self._host_ended = threading.Event()
        """Set when a host's process ends, so that the supervision loop reacts without a poll's delay."""
        self._job_log: IO[bytes] = job.open_log(job.job_log)
        self._signalled = False
        self._s3: Any = None
        self._fingerprints: dict[str, list[int]] = {}
        self._data: JobData | None = None
        self._syncs: list[DirectorySync] = []
        self._attempts = Attempts()
        self._spot = SpotFaults(
            spot_faults(layout.job_environment(self.spec, self.settings.knobs)), job.path, self.say
        )
        self._transfer: TransferEngine | None = None
        definitions = [d.model_dump() for d in self.spec.AlgorithmSpecification.MetricDefinitions or []]
        self._metrics = MetricRecorder(definitions, job.logs_dir / METRICS_FILE)
        self._no_space: str | None = None
        """The FailureReason once a write of the agent found the job store full."""
        self._placing = False
        """Between launching an attempt's hosts and recording ``Training`` (:meth:`_placed`)."""
        self._waiting_for = ""
        """The scheduler's reason last recorded while the hosts wait to be placed."""

    # --- logging and state --------------------------------------------------------------------

    def say(self, message: str) -> None:
        """A line from smlaunch itself, in the job log and the agent log."""
        lines = [f"[smlaunch] {line}" for line in message.splitlines() or [""]]
        self._write(("\n".join(lines) + "\n").encode("utf-8", errors="replace"), None)
        with contextlib.suppress(OSError):  # stdout is logs/agent.log: on the same, maybe full, disk
            print(message, flush=True)

    def _write(self, data: bytes, host_log: IO[bytes] | None) -> None:
        """Append whole lines (``\\n``-terminated) to the host's log (if any) and the job log: one
        write each."""
        with self._log_lock:
            try:
                if host_log is not None:
                    host_log.write(data)
                    host_log.flush()
                self._job_log.write(data)
                self._job_log.flush()
            except OSError as error:  # the lines are lost; the job goes on (or ends, if the disk is full)
                self._write_failed(error, self.job.logs_dir)

    def _write_failed(self, error: OSError, path: Path) -> str | None:
        """Note a failed write; the first one that found the store full becomes the job's reason."""
        if is_no_space(error) and self._no_space is None:
            self._no_space = f"ClientError: {NoSpaceLeftError(error.filename or path, STORE_FULL_FIX)}"
        return self._no_space if is_no_space(error) else None

    def _probe_space(self) -> None:
        """Write one page into the job directory: proof that the store still has room, or the reason."""
        probe = self.job.path / ".space-probe"
        try:
            with open(probe, "wb") as handle:
                handle.write(bytes(4096))
        except OSError as error:  # named by the job directory, not by the probe's own name
            self._write_failed(OSError(error.errno, error.strerror), self.job.path)
        finally:
            probe.unlink(missing_ok=True)

    def _set_space_aside(self) -> None:
        try:
            self.job.set_space_aside()
        except OSError as error:
            self._write_failed(error, self.job.space_reserve)

    def transition(
        self, secondary: str, status: str | None = None, message: str | None = None, **fields: Any
    ) -> None:
        """Record a new SecondaryStatus (and TrainingJobStatus, a :class:`JobState` value) in
        ``state.json``, with ``fields`` (FailureReason, ...); ``message``: its StatusMessage
        (default: SageMaker's words for it).

        Its status line goes into the job log first, so that a follower prints it in order with the
        hosts' lines (:mod:`smlaunch.sdk.backends.status`); before a terminal state the job log is
        closed: what a follower drains once it sees that state is all there is."""
        at = time.time()
        terminal = status is not None and JobState(status).is_terminal
        transitions = self.state.setdefault("SecondaryStatusTransitions", [])
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1]["EndTime"] = at
        if message is None:
            message = _MESSAGES.get(secondary, "").format(hosts=self.executor.hosts_called)
        entry: dict[str, Any] = {
            "Status": secondary,
            "StartTime": at,
            "StatusMessage": message,
        }
        if terminal:
            entry["EndTime"] = at
        transitions.append(entry)
        if not self._job_log.closed:
            self.say(transition_line(entry))
        if terminal:
            with contextlib.suppress(OSError):  # a full disk: the buffered tail is lost
                self._job_log.close()
        self.state["SecondaryStatus"] = secondary
        if status is not None:
            self.state["TrainingJobStatus"] = status
        self.state["LastModifiedTime"] = at
        self.state.update(fields)
        if terminal:
            self.job.space_reserve.unlink(missing_ok=True)  # room for the last word, even on a full disk
        try:
            self.job.write_state(self.state)
        except OSError as error:
            # state.json keeps its last complete version; the terminal state must not be lost.
            if self._write_failed(error, self.job.state_file) is None or terminal:
                raise

    # --- the job ------------------------------------------------------------------------------

    def run(self) -> int:
        if JobState.of(self.state).is_terminal:  # a scheduler requeued a job that had already ended
            self.say(
                f"Job {self.spec.TrainingJobName} already ended {self.state['TrainingJobStatus']}: "
                "nothing to run"
            )
            return 0
        become_subreaper()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if self._adopted is not None and self._adopted.signals:
            self._signalled = True
        self._set_space_aside()
        try:
            result = self._run()
        except Exception as exc:  # the agent's own bug or an I/O error: never leave InProgress behind
            self.say(traceback.format_exc())
            self.executor.kill_everything(self.context())
            reason = self._no_space_reason(exc, self.job.path) or (
                f"InternalServerError: {type(exc).__name__}: {exc}"
            )
            result = Result(Outcome.FAILED, {"FailureReason": reason})
        if self._data is not None:
            self._data.close()  # whatever the path: no FastFile mount outlives the job
        self.executor.close(self.context())
        if self.settings.requirements_cache:  # a killed host left the job's own environment
            from smlaunch.runtime.requirements_cache import remove_job_environment

            remove_job_environment(self.settings.requirements_cache, self.spec.TrainingJobName)
        ended = time.time()
        start = self.state.get("TrainingStartTime", ended)
        seconds = max(0, round(ended - start))
        times: dict[str, Any] = {"TrainingTimeInSeconds": seconds, "BillableTimeInSeconds": seconds}
        times.update(self._attempts.describe_fields(ended, spot=bool(self.spec.EnableManagedSpotTraining)))
        secondary = result.outcome.secondary
        if result.outcome is Outcome.INTERRUPTED:  # preempted: the scheduler runs the agent again
            self.say(f"Job {self.spec.TrainingJobName} preempted, {seconds} s in; requeued")
            self.state["Attempts"] = times["Attempts"]
            if self.state.get("SecondaryStatus") == secondary:
                self.job.write_state(self.state)
            else:
                self.transition(secondary)
            with contextlib.suppress(OSError):
                self._job_log.close()
            return 0
        # The follower's closing line says how it ended (smlaunch.sdk.backends.status.closing_line).
        self.transition(secondary, result.outcome.status, TrainingEndTime=ended, **times, **result.fields)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True

    def _stop_requested(self) -> bool:
        return self.job.stop_file.exists() or (self._signalled and not self._preempted())

    def _preempted(self) -> bool:
        """A signal no ``stop()`` asked for, to a managed-spot job its scheduler requeues."""
        return (
            self._signalled
            and self.executor.requeues
            and bool(self.spec.EnableManagedSpotTraining)
            and not self.job.stop_file.exists()
        )

    def _may_be_preempted(self, failed: list[Host]) -> bool:
        """Whether ``failed`` hosts may be the first sign of a preemption the agent has not heard of
        yet: a scheduler that requeues signals every step and the agent at once, in no set order, so
        a managed-spot host can end "Stopped" by that signal before the agent's own arrives."""
        if self._signalled or not (self.executor.requeues and self.spec.EnableManagedSpotTraining):
            return False
        return not self.job.stop_file.exists() and all(_stopped_from_outside(h) for h in failed)

    def _resume(self) -> bool:
        """In a run of the agent that continues a requeued job: take its attempts over (ending
        the last one if the previous run was killed first) and start the next on fresh hosts."""
        note = self.executor.requeued()
        if note is None or "TrainingStartTime" not in self.state:
            return False
        self.say(note)
        self._attempts = Attempts(
            started=float(self.state["TrainingStartTime"]),
            records=[dict(r) for r in self.state.get("Attempts", [])],
        )
        self._attempts.end(contract.SECONDARY_INTERRUPTED, at=float(self.state["LastModifiedTime"]))
        self.state["Attempts"] = self._attempts.records
        self._fresh_hosts()
        return True

    def _run(self) -> Result:
        if not self._resume():
            started = self._adopted.started if self._adopted is not None else time.time()
            self.state["TrainingStartTime"] = self._attempts.started = started
            self.transition(contract.SECONDARY_DOWNLOADING)
        while True:  # one pass per attempt; a spot interruption starts another on fresh hosts
            try:
                self._prepare()
            except Exception as exc:
                self.say(f"ERROR preparing the hosts: {type(exc).__name__}: {exc}")
                if self._adopted is not None:  # started before: they must not outlive the job
                    self.executor.kill_everything(self.context())
                reason = self._no_space_reason(exc, self.job.hosts_dir) or (
                    f"ClientError: preparing the hosts failed: {type(exc).__name__}: {exc}"
                )
                return Result(Outcome.FAILED, {"FailureReason": reason})
            # Adopted hosts already run: a stop or preemption now is for _supervise to apply.
            if self._adopted is None and self._stop_requested():
                return Result(Outcome.STOPPED)
            if self._adopted is None and self._preempted():
                return Result(Outcome.INTERRUPTED)
            self._attempts.begin()
            self.state["Attempts"] = self._attempts.records  # a requeued run finds it if this one is killed
            self._launch()
            self._adopted = None
            self._spot.arm(len(self._attempts.records))
            for sync in self._syncs:
                sync.start()
            result = self._supervise()
            self._spot.disarm()
            if self._data is not None:
                self._data.close()
            for sync in self._syncs:
                sync.stop()
            self._attempts.end(result.outcome.secondary)
            if result.outcome is not Outcome.INTERRUPTED or self._preempted():
                break
            self._fresh_hosts()
        if result.outcome is Outcome.INTERRUPTED:
            return result
        self._check_originals()
        self.transition(contract.SECONDARY_UPLOADING)
        try:
            uris = package_artifacts(
                {h.name: h.base for h in self.hosts},
                self.spec.TrainingJobName,
                self.spec.OutputDataConfig.S3OutputPath,
                self.job.artifacts_dir,
                self._s3_client,
                self.say,
                compress=self.spec.OutputDataConfig.CompressionType != "NONE",
                conflicts=self.settings.artifact_conflicts,
            )
        except Exception as exc:
            self.say(f"ERROR packaging artifacts: {type(exc).__name__}: {exc}")
            if result.outcome is Outcome.COMPLETED:
                reason = self._no_space_reason(exc, self.job.artifacts_dir) or (
                    f"ClientError: packaging the model artifacts failed: {exc}"
                )
                return Result(Outcome.FAILED, {"FailureReason": reason})
            return result
        return result.with_fields(
            ModelArtifacts={"S3ModelArtifacts": uris["model"]},
            OutputArtifacts={"S3OutputArtifacts": uris["output"]},
        )

    def _no_space_reason(self, error: BaseException, path: Path) -> str | None:
        """The FailureReason when ``error`` (or what it wraps, or an earlier write) found the job
        store full."""
        cause: BaseException | None = error
        for _ in range(8):  # along the chain of causes (bounded: a chain may loop)
            if cause is None or is_no_space(cause):
                break
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, OSError) and is_no_space(cause):
            self._write_failed(cause, path)
        return self._no_space

    def _engine(self) -> TransferEngine:
        if self._transfer is None:
            self._transfer = TransferEngine(
                client_factory=self._s3_client, progress=False, progress_file=self.job.progress_file
            )
        return self._transfer

    def _s3_client(self) -> Any:
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client(
                "s3",
                endpoint_url=self.settings.s3_endpoint_url,
                region_name=self.settings.s3_region_name,
            )
        return self._s3

    def _prepare(self) -> None:
        names = [h.name for h in self.hosts]
        for host in self.hosts:
            if self._adopted is None:  # else they were written before the hosts started
                layout.write_host_tree(self.spec, host.base, host.name, names)
        # Channels (File / FastFile / Pipe, sharding, manifests): smlaunch.sdk.backends.emulated.data.
        # FastFile channels are FUSE mounts in the host trees, made here, before any host starts:
        # a host's processes see them (a private mount namespace made later copies them).
        self._data = JobData(
            self.spec,
            [(h.index, h.paths) for h in self.hosts],
            self.job.s3_cache_dir,
            self._engine(),
            self.say,
            hand_off=self.executor.hosts_deliver_streams,
        )
        self._data.stage()
        self._fingerprints = layout.fingerprint_files(set(self._data.originals))
        # Checkpoints restored (and, with intermediate output, synced while training):
        # smlaunch.sdk.backends.emulated.checkpoints.
        self._syncs = host_syncs(self.spec, {h.name: h.paths for h in self.hosts}, self._engine(), self.say)
        self.executor.prepare(self.context())

    def _fresh_hosts(self) -> None:
        """After a spot interruption: keep the old trees aside, start the next attempt on new hosts."""
        done = len(self._attempts.records)
        aside = self.job.path / f"hosts-attempt-{done}"
        if self.job.hosts_dir.exists() and aside.exists():  # preempted while staging: no host ran there
            shutil.rmtree(self.job.hosts_dir)
        elif self.job.hosts_dir.exists():
            self.job.hosts_dir.rename(aside)
        self.hosts = [Host(h.name, h.index, self.job.host_base(h.name)) for h in self.hosts]
        self.say(f"Spot interruption: attempt {done} ended; starting attempt {done + 1} on fresh hosts")
        self.transition(contract.SECONDARY_STARTING)
        self.transition(contract.SECONDARY_DOWNLOADING)

    def _interrupt_requested(self) -> bool:
        marker = self.job.path / INTERRUPT_FILE
        if not marker.exists():
            return False
        marker.unlink(missing_ok=True)
        return True

    def context(self) -> LaunchContext:
        """What the executor is told about this attempt."""
        return LaunchContext(self.spec, self.settings, self.job, self.hosts, self.grace, self.say)

    def _launch(self) -> None:
        context = self.context()
        self.executor.launch(context)
        self._placing, self._waiting_for = True, ""
        # Before a host's output is read: its first line comes after the one saying training began
        # (unless a scheduler still holds a host back: then that one, once it is placed).
        self._placed(context)
        for host in self.hosts:
            host.pump = threading.Thread(
                target=self._pump, args=(host,), name=f"log-{host.name}", daemon=True
            )
            host.pump.start()
            threading.Thread(target=self._await_host, args=(host,), daemon=True).start()

    def _placed(self, context: LaunchContext) -> None:
        """``Training`` once the executor placed every host of the attempt (:meth:`Executor.waiting`);
        until then ``Starting`` with its scheduler's reason, kept current in that one transition."""
        if not self._placing:
            return
        waiting = self.executor.waiting(context)
        if waiting is None:
            self._placing = False
            self.transition(contract.SECONDARY_TRAINING)
        elif waiting and waiting != self._waiting_for:
            self._waiting_for = waiting
            transitions = self.state.get("SecondaryStatusTransitions") or []
            if self.state.get("SecondaryStatus") == contract.SECONDARY_STARTING and transitions:
                transitions[-1]["StatusMessage"] = waiting  # another reason, the same wait
                self.job.write_state(self.state)
            else:
                self.transition(contract.SECONDARY_STARTING, message=waiting)

    def _await_host(self, host: Host) -> None:
        """Wake the supervision loop the moment ``host`` ends (it still reads the exit code itself)."""
        assert host.proc is not None
        with contextlib.suppress(Exception):  # the loop's own poll still sees the end
            host.proc.wait()
        self._host_ended.set()

    def _pump(self, host: Host) -> None:
        assert host.proc is not None and host.proc.stdout is not None
        # A rank line may name another host: one mpirun on the master serves every emulated host.
        own = (f"[{host.name}]", *(f"[{h.name}/" for h in self.hosts))
        ranks = f"[{host.name}/".encode()
        source = host.proc.stdout
        # A pipe is read in large chunks; a container's log stream (a LineSource) by line; output
        # already read for the agent (a ChunkSource: hosts started before it ran) as it came.
        if hasattr(source, "fileno"):
            read = pipe_reader(source.fileno())
        elif hasattr(source, "readline"):
            read = source.readline
        else:
            read = source.read
        path = self.job.host_log(host.name)
        try:
            host_log: IO[bytes] | None = self.job.open_log(path)
        except OSError as error:  # a full store: drain the host anyway, or its ranks would block
            self._write_failed(error, path)
            host_log = None
        with host_log or contextlib.nullcontext():
            for block in line_chunks(read):
                lines: list[str] | None = None
                # Usually every line is already the runtime's "[algo-N/rank R] ...": passed on as is.
                if not (block.startswith(ranks) and block.count(b"\n" + ranks) == block.count(b"\n") - 1):
                    lines = [
                        text if text.startswith(own) else f"[{host.name}] {text}"
                        for text in block[:-1].decode("utf-8").split("\n")
                    ]
                    block = ("\n".join(lines) + "\n").encode("utf-8")
                self._write(block, host_log)
                if self._spot.counting or self._metrics.active:
                    self._on_lines(lines or block[:-1].decode("utf-8").split("\n"))

    def _on_lines(self, lines: list[str]) -> None:
        """A host's lines, for the spot faults that count them and for the job's metrics."""
        for text in lines:
            self._spot.on_line(text)
        try:
            self._metrics.on_lines(lines)
        except OSError as error:  # keep draining the host's output whatever happens
            self._write_failed(error, self.job.logs_dir / METRICS_FILE)

    def _supervise(self) -> Result:
        """Poll the hosts until all ended, applying the failure policy (module docstring)."""
        context = self.context()
        try:
            return self._supervise_hosts(context)
        finally:
            self.executor.attempt_ended(context)

    def _supervise_hosts(self, context: LaunchContext) -> Result:
        """Poll -> first trigger (:data:`.outcome.TRIGGERS`) -> terminate(grace) -> wait."""
        max_run = self.spec.StoppingCondition.MaxRuntimeInSeconds
        # max_run counts training time over every attempt; max_wait (spot) counts from the job's start.
        deadline = time.monotonic() + max_run - self._attempts.running_seconds
        max_wait = self.spec.StoppingCondition.MaxWaitTimeInSeconds
        wait_deadline = (
            time.monotonic() + max_wait - (time.time() - self._attempts.started) if max_wait else float("inf")
        )
        fired: Fired | None = None
        kill_at: float | None = None
        hold_until: float | None = None
        while True:
            self._host_ended.clear()  # before polling: an exit after this wakes the wait below
            now = time.monotonic()
            running = self._poll_hosts()
            self.executor.watch(context)
            if fired is None:
                self._placed(context)
            failed = [h for h in self.hosts if (h.exit_code or 0) != 0 or h.failure_details.exists()]
            if fired is None and failed and self._may_be_preempted(failed):
                hold_until = hold_until or now + PREEMPTION_HOLD_SECONDS
                if now < hold_until:  # the scheduler's signal to the agent may still be on its way
                    time.sleep(POLL_SECONDS)
                    continue
            if not running:
                if fired is None:
                    fired = preempted_after_end(tuple(h.name for h in failed), self._preempted)
                    if fired is not None:
                        self._announce(fired)
                break
            if fired is None:
                fired = first_trigger(
                    Poll(
                        now=now,
                        running=tuple(h.name for h in running),
                        failed=tuple(h.name for h in failed),
                        data_error=self._data.errors[0] if self._data and self._data.errors else None,
                        no_space=self._no_space,
                        grace=self.grace,
                        run_deadline=deadline,
                        max_run=max_run,
                        wait_deadline=wait_deadline,
                        max_wait=max_wait,
                        preempted=self._preempted,
                        stop_requested=self._stop_requested,
                        interrupt_requested=self._interrupt_requested,
                    )
                )
                if fired is not None:
                    self._announce(fired)
                    kill_at = now + self._terminate(context, running, fired.grace)
            if kill_at is not None and now >= kill_at:
                self.say("Grace period over: SIGKILL to every remaining process of the job")
                self.executor.kill_everything(context)
                kill_at = None
            self._host_ended.wait(POLL_SECONDS)
        # Orphaned ranks (their runtime died first) were reparented to us: none may outlive the job.
        self.executor.kill_everything(context)
        for host in self.hosts:
            if host.pump is not None:
                host.pump.join(timeout=10)
        result = fired.result if fired is not None else ended_on_their_own([h.exit_code for h in self.hosts])
        if result.needs_cause:
            cause = self.executor.root_cause(context) or self._root_cause()
            self._probe_space()  # a rank may have died of a full disk the agent's own writes missed
            if self._no_space is not None:  # then the disk is the cause; the rank's words follow
                cause["FailureReason"] = f"{self._no_space}\n{cause['FailureReason']}"
            return Result(Outcome.FAILED, cause)
        return result

    def _poll_hosts(self) -> list[Host]:
        """The hosts still running; each that ended since the last poll gets its exit code."""
        running = []
        for host in self.hosts:
            assert host.proc is not None
            if host.exit_code is None:
                code = host.proc.poll()
                if code is None:
                    running.append(host)
                else:
                    host.exit_code, host.exited_at = exit_code_of(code), time.time()
        return running

    def _announce(self, fired: Fired) -> None:
        """Say what a trigger decided and record the status it takes while the hosts end."""
        if fired.message is not None:
            self.say(fired.message)
        if fired.outcome.announced is not None:
            self.transition(*fired.outcome.announced)

    def _terminate(self, context: LaunchContext, running: list[Host], grace: float) -> float:
        self.executor.signal(context, running, signal.SIGTERM)
        return grace

    def _root_cause(self) -> dict[str, Any]:
        """The first failure across hosts: earliest failure.json, else the first non-zero exit."""
        details: list[dict[str, Any]] = []
        for host in self.hosts:
            data = host_report(host.failure_details)
            if data is not None and "time" in data:
                data.setdefault("host", host.name)
                details.append(data)
        # Hosts we SIGTERMed report kind "stopped": a consequence, never the root cause. A host that
        # died without a word (SIGKILLed, like a vanished instance) is a cause that wrote nothing.
        causes = [d for d in details if d.get("kind") != "stopped"]
        silent = [h for h in self.hosts if h.exit_code not in (0, None) and not h.failure_details.exists()]
        if not causes and not silent:
            causes = details
        if causes:
            first = min(causes, key=lambda d: float(d["time"]))
            failed_host, rank, code = first.get("host"), first.get("rank"), first.get("exit_code")
            reason = str(first.get("reason") or "")
            where = f"{failed_host}" + (f"/rank {rank}" if rank is not None else "")
            if str(failed_host) not in reason or (rank is not None and f"rank {rank}" not in reason):
                reason = f"{where} exited with code {code}: {reason}"
        else:
            exited = silent or [h for h in self.hosts if h.exit_code not in (0, None)]
            first_host = min(exited, key=lambda h: h.exited_at or 0.0)
            code = first_host.exit_code
            tail = _tail(self.job.host_log(first_host.name), LOG_TAIL_LINES)
            reason = f"{first_host.name} runtime exited with code {code}. Last lines:\n{tail}"
        if not reason.startswith(_REASON_TAGS):
            reason = f"AlgorithmError: {reason}"
        return {"FailureReason": reason, "ExitCode": code}

    def _check_originals(self) -> None:
        for path in layout.changed_files(self._fingerprints):
            self.say(
                f"WARNING: input file {path} changed during the job (written through its channel "
                "view); channel data should be treated as read-only"
            )


def _stopped_from_outside(host: Host) -> bool:
    """The host ended on a signal (it says "stopped", or it died by one without a word)."""
    details = host_report(host.failure_details)
    if details is None:
        return host.exit_code is not None and host.exit_code > 128
    return details.get("kind") == "stopped"


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m smlaunch.sdk.backends.emulated.agent <job dir>", file=sys.stderr)
        return 2
    return Agent(JobDir(Path(args[0]))).run()


if __name__ == "__main__":
    sys.exit(main())
