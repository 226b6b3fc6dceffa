"""The cache of layered environments (``SMLAUNCH_REQUIREMENTS_CACHE``): where a job's
``requirements.txt`` goes when its hosts share the user's interpreter (the local process executor).
What gets installed, and when, is :mod:`smlaunch.runtime.requirements`'s; this module owns the
environments pip installs into, their copies, their locks and their sealing from the ranks.

The cache directory holds *templates*: virtual environments keyed by the SHA-256 of
``requirements.txt`` and the interpreter (``sys.prefix``, version), that see every package of the
user's interpreter (its site directories are added by a ``.pth`` file, so editable installs keep
working) and hold only what pip adds or upgrades. Pip, run by the template's Python, finds the
user's packages installed and skips them; a requirement that needs another version is installed
into the template, where it shadows the user's copy for the ranks only (pip never uninstalls outside
the environment it runs in). The first job with a given ``requirements.txt`` builds its template
under a file lock; later jobs reuse it without running pip. A requirement naming a local path
(``./pkg``, ``-r other.txt``) is read when the template is built: changing only that file needs a
changed ``requirements.txt`` (or an emptied cache) to take effect.

No job ever runs in a template. Each job gets a *copy* of it, ``<cache>/jobs/<job name>``
(:class:`JobEnvironment`), made by the first of its hosts and shared by its hosts as they share the
user's interpreter; the ranks run its Python, with its ``bin/`` first on ``PATH`` and
``VIRTUAL_ENV`` naming it. Whatever a job writes there (a ``.pth`` file, a run-time
``pip install x==old``, a patched module) dies with the job, as a SageMaker job's changes die with
its instance: every job starts from the template as pip left it. Files are cloned (reflinks, sharing
blocks until either side writes) where the file system can, else copied; never hard-linked, since a
write into a hard-linked file (which no file mode stops for root) would reach the template. The copy
costs a small fraction of pip's run (``benchmarks/requirements_env.py``). Absolute paths to the
template in ``bin/`` (console scripts' ``#!`` lines, ``activate``), ``pyvenv.cfg`` and top-level
``.pth`` files are rewritten to the copy. Each host holds a shared lock on
``<cache>/jobs/<job name>.lock`` while it runs; the last to leave removes the copy. A copy nobody
holds (its hosts were killed) is removed by the job's agent when the job ends
(:func:`remove_job_environment`), or else by the next job that prepares one in the same cache.

The ranks write into their copy and nowhere else in the cache: every process the host runtime
starts runs in a mount namespace of its own where the cache is read-only but for the job's copy,
bind-mounted back writable (:func:`seal_hook`; a job without a copy gets the whole cache read-only),
so no path (``$VIRTUAL_ENV/..``, the template's absolute path) leads a rank to a template or to
another running job's copy. The runtime itself keeps the cache writable: it builds templates and
copies, and removes the job's copy at the end. Limits: a root rank that calls ``mount``/``umount``
itself, or a rank that goes through ``/proc/<pid>/root`` of a process outside its namespace, is
beyond this (as for the job store).
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
from collections.abc import Callable
from pathlib import Path
from typing import IO

from smlaunch import contract

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
Install = Callable[[Path], None]
"""Installs ``requirements.txt`` with the given Python (a template's, being built); raises on failure."""


def environment_key(requirements: bytes) -> str:
    """The cache key of a layered environment: requirements.txt's bytes and this interpreter."""
    digest = hashlib.sha256(requirements)
    digest.update(f"\0{sys.prefix}\0{sys.version}".encode())
    return digest.hexdigest()[:24]


def layered_environment(code_dir: Path, cache: Path, job: str, install: Install, log: Log) -> JobEnvironment:
    """The environment of ``job`` for ``code_dir/requirements.txt``: a copy of the cached template,
    which is built first if needed (by ``install(<the template's python>)``, called only then)."""
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
                _build_template(template, code_dir, install, log)
            own.copy_from(template)
            log(f"{contract.REQUIREMENTS_FILE}: the job's environment {own.root} (a copy of {template})")
    except BaseException:
        own.release()
        raise
    return own


def _build_template(root: Path, code_dir: Path, install: Install, log: Log) -> None:
    shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
    log(f"{contract.REQUIREMENTS_FILE}: building the environment {root}, layered over {sys.prefix}")
    try:
        _create_layer(root)
        install(root / "bin" / "python")
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
        ``bin/`` leads ``PATH`` as the directory of :attr:`python`: :mod:`smlaunch.runtime.interpreter`)."""
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
    own ``pip install`` works. Tried once here (:func:`smlaunch.contract.mounts.unavailable`); where it
    cannot be had, says why in the log and returns None (the ranks then reach the whole cache).

    The host runtime itself keeps the cache writable (it builds templates and removes the job's
    environment at the end); only what it starts is sealed. Each rank gets a namespace of its own
    (one for ``mpirun`` and all it starts), nested in the host's: a user namespace too when not
    root, as a mount the host's user namespace made is read-only for ranks only through a nested one.
    """
    from smlaunch.contract import mounts

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
