"""smlaunch's own settings in one place: :class:`Settings`, resolved once per :class:`LocalSession`.

Every knob of a local run (where jobs live, the executor, the stall watchdog, archive limits, fault
injection, retention, ...) is one field of :class:`Settings`. A knob's value comes from the first
of, in this order:

1. the explicit ``LocalSession(...)`` argument (``None`` counts as not given);
2. its environment variable (the ``SMLAUNCH_*`` names of earlier releases, kept for compatibility);
3. the config file: ``$SMLAUNCH_CONFIG`` if set, else ``$XDG_CONFIG_HOME/smlaunch/config.yaml``,
   else ``~/.config/smlaunch/config.yaml`` (a YAML mapping of knob names to values; a missing
   default file is no error, a missing ``$SMLAUNCH_CONFIG`` file is);
4. the default.

A bad value raises :class:`ConfigurationError` naming where it came from (the argument, the
variable, or ``<file>: key``), the value and the fix, before any work starts. ``docs/configuration.md``
lists each knob (a test keeps that table equal to this model).

Knobs that the host runtimes read (:data:`HOST_VARIABLES`) reach them as the agent's own variables
(:meth:`Settings.host_environment`), never through the job's ``Environment``: a SageMaker request
carries none of them (:func:`drop_smlaunch_variables`). A job's ``environment=`` may still set one
for a local run, and wins over the session's value for that job.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import warnings
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from smlaunch import contract
from smlaunch.contract.archive import DEFAULT_MAX_BYTES, DEFAULT_MAX_MEMBERS
from smlaunch.sdk.errors import ConfigurationError

CONFIG_ENV = "SMLAUNCH_CONFIG"
HOME_ENV = "SMLAUNCH_HOME"
SMLAUNCH_PREFIX = "SMLAUNCH_"
DEFAULT_RETENTION = "30d"
_AGE_RE = re.compile(r"^(?P<count>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` as a timedelta: the ``retention`` setting, and
    ``smlaunch gc --older-than`` (whose flag a bad value names)."""
    match = _AGE_RE.match(text.strip())
    if match is None:
        raise ConfigurationError(
            "--older-than", text, "not an age", "pass a number and a unit: 7d, 12h, 30m, 2w"
        )
    return timedelta(seconds=float(match.group("count")) * _AGE_UNITS[match.group("unit")])


def default_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$SMLAUNCH_HOME/jobs``, else ``~/.smlaunch/jobs``: where local jobs keep their trees and logs."""
    home = (os.environ if environ is None else environ).get(HOME_ENV)
    return (Path(home) if home else Path.home() / ".smlaunch") / "jobs"


def config_path(environ: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """The config file and whether it must exist (named by ``$SMLAUNCH_CONFIG``)."""
    env = os.environ if environ is None else environ
    chosen = env.get(CONFIG_ENV)
    if chosen:
        return Path(chosen).expanduser(), True
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = str(Path.home() / ".config")
    return Path(base) / "smlaunch" / "config.yaml", False


Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Settings(BaseModel):
    """Every knob of a local run; see the module docstring for where each value comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(
        default_factory=default_root,
        description="Directory of the job store: one folder per job (`SMLAUNCH_HOME` names its parent).",
    )
    executor: Literal["process", "docker"] = Field(
        "process", description="`process` (hosts as processes) or `docker` (one container per host)."
    )
    docker_image: str | None = Field(
        None, description="Image of the docker executor for jobs without `image_uri`."
    )
    processes_per_host: int | None = Field(
        None, ge=1, description="Ranks per emulated host for per-GPU launchers (default: the GPU count)."
    )
    emulate_cuda: bool | None = Field(
        None,
        description="Emulate the instance type's GPUs on the CPU (default: when this machine lacks them).",
    )
    instance_count_quota: int | None = Field(
        None, ge=1, description="Most instances one job may ask for (default: SageMaker's default quota)."
    )
    install_requirements: bool = Field(True, description="Install `requirements.txt` of `source_dir`.")
    artifact_conflicts: Literal["warn", "error"] = Field(
        "warn", description="Two hosts writing one artifact path with different bytes: `warn` or `error`."
    )
    stop_grace_seconds: Seconds = Field(
        contract.DEFAULT_STOP_GRACE_SECONDS, description="Seconds from SIGTERM to SIGKILL when a job stops."
    )
    stall_timeout_seconds: Seconds = Field(
        0.0,
        description="Seconds without output from any rank (none exited) before a host dumps stacks "
        "and ends the job; 0: off.",
    )
    stack_dumper: Literal["auto", "py-spy", "faulthandler"] = Field(
        "auto", description="How a stalled job's stacks are dumped (`auto`: py-spy when installed)."
    )
    faults: list[dict[str, Any]] | None = Field(
        None, description="Faults to inject into local jobs (a list; see `smlaunch/contract/faults.py`)."
    )
    archive_max_bytes: int = Field(
        DEFAULT_MAX_BYTES, ge=1, description="Most bytes the code archive may expand to on a host."
    )
    archive_max_members: int = Field(
        DEFAULT_MAX_MEMBERS, ge=1, description="Most members the code archive may hold."
    )
    mpi_wait_seconds: float = Field(
        contract.DEFAULT_MPI_WAIT_SECONDS,
        gt=0,
        allow_inf_nan=False,
        description="Bound on every wait between MPI hosts.",
    )
    log_prefix: bool = Field(True, description="Prefix each rank's output line with `[algo-N/rank R]`.")
    verbose: bool = Field(
        False,
        description="Each host logs its whole launch topology and where its code came from, not one line.",
    )
    unsafe_checkpoint_load: bool = Field(
        False, description="Load smp checkpoints with full pickle (runs code in them)."
    )
    mlflow: str | None = Field(
        None,
        description="MLflow tracking URI; each job waited on becomes a run (unset: MLflow's own "
        "`MLFLOW_TRACKING_URI`).",
    )
    retention: str = Field(
        DEFAULT_RETENTION, description="Age after which `smlaunch gc` removes ended jobs (`7d`, `12h`)."
    )

    @field_validator("root", mode="after")
    @classmethod
    def _absolute_root(cls, root: Path) -> Path:
        return root.expanduser().resolve()

    @field_validator("faults", mode="after")
    @classmethod
    def _parse_faults(cls, faults: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        from smlaunch.contract.errors import FieldError
        from smlaunch.contract.faults import parse_faults

        if faults is not None:
            try:
                parse_faults(json.dumps(faults))
            except FieldError as exc:
                raise ValueError(f"{exc.problem} ({exc.fix})") from None
        return faults

    @field_validator("retention", mode="after")
    @classmethod
    def _parse_retention(cls, retention: str) -> str:
        try:
            parse_age(retention)
        except ConfigurationError:
            raise ValueError("not an age: a number and a unit, e.g. 7d, 12h, 30m, 2w") from None
        return retention

    def host_environment(self) -> dict[str, str]:
        """The knobs the host runtimes read, as the variables the agent passes them (every one, so
        a variable inherited from the caller's environment never outranks the session's value)."""
        return {
            variable: _HOST_ENCODERS[name](getattr(self, name)) for name, variable in HOST_VARIABLES.items()
        }


ENVIRONMENT_VARIABLES: dict[str, str] = {
    "root": HOME_ENV,
    "executor": "SMLAUNCH_EXECUTOR",
    "docker_image": "SMLAUNCH_DOCKER_IMAGE",
    "stop_grace_seconds": contract.SMLAUNCH_STOP_GRACE_SECONDS,
    "stall_timeout_seconds": contract.SMLAUNCH_STALL_TIMEOUT_SECONDS,
    "stack_dumper": contract.SMLAUNCH_STACK_DUMPER,
    "faults": contract.SMLAUNCH_FAULTS,
    "archive_max_bytes": contract.SMLAUNCH_ARCHIVE_MAX_BYTES,
    "archive_max_members": contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS,
    "mpi_wait_seconds": contract.SMLAUNCH_MPI_WAIT_SECONDS,
    "log_prefix": contract.SMLAUNCH_LOG_PREFIX,
    "verbose": contract.SMLAUNCH_VERBOSE,
    "unsafe_checkpoint_load": contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD,
}
"""The environment variable of each knob that has one (earlier releases' names)."""

HOST_VARIABLES: dict[str, str] = {
    name: ENVIRONMENT_VARIABLES[name]
    for name in (
        "stall_timeout_seconds",
        "stack_dumper",
        "faults",
        "archive_max_bytes",
        "archive_max_members",
        "mpi_wait_seconds",
        "log_prefix",
        "verbose",
        "unsafe_checkpoint_load",
    )
}
"""Knobs the host runtimes read, and the variable each reaches them as."""


def _flag(value: bool) -> str:
    return "1" if value else "0"


_HOST_ENCODERS: dict[str, Callable[[Any], str]] = {
    "stall_timeout_seconds": lambda v: f"{v:g}",
    "stack_dumper": str,
    "faults": lambda v: "" if v is None else json.dumps(v),
    "archive_max_bytes": str,
    "archive_max_members": str,
    "mpi_wait_seconds": lambda v: f"{v:g}",
    "log_prefix": _flag,
    "verbose": _flag,
    "unsafe_checkpoint_load": _flag,
}

_EXAMPLES: dict[str, str] = {
    "root": "~/smlaunch-jobs",
    "executor": "docker",
    "docker_image": "smlaunch-cpu:latest",
    "processes_per_host": "2",
    "emulate_cuda": "false",
    "instance_count_quota": "40",
    "install_requirements": "false",
    "artifact_conflicts": "error",
    "stop_grace_seconds": "120",
    "stall_timeout_seconds": "600",
    "stack_dumper": "faulthandler",
    "faults": '[{"kind": "crash", "rank": 1, "after_seconds": 3}]',
    "archive_max_bytes": "42949672960",
    "archive_max_members": "2000000",
    "mpi_wait_seconds": "600",
    "log_prefix": "false",
    "verbose": "true",
    "unsafe_checkpoint_load": "true",
    "mlflow": "http://127.0.0.1:5000",
    "retention": "7d",
}
"""A valid value of each knob, for the fix of an error."""


def _from_environment(name: str, raw: str) -> Any:
    """A knob's value from its variable's (non-empty) text; pydantic converts numbers and flags."""
    if name == "root":
        return default_root({HOME_ENV: raw})
    if name == "faults":
        try:
            return json.loads(raw)
        except ValueError:
            raise ConfigurationError(
                ENVIRONMENT_VARIABLES[name],
                raw,
                "is not JSON",
                f"set it to a JSON list, e.g. {_EXAMPLES[name]}",
            ) from None
    return raw


def load_config(path: Path, required: bool) -> dict[str, Any]:
    """The config file's mapping of knob names to values ({} when an optional file is absent)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not required:
            return {}
        raise ConfigurationError(
            CONFIG_ENV, str(path), "no such file", f"create it, or unset {CONFIG_ENV} for the default file"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            "config file", str(path), f"cannot be read ({exc.strerror})", "fix its permissions or remove it"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigurationError(
            "config file",
            str(path),
            f"is not valid YAML{where}: {problem}",
            "write one `key: value` per line",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(
            "config file",
            str(path),
            f"must be a mapping of setting names to values, not a {type(data).__name__}",
            "write one `key: value` per line, e.g. `executor: docker`",
        )
    known = list(Settings.model_fields)
    for key in data:
        if key not in Settings.model_fields:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigurationError(
                f"{path}: {key}",
                data[key],
                "unknown setting",
                f"{hint}known settings: {', '.join(known)} (docs/configuration.md)",
            )
    return data


def resolve(explicit: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of one session: each knob from ``explicit`` (the session's arguments; None: not
    given), else its environment variable, else the config file, else the default."""
    env = os.environ if environ is None else environ
    path, required = config_path(env)
    from_file = load_config(path, required)
    values: dict[str, Any] = {}
    sources: dict[str, tuple[str, str]] = {}
    for name in Settings.model_fields:
        variable = ENVIRONMENT_VARIABLES.get(name)
        if explicit.get(name) is not None:
            values[name] = explicit[name]
            sources[name] = (name, f"pass {name}={_EXAMPLES[name]}")
        elif variable is not None and env.get(variable, "").strip():  # empty: unset, as ever
            values[name] = _from_environment(name, env[variable])
            sources[name] = (variable, f"set {variable}={_EXAMPLES[name]}, or unset it")
        elif name in from_file:
            values[name] = from_file[name]
            sources[name] = (f"{path}: {name}", f"write e.g. `{name}: {_EXAMPLES[name]}` in {path}")
    try:
        return Settings(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0])
        field, fix = sources[name]
        problem = error["msg"].removeprefix("Value error, ")
        raise ConfigurationError(field, values[name], problem, fix) from None


def drop_smlaunch_variables(environment: dict[str, str] | None) -> dict[str, str] | None:
    """``environment`` without smlaunch's own ``SMLAUNCH_*`` variables, each dropped with a warning:
    they configure local runs and never reach a SageMaker request."""
    if not environment:
        return environment
    dropped = sorted(k for k in environment if k.startswith(SMLAUNCH_PREFIX))
    if not dropped:
        return environment
    warnings.warn(
        f"environment={dropped} dropped: SMLAUNCH_* variables configure local runs and are not sent "
        "to SageMaker (set them in LocalSession(...) or ~/.config/smlaunch/config.yaml; "
        "docs/configuration.md)",
        UserWarning,
        stacklevel=3,
    )
    return {k: v for k, v in environment.items() if k not in dropped} or None
