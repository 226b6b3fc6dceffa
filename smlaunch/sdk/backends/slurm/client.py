"""Slurm's commands, behind one small class: the only place smlaunch talks to a Slurm cluster.

:class:`SlurmClient` runs ``sbatch --parsable``, ``squeue``, ``sinfo``, ``scontrol show hostnames``
/ ``show config``, ``sacct`` (only where the cluster keeps accounting) and ``scancel`` through an
injected ``runner`` (tests pass recorded outputs; the default runs the real commands), and parses
their output strictly: a line it does not understand raises :class:`SlurmCommandError` naming the
command and the line, never a guess. A command missing from ``PATH`` raises a
:class:`~smlaunch.sdk.errors.ConfigurationError` saying which package provides it; a command that
refuses (non-zero exit) raises :class:`SlurmCommandError` with its ``stderr``.

Formats are requested explicitly (``--format``, ``-P`` for ``sacct``), with ``|`` as separator:
Slurm never puts ``|`` in states, reasons, node lists or partition names.

Only subprocesses here; no state and no files.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from smlaunch.sdk.errors import ConfigurationError, SmlaunchError

Runner = Callable[
    [Sequence[str], "str | None", "Mapping[str, str] | None"], "subprocess.CompletedProcess[str]"
]
"""Runs ``argv`` with ``stdin`` text (or none) in environment ``env`` (``None``: this process's) and
returns the completed process (text output)."""

COMMAND_TIMEOUT_SECONDS = 60.0
PENDING, RUNNING = "PENDING", "RUNNING"
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT",
})  # fmt: skip
"""Job states after which Slurm runs nothing more of the job (``squeue(1)``, JOB STATE CODES)."""
_ACTIVE_STATES = frozenset({
    "CONFIGURING", "COMPLETING", "PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
    "RESIZING", "RESV_DEL_HOLD", "REVOKED", "SIGNALING", "STAGE_OUT", "STOPPED", "SUSPENDED",
})  # fmt: skip
_KNOWN_STATES = TERMINAL_STATES | _ACTIVE_STATES
_GONE_JOB = ("Invalid job id specified", "already completing or completed")
"""What the commands print about a job the controller has forgotten, or one that has ended."""


class SlurmCommandError(SmlaunchError):
    """A Slurm command refused (non-zero exit) or printed what smlaunch cannot parse."""

    def __init__(self, argv: Sequence[str], problem: str) -> None:
        self.argv = list(argv)
        self.problem = problem
        super().__init__(f"`{' '.join(self.argv)}` {problem}")


class SlurmJob(BaseModel):
    """One job as Slurm reports it: ``state`` is a JOB STATE CODE (``PENDING``, ``TIMEOUT``, ...),
    ``reason`` why it waits or ended (``Resources``, ``Priority``, ``None``), ``nodes`` its node
    list in Slurm's compressed form (``node[1-2]``; empty while pending)."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    state: str
    reason: str = "None"
    nodes: str = ""
    exit_code: str | None = None
    """``<code>:<signal>`` from accounting, when known."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class Partition(BaseModel):
    """A partition as ``sinfo`` reports it: its generic resources (``gpu:8``) and node count."""

    model_config = ConfigDict(frozen=True)

    name: str
    available: str
    gres: tuple[str, ...]
    nodes: int

    @property
    def has_gpus(self) -> bool:
        return any(g == "gpu" or g.startswith("gpu:") for g in self.gres)


def run_command(
    argv: Sequence[str], stdin: str | None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The default runner: the real command, its output captured as text, bounded in time."""
    return subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        env=None if env is None else dict(env),
    )


def _fields(argv: Sequence[str], line: str, count: int) -> list[str]:
    parts = line.split("|")
    if len(parts) != count:
        raise SlurmCommandError(argv, f"printed {line!r}, expected {count} '|'-separated fields")
    return [part.strip() for part in parts]


def _state(argv: Sequence[str], text: str) -> str:
    # sacct prints "CANCELLED by 0"; squeue/sacct may add a "+" to states of requeued jobs.
    state = text.split(" ", 1)[0].rstrip("+")
    if state not in _KNOWN_STATES:
        raise SlurmCommandError(argv, f"reported an unknown job state {text!r}")
    return state


class SlurmClient:
    """Slurm's commands for one cluster (the one ``SLURM_CONF`` or the node's configuration names).

    ``runner`` runs a command (default :func:`run_command`); tests inject one replaying recorded
    outputs. ``commands`` maps command names to the executables to run (default: their names, found
    on ``PATH``), e.g. ``{"sbatch": "/opt/slurm/bin/sbatch"}``.
    """

    def __init__(self, runner: Runner | None = None, commands: dict[str, str] | None = None) -> None:
        self._runner = runner or run_command
        self._commands = dict(commands or {})
        self._accounting: bool | None = None

    def run(
        self, name: str, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """Run Slurm command ``name`` with ``args`` (in ``env``, default this process's environment);
        its stdout. Raises when it is missing or exits non-zero."""
        out = self._call(name, args, stdin, env, unknown_job_ok=False)
        assert out is not None
        return out

    def query(self, name: str, *args: str) -> str | None:
        """As :meth:`run`, but ``None`` where the command says the job is unknown (the controller
        has forgotten it) or has ended."""
        return self._call(name, args, None, None, unknown_job_ok=True)

    def _call(
        self,
        name: str,
        args: Sequence[str],
        stdin: str | None,
        env: Mapping[str, str] | None,
        unknown_job_ok: bool,
    ) -> str | None:
        argv = [self._commands.get(name, name), *args]
        try:
            done = self._runner(argv, stdin, env)
        except FileNotFoundError:
            raise ConfigurationError(
                "sagemaker_session",
                "SlurmSession",
                f"the Slurm command {name!r} is not installed here (not on PATH)",
                "run on a login node of the cluster, or install Slurm's client commands (Debian/Ubuntu: "
                "apt-get install slurm-client; with the configuration and MUNGE key of the cluster)",
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(
                argv, f"did not answer within {COMMAND_TIMEOUT_SECONDS:g} s (is slurmctld reachable?)"
            ) from None
        if done.returncode != 0:
            if unknown_job_ok and any(text in (done.stderr or "") for text in _GONE_JOB):
                return None
            raise SlurmCommandError(
                argv, f"failed with exit code {done.returncode}: {(done.stderr or done.stdout or '').strip()}"
            )
        return done.stdout

    # --- submission and control -----------------------------------------------------------------

    def submit(self, script: str, arguments: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """``sbatch --parsable <arguments>`` with ``script`` on stdin, in ``env`` (which the job
        inherits: ``--export=ALL``); the new job's id."""
        argv = ["sbatch", "--parsable", *arguments]
        out = self.run("sbatch", "--parsable", *arguments, stdin=script, env=env)
        lines = [line for line in out.splitlines() if line.strip()]
        if len(lines) != 1:
            raise SlurmCommandError(argv, f"printed {lines!r}, expected one line '<job id>[;<cluster>]'")
        job_id = lines[0].split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise SlurmCommandError(argv, f"printed {lines[0]!r}, expected '<job id>[;<cluster>]'")
        return job_id

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        """``scancel``: end the job (or, with ``signal``, only send it that signal; with ``batch``,
        to the batch script only). A job that has already ended is not an error."""
        args = [*([f"--signal={signal}"] if signal else []), *(["--batch"] if batch else []), job_id]
        self.query("scancel", *args)

    # --- jobs -----------------------------------------------------------------------------------

    def job(self, job_id: str) -> SlurmJob | None:
        """The job as the controller knows it (``squeue --states=all``), from accounting once the
        controller forgot it (``sacct``, where the cluster keeps accounting), else ``None``."""
        args = ["--noheader", f"--jobs={job_id}", "--states=all", "--format=%i|%T|%r|%N"]
        argv = ["squeue", *args]
        for line in (self.query("squeue", *args) or "").splitlines():
            if not line.strip():
                continue
            jid, state, reason, nodes = _fields(argv, line, 4)
            if jid == job_id:
                return SlurmJob(job_id=jid, state=_state(argv, state), reason=reason, nodes=nodes)
        return self._accounted(job_id)

    def accounting_enabled(self) -> bool:
        """Whether the cluster keeps job accounting (``AccountingStorageType`` is not ``none``)."""
        if self._accounting is None:
            argv = ["scontrol", "show", "config"]
            for line in self.run("scontrol", "show", "config").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() == "AccountingStorageType":
                    self._accounting = value.strip() != "accounting_storage/none"
                    break
            else:
                raise SlurmCommandError(argv, "printed no AccountingStorageType")
        return self._accounting

    def _accounted(self, job_id: str) -> SlurmJob | None:
        if not self.accounting_enabled():
            return None
        args = [
            "--noheader",
            "--parsable2",
            "--allocations",
            f"--jobs={job_id}",
            "--format=JobID,State,Reason,NodeList,ExitCode",
        ]
        argv = ["sacct", *args]
        for line in self.run("sacct", *args).splitlines():
            if not line.strip():
                continue
            jid, state, reason, nodes, exit_code = _fields(argv, line, 5)
            if jid == job_id:
                return SlurmJob(
                    job_id=jid,
                    state=_state(argv, state),
                    reason=reason or "None",
                    nodes="" if nodes == "None assigned" else nodes,
                    exit_code=exit_code,
                )
        return None

    def steps(self, job_id: str) -> dict[str, str]:
        """``{step name: step id}`` of the job's running steps (``squeue --steps``)."""
        args = ["--noheader", "--steps", f"--jobs={job_id}", "--format=%i|%j"]
        argv = ["squeue", *args]
        steps = {}
        for line in (self.query("squeue", *args) or "").splitlines():
            if line.strip():
                step_id, name = _fields(argv, line, 2)
                steps[name] = step_id
        return steps

    # --- nodes and partitions -------------------------------------------------------------------

    def hostnames(self, nodelist: str) -> list[str]:
        """``scontrol show hostnames``: a compressed node list (``node[1-2]``) expanded, in order."""
        out = self.run("scontrol", "show", "hostnames", nodelist)
        names = [line.strip() for line in out.splitlines() if line.strip()]
        if not names:
            raise SlurmCommandError(["scontrol", "show", "hostnames", nodelist], "printed no node names")
        return names

    def node_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        """``{node: NodeAddr}`` (``sinfo --Node``): the address other nodes reach each node at."""
        args = ["--noheader", "--Node", f"--nodes={','.join(nodes)}", "--format=%N|%o"]
        argv = ["sinfo", *args]
        addresses: dict[str, str] = {}
        for line in self.run("sinfo", *args).splitlines():
            if line.strip():
                name, address = _fields(argv, line, 2)
                addresses[name] = address
        missing = [node for node in nodes if node not in addresses]
        if missing:
            raise SlurmCommandError(argv, f"did not list node(s) {missing}")
        return addresses

    def partition(self, name: str) -> Partition | None:
        """The partition ``name`` (``sinfo --partition``), or ``None`` when the cluster has none."""
        args = ["--noheader", f"--partition={name}", "--format=%R|%a|%G|%D"]
        argv = ["sinfo", *args]
        gres: list[str] = []
        available, nodes, found = "", 0, False
        for line in self.run("sinfo", *args).splitlines():
            if not line.strip():
                continue
            part, avail, line_gres, count = _fields(argv, line, 4)
            if part != name:
                continue
            if not count.isdigit():
                raise SlurmCommandError(argv, f"printed {line!r}, expected a node count")
            found, available, nodes = True, avail, nodes + int(count)
            gres += [g for g in line_gres.split(",") if g and g != "(null)"]
        if not found:
            return None
        return Partition(name=name, available=available, gres=tuple(gres), nodes=nodes)

    def default_partition(self) -> str:
        """The cluster's default partition (``sinfo`` marks it with ``*``)."""
        argv = ["sinfo", "--noheader", "--format=%P"]
        for line in self.run("sinfo", "--noheader", "--format=%P").splitlines():
            if line.strip().endswith("*"):
                return line.strip().rstrip("*")
        raise SlurmCommandError(argv, "listed no default partition (marked '*')")
