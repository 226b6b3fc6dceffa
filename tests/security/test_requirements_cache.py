"""No rank reaches another job's requirements environment (process executor).

Each job runs in its own copy of the cached template (:mod:`smlaunch.runtime.requirements_cache`); the
ranks see the cache read-only but for that copy (:func:`smlaunch.runtime.requirements_cache.seal_hook`).
A rank written as SageMaker scripts are (``VIRTUAL_ENV``, ``site.getsitepackages()``) walks from its
environment to the template it was copied from and to the copy of another job running beside it, and
tries to plant a ``.pth`` and to patch a module in each, as does a job without ``requirements.txt``; a
later job with the same ``requirements.txt`` sees none of it, while the rank's own run-time ``pip
install`` keeps working.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, contract
from smlaunch.contract import mounts
from smlaunch.runtime.requirements_cache import READY_MARKER, seal_hook
from smlaunch.sdk.backends.emulated.executors.process.spawn import PrivateOptMl
from smlaunch.sdk.pytorch import PyTorch
from tests._wheels import make_wheel
from tests.functional._local_helpers import kill_leftover_jobs

PR_SET_DUMPABLE = 4

if sys.platform != "linux":
    pytest.skip("the cache is sealed in each rank's mount namespace (Linux)", allow_module_level=True)

VICTIM = """
import json, os, subprocess, sys, time
from pathlib import Path

signals = Path(os.environ["SIGNALS"])
(signals / "victim-ready").touch()
deadline = time.monotonic() + 120
while not (signals / "intruder-done").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
probe = "import os, smlaunch_probe; print(smlaunch_probe.VALUE, os.environ.get('SMLAUNCH_PLANTED'))"
seen = subprocess.check_output([sys.executable, "-c", probe], text=True).split()
Path(os.environ["SM_MODEL_DIR"], "seen.json").write_text(json.dumps(seen))
"""

INTRUDER = """
import json, os, site, subprocess, sys, time
from pathlib import Path

signals = Path(os.environ["SIGNALS"])
deadline = time.monotonic() + 120
while not (signals / "victim-ready").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
own = Path(os.environ["VIRTUAL_ENV"])
site_packages = Path(site.getsitepackages()[0]).relative_to(own)
# Every environment it can find: beside its own (other jobs' copies), and one level up (templates).
targets = sorted(
    {p for p in [*own.parent.iterdir(), *own.parent.parent.iterdir()] if (p / site_packages).is_dir()} - {own}
)
tried = {}
for target in targets:
    for name, text in (("zz-planted.pth", "import os; os.environ['SMLAUNCH_PLANTED'] = '1'\\n"),
                       ("smlaunch_probe.py", "VALUE = 'poisoned'\\n")):
        try:
            with open(target / site_packages / name, "w") as handle:
                handle.write(text)
            tried[f"{target.name}/{name}"] = "written"
        except OSError as error:
            tried[f"{target.name}/{name}"] = type(error).__name__
# Its own environment stays its own to change: a run-time pip install, a .pth.
pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", os.environ["WHEELS"]]
subprocess.check_call(pip + ["smlaunch_probe==0.9"])
(own / site_packages / "zz-own.pth").write_text("import os; os.environ['SMLAUNCH_OWN'] = '1'\\n")
probe = "import os, smlaunch_probe; print(smlaunch_probe.VALUE, os.environ.get('SMLAUNCH_OWN'))"
mine = subprocess.check_output([sys.executable, "-c", probe], text=True).split()
Path(os.environ["SM_MODEL_DIR"], "seen.json").write_text(json.dumps({"tried": tried, "mine": mine}))
(signals / "intruder-done").touch()
"""


BARE = """
import json, os, site
from pathlib import Path

# No requirements.txt, so no VIRTUAL_ENV: the cache is where the store is.
cache = Path(os.environ["SM_MODEL_DIR"]).parents[3] / ".requirements"
tried = {}
for target in cache.iterdir():
    for found in target.glob("lib/python*/site-packages"):
        try:
            (found / "zz-planted.pth").write_text("import os; os.environ['SMLAUNCH_PLANTED'] = '1'\\n")
            tried[target.name] = "written"
        except OSError as error:
            tried[target.name] = type(error).__name__
Path(os.environ["SM_MODEL_DIR"], "seen.json").write_text(json.dumps(tried))
"""


def _estimator(tmp_path: Path, session: LocalSession, name: str, script: str, **kwargs: Any) -> PyTorch:
    source = tmp_path / f"src-{name}"
    source.mkdir()
    (source / "train.py").write_text(script)
    if script != BARE:
        (source / contract.REQUIREMENTS_FILE).write_text((tmp_path / contract.REQUIREMENTS_FILE).read_text())
    return PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
        **{"instance_count": 1, **kwargs},
    )


def _seen(root: Path, job: str) -> Any:
    return json.loads((root / job / "hosts" / "algo-1" / "model" / "seen.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_cannot_write_into_the_template_or_another_jobs_environment(tmp_path: Path) -> None:
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")
    wheels = tmp_path / "wheels"
    probe = make_wheel(wheels, "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'v1'\n"})
    make_wheel(wheels, "smlaunch_probe", "0.9", {"smlaunch_probe.py": "VALUE = 'v0.9'\n"})
    (tmp_path / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{probe}\n")
    root, signals = tmp_path / "jobs", tmp_path / "signals"
    signals.mkdir()
    session = LocalSession(root, stop_grace_seconds=5)
    environment = {"SIGNALS": str(signals), "WHEELS": str(wheels)}
    victim = _estimator(tmp_path, session, "victim", VICTIM, environment=environment)
    intruder = _estimator(tmp_path, session, "intruder", INTRUDER, environment=environment)
    bare = _estimator(tmp_path, session, "bare", BARE)
    later = _estimator(tmp_path, session, "later", VICTIM, environment=environment)
    try:
        victim.fit(job_name="victim", wait=False)
        intruder.fit(job_name="intruder", wait=True, logs=False)
        assert victim.latest_training_job is not None
        victim.latest_training_job.wait(logs=False)
        (signals / "victim-ready").unlink()
        bare.fit(job_name="bare", wait=True, logs=False)
        later.fit(job_name="later", wait=True, logs=False)
    finally:
        kill_leftover_jobs(root)
    seen = _seen(root, "intruder")
    templates = [p for p in (root / ".requirements").iterdir() if (p / READY_MARKER).is_file()]
    assert len(templates) == 1, templates
    expected = {
        f"{where}/{name}"
        for where in (templates[0].name, "victim")
        for name in ("zz-planted.pth", "smlaunch_probe.py")
    }
    assert set(seen["tried"]) == expected, seen
    assert set(seen["tried"].values()) == {"OSError"}, seen  # read-only file system
    assert seen["mine"] == ["v0.9", "1"], seen
    assert _seen(root, "bare") == {templates[0].name: "OSError"}
    assert _seen(root, "victim") == ["v1", "None"]
    assert _seen(root, "later") == ["v1", "None"]
    log = "\n".join(session.backend().log_lines("later"))
    assert "reusing the environment" in log and "can write into the environments" not in log, log


def test_a_non_root_rank_in_a_host_namespace_writes_only_its_own_environment() -> None:
    """As a host runs without root: the host's user and mount namespace (where the cache is a mount
    of that namespace, as the store view makes it), the rank's sealed namespace nested in it."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' here")
    if os.geteuid() != 0:
        pytest.skip("becoming another user takes root")
    base = Path(tempfile.mkdtemp(prefix="smlaunch-seal-", dir="/tmp"))
    try:
        base.chmod(0o755)
        cache = base / "cache"
        dirs = [cache, cache / "template", cache / "jobs", cache / "jobs" / "mine", cache / "jobs" / "other"]
        for directory in dirs:
            directory.mkdir()
            os.chown(directory, nobody.pw_uid, nobody.pw_gid)
        seal = seal_hook(cache, cache / "jobs" / "mine", lambda line: pytest.fail(line))
        assert seal is not None
        libc = mounts.load_libc()
        assert libc is not None

        def become_nobody() -> None:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

        # What this machine lets nobody do, asked of util-linux, not of our code: a later failure is ours.
        refused = _refused_to_nobody(
            ["unshare", "--user", "--mount", "/bin/sh", "-c", f'cd "{cache}"'], become_nobody
        )
        if refused:
            pytest.skip(f"nobody cannot have a user and mount namespace reaching {cache} here: {refused}")

        def host_then_rank() -> None:
            become_nobody()
            libc.prctl(
                PR_SET_DUMPABLE, 1, 0, 0, 0
            )  # as a process started as nobody is: its /proc/self its own
            mounts.enter_namespace(libc)  # the host's namespaces
            bind = mounts.MS_BIND | mounts.MS_REC
            mounts.mount(libc, str(cache), str(cache), None, bind, "the cache in the host's view")
            seal()  # the rank's

        script = "".join(
            f'echo x > "{cache / where}/f" 2>/dev/null && echo "wrote {where}"; '
            for where in ("template", "jobs/other", "jobs/mine", "jobs")
        )
        # A hard link in its own environment would write through to the template: another mount.
        (cache / "template" / "module.py").write_text("VALUE = 1\n")
        os.chown(cache / "template" / "module.py", nobody.pw_uid, nobody.pw_gid)
        script += f'ln "{cache}/template/module.py" "{cache}/jobs/mine/module.py" 2>/dev/null && echo linked'
        written = _run_reporting(["/bin/sh", "-c", script], host_then_rank)
        assert written.stdout.splitlines() == ["wrote jobs/mine"], written.stdout + written.stderr
        assert [p.parent.name for p in cache.rglob("f")] == ["mine"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _refused_to_nobody(command: list[str], become_nobody: Callable[[], None]) -> str | None:
    """Why ``command`` run as nobody failed here, or None; None too where the command is missing."""
    if shutil.which(command[0]) is None:
        return None
    done = subprocess.run(command, preexec_fn=become_nobody, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def _run_reporting(command: list[str], hook: Callable[[], None]) -> subprocess.CompletedProcess[str]:
    """``command`` run with ``hook`` before ``exec``; if the hook raises, the test fails naming the
    exception (subprocess itself says only 'Exception occurred in preexec_fn')."""
    read, write = os.pipe()

    def reporting() -> None:
        try:
            hook()
        except BaseException as error:
            os.write(write, f"{type(error).__name__}: {error}".encode())
            raise

    try:
        return subprocess.run(
            command, preexec_fn=reporting, pass_fds=(write,), capture_output=True, text=True, check=False
        )
    except subprocess.SubprocessError as error:
        os.close(write)
        write = -1
        pytest.fail(f"the hook failed in the child: {os.read(read, 4096).decode() or error}")
    finally:
        if write >= 0:
            os.close(write)
        os.close(read)


def test_without_namespaces_the_log_says_the_cache_is_not_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(libc: ctypes.CDLL) -> None:
        raise OSError(1, "unshare: Operation not permitted")

    monkeypatch.setattr(mounts, "enter_namespace", refused)
    lines: list[str] = []
    assert seal_hook(tmp_path, tmp_path / "jobs" / "mine", lines.append) is None
    assert lines == [
        f"requirements.txt: the ranks can write into the environments of other jobs under {tmp_path} "
        "(no mount namespace for them here: [Errno 1] unshare: Operation not permitted)"
    ]


RANK_UNDER_MPI = """
import json, os
from pathlib import Path

rank, own = os.environ["OMPI_COMM_WORLD_RANK"], Path(os.environ["VIRTUAL_ENV"])
tried = {"node": os.environ.get("SLURMD_NODENAME")}
for where in [*own.parent.parent.iterdir(), own]:
    if where.is_dir() and where.name != "jobs":
        try:
            (where / f"rank-{rank}").write_text("x")
            tried[where.name] = "written"
        except OSError as error:
            tried[where.name] = type(error).__name__
Path(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json").write_text(json.dumps(tried))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs OpenMPI's mpirun")
def test_ranks_of_every_host_under_mpirun_are_sealed_too(tmp_path: Path) -> None:
    """One ``mpirun`` on the master starts the ranks of every emulated host: all are sealed (on
    Slurm: ``tests/slurm/test_slurm_mpi.py``)."""
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")
    probe = make_wheel(tmp_path / "wheels", "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'v1'\n"})
    (tmp_path / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{probe}\n")
    root = tmp_path / "jobs"
    estimator = _estimator(
        tmp_path,
        LocalSession(root, stop_grace_seconds=5),
        "mpi",
        RANK_UNDER_MPI,
        instance_count=2,
        distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
    )
    try:
        estimator.fit(job_name="sealed-mpi", wait=True, logs=False)
    finally:
        kill_leftover_jobs(root)
    hosts = root / "sealed-mpi" / "hosts"
    template = next(p.name for p in (root / ".requirements").iterdir() if (p / READY_MARKER).is_file())
    for rank in (0, 1):
        tried = json.loads((hosts / f"algo-{rank + 1}" / "model" / f"rank-{rank}.json").read_text())
        assert tried == {"node": None, template: "OSError", "sealed-mpi": "written"}, tried
