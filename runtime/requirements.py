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
- **A layered environment** (``SMLAUNCH_REQUIREMENTS_CACHE`` set: the local process executor, whose
  emulated hosts all share the user's interpreter): a virtual environment under that directory, keyed
  by the SHA-256 of ``requirements.txt`` and the interpreter (``sys.prefix``, version), that sees every
  package of the user's interpreter (its site directories are added by a ``.pth`` file, so editable
  installs keep working) and holds only what pip adds or upgrades. Pip, run by the layer's Python,
  finds the user's packages installed and skips them; a requirement that needs another version is
  installed into the layer, where it shadows the user's copy for the ranks only (pip never uninstalls
  outside the environment it runs in). The ranks run under the layer's Python (its ``sys.executable``).
  The first host of the first job builds it under a file lock (the other hosts wait, then reuse it);
  later jobs with the same ``requirements.txt`` reuse it without running pip. A requirement naming a
  local path (``./pkg``, ``-r other.txt``) is read when the layer is built: changing only that file
  needs a changed ``requirements.txt`` (or an emptied cache) to take effect. Packages
  (``setup.py``) are not installed into the layer: their code dir is the ranks' working directory.
- **Nowhere** (``SMLAUNCH_INSTALL_REQUIREMENTS=0``, from ``LocalSession(install_requirements=False)``).

With ``CA_REPOSITORY_ARN`` set (``environment=`` of the estimator), pip installs requirements from
that AWS CodeArtifact repository, as the toolkit does: its index, with a fresh authorization token,
is given to pip through ``PIP_INDEX_URL`` (the toolkit passes ``-i``), so the token never reaches a log.

Pip's output is logged line by line as it runs (so it lands in the job's log); a failure raises
:class:`InstallRequirementsError` with the end of pip's output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runtime import contract

PIP_TIMEOUT_SECONDS = 1800.0
READY_MARKER = ".smlaunch-ready"
"""Written into a layered environment once pip succeeded in it: only then is it reused."""
LAYER_PTH = "smlaunch-base-interpreter.pth"

Log = Callable[[str], None]
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


def prepare(
    code_dir: Path,
    entry_point: str | None,
    environ: Mapping[str, str],
    log: Log,
    codeartifact: Callable[[str], Any] | None = None,
) -> str:
    """Install the code's requirements as the module docstring says; return the ranks' Python.

    ``codeartifact(region)``: a boto3 CodeArtifact client, used when ``CA_REPOSITORY_ARN`` is set
    (default: ``boto3.client("codeartifact", region_name=region)``).
    """
    python = sys.executable
    if environ.get(contract.SMLAUNCH_INSTALL_REQUIREMENTS, "1") == "0":
        if (Path(code_dir) / contract.REQUIREMENTS_FILE).is_file():
            log(f"{contract.REQUIREMENTS_FILE} not installed ({contract.SMLAUNCH_INSTALL_REQUIREMENTS}=0)")
        return python
    arguments = toolkit_pip_arguments(code_dir, entry_point)
    if arguments is None:
        return python

    def pip_environ() -> Mapping[str, str]:
        arn = environ.get(contract.CA_REPOSITORY_ARN_ENV)
        if not arn or contract.REQUIREMENTS_FILE not in arguments:
            return environ
        # The toolkit passes ``-i <index>``; the environment keeps the token out of every log line.
        return {**environ, "PIP_INDEX_URL": codeartifact_index(arn, codeartifact, log)}

    cache = environ.get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    if not cache:
        run_pip([python, "-m", "pip", "install", *arguments], code_dir, pip_environ(), log)
        return python
    if contract.REQUIREMENTS_FILE not in arguments:
        return python  # a package without requirements.txt: nothing to layer
    return str(layered_environment(Path(code_dir), Path(cache), pip_environ, log))


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


def environment_key(requirements: bytes) -> str:
    """The cache key of a layered environment: requirements.txt's bytes and this interpreter."""
    digest = hashlib.sha256(requirements)
    digest.update(f"\0{sys.prefix}\0{sys.version}".encode())
    return digest.hexdigest()[:24]


def layered_environment(
    code_dir: Path, cache: Path, pip_environ: Callable[[], Mapping[str, str]], log: Log
) -> Path:
    """The Python of the layered environment for ``code_dir/requirements.txt``, built if needed
    (pip runs in ``pip_environ()``, asked for only then)."""
    requirements = (code_dir / contract.REQUIREMENTS_FILE).read_bytes()
    key = environment_key(requirements)
    root = cache / key
    python = root / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{key}.lock", "a") as lock:
        # Another host of this job (or another job) may be building it: wait for it, then reuse.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / READY_MARKER).is_file():
            log(f"{contract.REQUIREMENTS_FILE}: reusing the environment {root} (nothing to install)")
            return python
        shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
        log(f"{contract.REQUIREMENTS_FILE}: building the environment {root}, layered over {sys.prefix}")
        try:
            _create_layer(root)
            run_pip(
                [str(python), "-m", "pip", "install", "-r", contract.REQUIREMENTS_FILE],
                code_dir,
                {**pip_environ(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                log,
            )
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        (root / READY_MARKER).write_text(f"{code_dir / contract.REQUIREMENTS_FILE}\n")
    return python


def _create_layer(root: Path) -> None:
    """A venv over this interpreter that sees this interpreter's packages (and uses its pip)."""
    import venv  # ~50 ms: only when a layer is built

    has_pip = _importable("pip")
    venv.EnvBuilder(system_site_packages=True, symlinks=True, with_pip=not has_pip).create(root)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    # A venv made from a venv sees only the *base* interpreter's packages: add the user's own site
    # directories with site.addsitedir, which also runs their .pth files (editable installs).
    dirs = [d for d in _site_dirs() if Path(d).resolve() != site_packages.resolve()]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    (site_packages / LAYER_PTH).write_text(lines)


def _site_dirs() -> list[str]:
    import site

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return dirs


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


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
