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
  executor, whose emulated hosts all share the user's interpreter). The cache directory holds
  *templates*: virtual environments keyed by the SHA-256 of ``requirements.txt`` and the interpreter
  (``sys.prefix``, version), that see every package of the user's interpreter (its site directories
  are added by a ``.pth`` file, so editable installs keep working) and hold only what pip adds or
  upgrades. Pip, run by the template's Python, finds the user's packages installed and skips them; a
  requirement that needs another version is installed into the template, where it shadows the
  user's copy for the ranks only (pip never uninstalls outside the environment it runs in). The
  first job with a given ``requirements.txt`` builds its template under a file lock; later jobs
  reuse it without running pip. A requirement naming a local path (``./pkg``, ``-r other.txt``) is
  read when the template is built: changing only that file needs a changed ``requirements.txt`` (or
  an emptied cache) to take effect. Packages (``setup.py``) are not installed: their code dir is the
  ranks' working directory.

  No job ever runs in a template. Each job gets a *copy* of it, ``<cache>/jobs/<job name>``
  (:class:`JobEnvironment`), made by the first of its hosts and shared by its hosts as they share
  the user's interpreter; the ranks run its Python, with its ``bin/`` first on ``PATH`` and
  ``VIRTUAL_ENV`` naming it. Whatever a job writes there (a ``.pth`` file, a run-time
  ``pip install x==old``, a patched module) dies with the job, as a SageMaker job's changes die
  with its instance: every job starts from the template as pip left it. Files are cloned (reflinks,
  sharing blocks until either side writes) where the file system can, else copied; never
  hard-linked, since a write into a hard-linked file (which no file mode stops for root) would reach
  the template. The copy costs a small fraction of pip's run (``benchmarks/requirements_env.py``).
  Absolute paths to the template in ``bin/`` (console scripts' ``#!`` lines, ``activate``),
  ``pyvenv.cfg`` and top-level ``.pth`` files are rewritten to the copy. Each host holds a shared
  lock on ``<cache>/jobs/<job name>.lock`` while it runs; the last to leave removes the copy. A copy
  nobody holds (its hosts were killed) is removed by the job's agent when the job ends
  (:func:`remove_job_environment`), or else by the next job that prepares one in the same cache.

  The ranks write into their copy and nowhere else in the cache: every process the host runtime
  starts runs in a mount namespace of its own where the cache is read-only but for the job's copy,
  bind-mounted back writable (:func:`seal_hook`; a job without a copy gets the whole cache
  read-only), so no path (``$VIRTUAL_ENV/..``, the template's
  absolute path) leads a rank to a template or to another running job's copy. The runtime itself
  keeps the cache writable: it builds templates and copies, and removes the job's copy at the end.
  Limits: a root rank that calls ``mount``/``umount`` itself, or a rank that goes through
  ``/proc/<pid>/root`` of a process outside its namespace, is beyond this (as for the job store).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runtime import contract

PIP_TIMEOUT_SECONDS = 1800.0
READY_MARKER = ".smlaunch-ready"
"""Written into a layered environment once pip succeeded in it: only then is it reused."""
LAYER_PTH = "smlaunch-base-interpreter.pth"
JOBS_DIR = "jobs"
"""Under the cache: each running job's own copy of a template (:class:`JobEnvironment`)."""
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")
"""SageMaker's ``TrainingJobName``: usable as a file name as it is; anything else is hashed."""
_CP = ("cp", "-a", "--reflink=auto", "--no-target-directory")
_PIP_SCRIPT = "import sys\nfrom pip._internal.cli.main import main\n\nsys.exit(main())\n"
"""pip's own console script, for a layer that borrows the user's pip."""
_RELOCATE_MAX_BYTES = 1 << 20  # scripts and .pth files; a larger file in bin/ is a binary

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


@dataclass
class Prepared:
    """What :func:`prepare` leaves for the ranks: the Python they run (its directory leads their
    ``PATH``: :func:`runtime.interpreter.job_path`), the variables to add to their environment, and
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
) -> Prepared:
    """Install the code's requirements as the module docstring says; return what the ranks run.

    ``codeartifact(region)``: a boto3 CodeArtifact client, used when ``CA_REPOSITORY_ARN`` is set
    (default: ``boto3.client("codeartifact", region_name=region)``). With a cache, the ranks get it
    sealed (:func:`seal_hook`) whether this job has an environment there or not.
    """
    prepared = _install(code_dir, entry_point, environ, log, codeartifact)
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
) -> Prepared:
    here = Prepared(sys.executable)
    if environ.get(contract.SMLAUNCH_INSTALL_REQUIREMENTS, "1") == "0":
        if (Path(code_dir) / contract.REQUIREMENTS_FILE).is_file():
            log(f"{contract.REQUIREMENTS_FILE} not installed ({contract.SMLAUNCH_INSTALL_REQUIREMENTS}=0)")
        return here
    arguments = toolkit_pip_arguments(code_dir, entry_point)
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
    job = environ.get(contract.TRAINING_JOB_NAME_ENV) or f"host-{os.getpid()}"
    own = layered_environment(Path(code_dir), Path(cache), job, pip_environ, log)
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


def environment_key(requirements: bytes) -> str:
    """The cache key of a layered environment: requirements.txt's bytes and this interpreter."""
    digest = hashlib.sha256(requirements)
    digest.update(f"\0{sys.prefix}\0{sys.version}".encode())
    return digest.hexdigest()[:24]


def layered_environment(
    code_dir: Path, cache: Path, job: str, pip_environ: Callable[[], Mapping[str, str]], log: Log
) -> JobEnvironment:
    """The environment of ``job`` for ``code_dir/requirements.txt``: a copy of the cached template,
    which is built first if needed (pip runs in ``pip_environ()``, asked for only then)."""
    requirements = (code_dir / contract.REQUIREMENTS_FILE).read_bytes()
    key = environment_key(requirements)
    template = cache / key
    cache.mkdir(parents=True, exist_ok=True)
    own = JobEnvironment.hold(cache / JOBS_DIR, job)
    try:
        with open(cache / f"{key}.lock", "a") as lock:
            # Another host of this job (or another job) may be building or copying: wait for it.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (own.root / READY_MARKER).is_file():
                log(f"{contract.REQUIREMENTS_FILE}: using the job's environment {own.root}")
                return own
            if (template / READY_MARKER).is_file():
                log(f"{contract.REQUIREMENTS_FILE}: reusing the environment {template} (nothing to install)")
            else:
                _build_template(template, code_dir, pip_environ, log)
            own.copy_from(template)
            log(f"{contract.REQUIREMENTS_FILE}: the job's environment {own.root} (a copy of {template})")
    except BaseException:
        own.release()
        raise
    return own


def _build_template(
    root: Path, code_dir: Path, pip_environ: Callable[[], Mapping[str, str]], log: Log
) -> None:
    shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
    log(f"{contract.REQUIREMENTS_FILE}: building the environment {root}, layered over {sys.prefix}")
    try:
        _create_layer(root)
        run_pip(
            [str(root / "bin" / "python"), "-m", "pip", "install", "-r", contract.REQUIREMENTS_FILE],
            code_dir,
            {**pip_environ(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            log,
        )
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    (root / READY_MARKER).write_text(f"{code_dir / contract.REQUIREMENTS_FILE}\n")


def _create_layer(root: Path) -> None:
    """A venv over this interpreter that sees this interpreter's packages (and uses its pip)."""
    import venv  # ~50 ms: only when a layer is built

    has_pip = _importable("pip")
    venv.EnvBuilder(system_site_packages=True, symlinks=True, with_pip=not has_pip).create(root)
    site_packages = _site_packages(root)
    # A venv made from a venv sees only the *base* interpreter's packages: add the user's own site
    # directories with site.addsitedir, which also runs their .pth files (editable installs).
    dirs = [d for d in _site_dirs() if Path(d).resolve() != site_packages.resolve()]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    (site_packages / LAYER_PTH).write_text(lines)
    if has_pip:  # else ensurepip wrote them: `pip install` in a job installs into its environment
        script = f"#!{root / 'bin' / 'python'}\n{_PIP_SCRIPT}"
        version = sys.version_info
        for name in ("pip", f"pip{version[0]}", f"pip{version[0]}.{version[1]}"):
            (root / "bin" / name).write_text(script)
            (root / "bin" / name).chmod(0o755)


def _site_packages(root: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))


class JobEnvironment:
    """One job's copy of a template, ``<jobs>/<job>``, held (a shared ``flock`` on
    ``<jobs>/<job>.lock``) by each of the job's hosts that uses it; see the module docstring."""

    def __init__(self, root: Path, lock: IO[str]) -> None:
        self.root = root
        self._lock: IO[str] | None = lock

    @property
    def python(self) -> Path:
        """The Python the ranks run."""
        return self.root / "bin" / "python"

    @classmethod
    def hold(cls, jobs: Path, job: str) -> JobEnvironment:
        """Hold ``job``'s environment (not necessarily made yet), after removing every one nobody holds."""
        jobs.mkdir(parents=True, exist_ok=True)
        name = _file_name(job)
        for stale in jobs.glob("*.lock"):
            _remove_unheld(stale)
        lock_path = jobs / f"{name}.lock"
        while True:
            lock = open(lock_path, "a")
            fcntl.flock(lock, fcntl.LOCK_SH)
            # Held only if no one removed the lock file between open() and flock(): see _remove_unheld.
            mine = os.fstat(lock.fileno())
            with contextlib.suppress(FileNotFoundError):
                named = os.stat(lock_path)
                if (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino):
                    return cls(jobs / name, lock)
            lock.close()

    def copy_from(self, template: Path) -> None:
        """Make this environment a copy of ``template`` (replacing what a dead host left half-made)."""
        shutil.rmtree(self.root, ignore_errors=True)
        try:
            _copy_tree(template, self.root)
            _relocate(self.root, template)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def environ(self) -> dict[str, str]:
        """What the ranks' environment gets besides ``PATH``, as ``activate`` would set it (its
        ``bin/`` leads ``PATH`` as the directory of :attr:`python`: :mod:`runtime.interpreter`)."""
        return {"VIRTUAL_ENV": str(self.root)}

    def release(self) -> None:
        """Stop holding it; the last holder removes it."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            # Converting the shared lock drops it first: whoever asks last finds no holder left.
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return
        _remove(self.root, Path(lock.name))
        lock.close()


def seal_hook(cache: Path, own: Path | None, log: Log) -> Callable[[], None] | None:
    """A pre-exec hook giving a rank a mount namespace of its own in which ``cache`` is read-only
    but for ``own`` (the job's environment, if any and made), bind-mounted back writable: a rank then
    writes into no template and no other job's environment by any path below the cache, while its
    own ``pip install`` works. Tried once here (:func:`runtime.mounts.unavailable`); where it
    cannot be had, says why in the log and returns None (the ranks then reach the whole cache).

    The host runtime itself keeps the cache writable (it builds templates and removes the job's
    environment at the end); only what it starts is sealed. Each rank gets a namespace of its own
    (one for ``mpirun`` and all it starts), nested in the host's: a user namespace too when not
    root, as a mount the host's user namespace made is read-only for ranks only through a nested one.
    """
    from runtime import mounts

    libc = mounts.load_libc()
    if libc is None:
        return None
    cache_path = os.path.realpath(cache)
    own_path = os.path.realpath(own) if own is not None and os.path.isdir(own) else None

    def seal() -> None:
        assert libc is not None
        bind = mounts.MS_BIND | mounts.MS_REC
        mounts.enter_namespace(libc)
        mounts.mount(libc, cache_path, cache_path, None, bind, f"bind-mounting {cache_path}")
        if own_path is not None:
            mounts.mount(libc, own_path, own_path, None, bind, f"bind-mounting {own_path} back")
        mounts.read_only(libc, cache_path)

    why = mounts.unavailable(seal)
    if why is None:
        return seal
    log(
        f"{contract.REQUIREMENTS_FILE}: the ranks can write into the environments of other jobs "
        f"under {cache} (no mount namespace for them here: {why})"
    )
    return None


def job_environment_root(cache: Path, job: str) -> Path:
    """Where ``job``'s own environment is (or would be) in ``cache``."""
    return cache / JOBS_DIR / _file_name(job)


def remove_job_environment(cache: Path, job: str) -> None:
    """Remove ``job``'s environment unless a host still holds it: for the job's agent once every
    host has ended, since a host that was killed never released it."""
    lock_path = cache / JOBS_DIR / f"{_file_name(job)}.lock"
    if lock_path.exists():
        _remove_unheld(lock_path)


def _file_name(job: str) -> str:
    return job if _JOB_NAME.fullmatch(job) else hashlib.sha256(job.encode()).hexdigest()[:24]


def _remove_unheld(lock_path: Path) -> None:
    """Remove a job's environment and then its lock file if no host holds the lock. A host that
    opened the file meanwhile sees, once it holds the lock, that the name no longer leads to it."""
    try:
        lock = open(lock_path, "a")
    except OSError:
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        _remove(lock_path.with_suffix(""), lock_path)


def _remove(root: Path, lock_path: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    lock_path.unlink(missing_ok=True)  # last: a lock file without a directory is harmless


def _copy_tree(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest`` keeping modes, mtimes (the cached ``.pyc`` files stay valid) and
    symbolic links, with reflinks where the file system has them: GNU ``cp`` (twice as fast as
    ``shutil.copytree`` on a few thousand files), else ``shutil.copytree``, which also raises the
    real error when ``cp`` failed for want of room or rights."""
    try:
        copied = subprocess.run([*_CP, str(source), str(dest)], capture_output=True, check=False)
    except OSError:  # no cp
        copied = None
    if copied is not None and copied.returncode == 0:
        return
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, symlinks=True)


def _relocate(root: Path, template: Path) -> None:
    """Point what names the template's path at ``root``: ``bin/`` scripts (``#!`` lines of console
    scripts, ``activate``), ``pyvenv.cfg`` and the top-level ``.pth`` files."""
    old, new = os.fsencode(template), os.fsencode(root)
    bin_dir = root / "bin"
    files = [root / "pyvenv.cfg", *bin_dir.iterdir(), *_site_packages(root).glob("*.pth")]
    for path in files:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _RELOCATE_MAX_BYTES:
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))


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
