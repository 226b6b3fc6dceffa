"""The user's dependencies: ``requirements.txt`` of the code dir, installed before the ranks start.

Which entry points get their requirements installed follows the sagemaker-training toolkit
(``entry_point.install`` and ``modules.install_requirements``/``modules.install`` in
``sagemaker_training``): a ``.sh`` entry point, or one that is neither ``.py`` nor a package, gets
nothing; a code dir with ``setup.py`` is a package; a ``.py`` entry point gets
``python -m pip install -r requirements.txt`` (run in the code dir) when the file is there.

Where they go depends on who runs the host (:func:`prepare`):

- **The interpreter itself** (the default: containers and SageMaker, where every host has an
  interpreter of its own): exactly the toolkit's commands, ``pip install -r requirements.txt``, and
  for a package ``pip install . -r requirements.txt``.
- **A layered environment of the job's own** (``SMLAUNCH_REQUIREMENTS_CACHE`` set: the local process
  executor, whose emulated hosts all share the user's interpreter): ``pip install -r
  requirements.txt`` run by the Python of a cached template layered over the user's interpreter, of
  which the job gets a copy its ranks run and write into, the rest of the cache sealed from them
  (:mod:`smlaunch.runtime.requirements_cache`). Packages (``setup.py``) are not installed: their
  code dir is the ranks' working directory.
- **Nowhere** (``SMLAUNCH_INSTALL_REQUIREMENTS=0``, from ``LocalSession(install_requirements=False)``).

With ``CA_REPOSITORY_ARN`` set (``environment=`` of the estimator), pip installs requirements from
that AWS CodeArtifact repository, as the toolkit does: its index, with a fresh authorization token,
is given to pip through ``PIP_INDEX_URL`` (the toolkit passes ``-i``), so the token never reaches a log.

Pip's output is logged line by line as it runs (so it lands in the job's log); a failure raises
:class:`InstallRequirementsError` with the end of pip's output.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.runtime.requirements_cache import JobEnvironment, Log, layered_environment, seal_hook

PIP_TIMEOUT_SECONDS = 1800.0
_CODEARTIFACT_ARN = re.compile(
    r"arn:(?P<partition>[^:]+):codeartifact:(?P<region>[^:]+):(?P<account>[^:]+)"
    r":repository/(?P<domain>[^/]+)/(?P<repository>.+)"
)


class InstallRequirementsError(RuntimeError):
    """``pip install`` of the user's requirements failed; the message holds the end of pip's output."""


def toolkit_pip_arguments(code_dir: Path, entry_point: str | None) -> list[str] | None:
    """The arguments after ``python -m pip install`` that the toolkit runs for this code, or None.

    ``sagemaker_training._entry_point_type.get`` decides: ``.sh`` -> command (nothing installed);
    ``setup.py`` in the code dir -> package (``. -r requirements.txt``); ``.py`` -> program
    (``-r requirements.txt`` when present); anything else -> command.
    """
    name = entry_point or ""
    code_dir = Path(code_dir)
    has_requirements = (code_dir / contract.REQUIREMENTS_FILE).is_file()
    requirements = ["-r", contract.REQUIREMENTS_FILE] if has_requirements else []
    if name.endswith(".sh"):
        return None
    if (code_dir / "setup.py").is_file():
        return [".", *requirements]
    if name.endswith(".py") and has_requirements:
        return requirements
    return None


@dataclass
class Prepared:
    """What :func:`prepare` leaves for the ranks: the Python they run (its directory leads their
    ``PATH``: :func:`smlaunch.runtime.interpreter.job_path`), the variables to add to their environment, and
    the job's own environment (if any), to :meth:`release` when the host ends."""

    python: str
    environ: dict[str, str] = field(default_factory=dict)
    job_environment: JobEnvironment | None = None
    seal: Callable[[], None] | None = None
    """Run in each rank's child before ``exec`` (:func:`seal_hook`): the cache read-only, but for
    the job's own environment; None where there is nothing to seal or no way to."""

    def release(self) -> None:
        """Give the job's environment back (the host's last step); idempotent."""
        if self.job_environment is not None:
            self.job_environment.release()


def prepare(
    code_dir: Path,
    entry_point: str | None,
    environ: Mapping[str, str],
    log: Log,
    codeartifact: Callable[[str], Any] | None = None,
    *,
    requirements: str | bool | None = True,
) -> Prepared:
    """Install the code's requirements as the module docstring says; return what the ranks run.

    ``requirements``: True, the toolkit's rule (:func:`toolkit_pip_arguments`); a file name, that
    file's requirements only (SDK v3's ``SourceCode.requirements``); None or False, nothing.

    ``codeartifact(region)``: a boto3 CodeArtifact client, used when ``CA_REPOSITORY_ARN`` is set
    (default: ``boto3.client("codeartifact", region_name=region)``). With a cache, the ranks get it
    sealed (:func:`seal_hook`) whether this job has an environment there or not.
    """
    prepared = _install(code_dir, entry_point, environ, log, codeartifact, requirements)
    cache = environ.get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    if cache:
        own = prepared.job_environment
        prepared.seal = seal_hook(Path(cache), None if own is None else own.root, log)
    return prepared


def _install(
    code_dir: Path,
    entry_point: str | None,
    environ: Mapping[str, str],
    log: Log,
    codeartifact: Callable[[str], Any] | None,
    requirements: str | bool | None = True,
) -> Prepared:
    here = Prepared(sys.executable)
    if environ.get(contract.SMLAUNCH_INSTALL_REQUIREMENTS, "1") == "0":
        if (Path(code_dir) / contract.REQUIREMENTS_FILE).is_file():
            log(f"{contract.REQUIREMENTS_FILE} not installed ({contract.SMLAUNCH_INSTALL_REQUIREMENTS}=0)")
        return here
    if requirements is True:
        arguments = toolkit_pip_arguments(code_dir, entry_point)
    else:
        arguments = ["-r", requirements] if isinstance(requirements, str) and requirements else None
    if arguments is None:
        return here

    def pip_environ() -> Mapping[str, str]:
        arn = environ.get(contract.CA_REPOSITORY_ARN_ENV)
        if not arn or contract.REQUIREMENTS_FILE not in arguments:
            return environ
        # The toolkit passes ``-i <index>``; the environment keeps the token out of every log line.
        return {**environ, "PIP_INDEX_URL": codeartifact_index(arn, codeartifact, log)}

    cache = environ.get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    if not cache:
        run_pip([sys.executable, "-m", "pip", "install", *arguments], code_dir, pip_environ(), log)
        return here
    if contract.REQUIREMENTS_FILE not in arguments:
        return here  # a package without requirements.txt: nothing to layer

    def install(python: Path) -> None:  # into a template being built
        argv = [str(python), "-m", "pip", "install", "-r", contract.REQUIREMENTS_FILE]
        run_pip(argv, code_dir, {**pip_environ(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, log)

    job = environ.get(contract.TRAINING_JOB_NAME_ENV) or f"host-{os.getpid()}"
    own = layered_environment(Path(code_dir), Path(cache), job, install, log)
    return Prepared(str(own.python), own.environ, own)


def codeartifact_index(arn: str, client: Callable[[str], Any] | None, log: Log) -> str:
    """The authenticated pip index of a CodeArtifact repository, as the toolkit builds it
    (``modules._get_codeartifact_index`` in ``sagemaker_training``)."""
    match = _CODEARTIFACT_ARN.match(arn)
    if match is None:
        raise InstallRequirementsError(
            f"InstallRequirementsError: {contract.CA_REPOSITORY_ARN_ENV}={arn!r} is not a CodeArtifact "
            "repository ARN; use arn:aws:codeartifact:<region>:<account>:repository/<domain>/<repository>"
        )
    domain, owner, repository = match["domain"], match["account"], match["repository"]
    log(f"pip index: CodeArtifact repository {domain}/{repository} of {owner} ({match['region']})")
    if client is None:
        import boto3

        def client(region: str) -> Any:
            return boto3.client("codeartifact", region_name=region)

    api = client(match["region"])
    try:
        token = api.get_authorization_token(domain=domain, domainOwner=owner)["authorizationToken"]
        endpoint = api.get_repository_endpoint(
            domain=domain, domainOwner=owner, repository=repository, format="pypi"
        )["repositoryEndpoint"]
    except Exception as exc:
        raise InstallRequirementsError(
            f"InstallRequirementsError: CodeArtifact repository {domain}/{repository}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    index = re.sub(f"{re.escape(repository)}/?$", f"{repository}/simple/", endpoint)
    return re.sub("^https://", f"https://aws:{token}@", index)


def run_pip(argv: list[str], cwd: Path, environ: Mapping[str, str], log: Log) -> None:
    """Run pip, logging each line of its output as it comes; raise InstallRequirementsError on failure."""
    log(f"installing requirements: {' '.join(argv)}")
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(PIP_TIMEOUT_SECONDS, kill)
    timer.start()
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            log(f"pip: {line}")
            tail = [*tail[-19:], line]
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:  # stopped while pip ran
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
    if code != 0:
        why = f"exited with code {code}"
        if timed_out.is_set():
            why = f"timed out after {PIP_TIMEOUT_SECONDS:g} s"
        raise InstallRequirementsError(
            f"InstallRequirementsError: {' '.join(argv[2:])} {why}\n" + "\n".join(tail)
        )
