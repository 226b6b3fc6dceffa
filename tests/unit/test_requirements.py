"""requirements.txt: the toolkit's choice of what to install, the toolkit's command inside a host's own
interpreter, and the cached environment layered over the user's interpreter (local processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.runtime.interpreter import job_path
from smlaunch.runtime.requirements import (
    InstallRequirementsError,
    Prepared,
    prepare,
    toolkit_pip_arguments,
)
from smlaunch.runtime.requirements_cache import JOBS_DIR, READY_MARKER, JobEnvironment, environment_key
from tests._wheels import make_wheel

MISSING_WHEEL = "missing-0.1-py3-none-any.whl"
PIP_QUIET = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


@pytest.mark.parametrize(
    ("files", "entry_point", "expected"),
    [
        (["requirements.txt"], "train.py", ["-r", "requirements.txt"]),
        ([], "train.py", None),
        (["requirements.txt"], "train.sh", None),  # a command: the toolkit installs nothing
        (["requirements.txt"], "train", None),
        (["requirements.txt", "setup.py"], "train.py", [".", "-r", "requirements.txt"]),
        (["setup.py"], "train.py", ["."]),
    ],
)
def test_what_the_toolkit_installs(
    tmp_path: Path, files: list[str], entry_point: str, expected: list[str] | None
) -> None:
    for name in files:
        (tmp_path / name).write_text("")
    assert toolkit_pip_arguments(tmp_path, entry_point) == expected


@pytest.mark.slow
def test_without_a_cache_pip_installs_into_the_interpreter_as_the_toolkit_does(tmp_path: Path) -> None:
    code = tmp_path / "code"
    wheel = make_wheel(tmp_path / "wheels", "h2demo", "0.1", {"h2demo/__init__.py": "VALUE = 42\n"})
    code.mkdir()
    (code / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{wheel}\n")
    target = tmp_path / "site"  # PIP_TARGET keeps the test's own interpreter untouched
    environ = {**os.environ, **PIP_QUIET, "PIP_TARGET": str(target)}
    logged: list[str] = []
    prepared = prepare(code, "train.py", environ, logged.append)
    assert (prepared.python, prepared.environ, prepared.job_environment) == (sys.executable, {}, None)
    assert (target / "h2demo" / "__init__.py").read_text() == "VALUE = 42\n"
    assert logged[0].endswith("-m pip install -r requirements.txt")
    assert any(line.startswith("pip: ") for line in logged)


def test_failed_pip_raises_with_its_output(tmp_path: Path) -> None:
    (tmp_path / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{tmp_path / MISSING_WHEEL}\n")
    with pytest.raises(InstallRequirementsError, match=r"pip install -r requirements\.txt exited") as e:
        prepare(tmp_path, "train.py", {**os.environ, **PIP_QUIET}, lambda _: None)
    assert MISSING_WHEEL in str(e.value)


def test_install_requirements_off_runs_no_pip(tmp_path: Path) -> None:
    (tmp_path / contract.REQUIREMENTS_FILE).write_text("no-such-package-anywhere==1\n")
    logged: list[str] = []
    environ = {contract.SMLAUNCH_INSTALL_REQUIREMENTS: "0", "PATH": ""}
    assert prepare(tmp_path, "train.py", environ, logged.append).python == sys.executable
    assert logged == ["requirements.txt not installed (SMLAUNCH_INSTALL_REQUIREMENTS=0)"]


def _freeze() -> str:
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **PIP_QUIET},
    ).stdout


def _job(environ: dict[str, str], name: str) -> dict[str, str]:
    return {**environ, contract.TRAINING_JOB_NAME_ENV: name}


def _ranks_environ(environ: dict[str, str], prepared: Prepared) -> dict[str, str]:
    """The environment smlaunch.runtime.__main__ gives the ranks after prepare()."""
    path = job_path(prepared.python, environ.get("PATH"))
    return {**environ, **prepared.environ, "PATH": path}


@pytest.mark.slow
def test_layered_environment_shadows_for_the_ranks_only_and_is_reused(tmp_path: Path) -> None:
    import iniconfig  # installed with pytest: the package this test's requirements downgrade

    code = tmp_path / "code"
    code.mkdir()
    wheels = tmp_path / "wheels"
    new = make_wheel(
        wheels, "smlaunch_probe", "1.0", {"smlaunch_probe.py": "VALUE = 'probe'\n"}, requires=("psutil",)
    )  # satisfied by the user's interpreter: not installed again
    old = make_wheel(wheels, "iniconfig", "0.0.1", {"iniconfig/__init__.py": "FAKE = True\n"})
    (code / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{new}\n{old}\n")
    cache = tmp_path / "envs"
    environ = {**os.environ, **PIP_QUIET, contract.SMLAUNCH_REQUIREMENTS_CACHE: str(cache)}
    before = _freeze()
    logged: list[str] = []
    first = prepare(code, "train.py", _job(environ, "job-1"), logged.append)

    key = environment_key((code / contract.REQUIREMENTS_FILE).read_bytes())
    template, own = cache / key, cache / JOBS_DIR / "job-1"
    assert first.python == str(own / "bin" / "python")
    assert first.environ == {"VIRTUAL_ENV": str(own)}
    assert _ranks_environ(environ, first)["PATH"].split(os.pathsep)[0] == str(own / "bin")
    assert (template / READY_MARKER).is_file()
    assert _freeze() == before  # the user's interpreter is untouched
    assert any(
        "Successfully installed" in line and "smlaunch-probe" in line.replace("_", "-") for line in logged
    )
    assert not any("psutil" in line and "Successfully installed" in line for line in logged)
    assert logged[-1] == f"requirements.txt: the job's environment {own} (a copy of {template})"
    probe = subprocess.run(
        [
            first.python,
            "-c",
            "import iniconfig, psutil, smlaunch_probe, estimator, sys; "
            "print(smlaunch_probe.VALUE, getattr(iniconfig, 'FAKE', False), sys.prefix)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["probe", "True", str(own)]  # the layer wins; the user's packages are seen
    assert not hasattr(iniconfig, "FAKE")

    for wheel in (new, old):
        wheel.unlink()  # pip would fail now: a second preparation must not run it
    again: list[str] = []

    def no_codeartifact(region: str) -> None:
        raise AssertionError("a cached environment needs no package index")

    reuse = {**environ, "CA_REPOSITORY_ARN": "arn:aws:codeartifact:us-east-1:111122223333:repository/d/r"}
    second = prepare(code, "train.py", _job(reuse, "job-2"), again.append, codeartifact=no_codeartifact)
    assert second.python == str(cache / JOBS_DIR / "job-2" / "bin" / "python")
    assert again == [
        f"requirements.txt: reusing the environment {template} (nothing to install)",
        f"requirements.txt: the job's environment {cache / JOBS_DIR / 'job-2'} (a copy of {template})",
    ]
    first.release()
    second.release()
    assert not own.exists() and not (cache / JOBS_DIR / "job-2").exists()
    assert (template / READY_MARKER).is_file()


def _template_with_a_tool(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A code dir whose requirements.txt installs a package with a console script, and an environ."""
    code = tmp_path / "code"
    code.mkdir()
    tool = make_wheel(
        tmp_path / "wheels",
        "smlaunch_tool",
        "1.0",
        {
            "smlaunch_tool.py": "import sys\ndef main():\n    print(sys.prefix)\n",
            "smlaunch_tool-1.0.dist-info/entry_points.txt": (
                "[console_scripts]\nsmlaunch-tool = smlaunch_tool:main\n"
            ),
        },
    )
    (code / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{tool}\n")
    return code, {**os.environ, **PIP_QUIET, contract.SMLAUNCH_REQUIREMENTS_CACHE: str(tmp_path / "envs")}


@pytest.mark.slow
def test_what_a_job_writes_into_its_environment_never_reaches_the_next_job(tmp_path: Path) -> None:
    code, environ = _template_with_a_tool(tmp_path)
    first = prepare(code, "train.py", _job(environ, "writer"), lambda _: None)
    assert first.job_environment is not None
    site = first.job_environment.root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (site / "site-packages" / "planted.pth").write_text("import os; os.environ['PLANTED'] = '1'\n")
    (site / "site-packages" / "smlaunch_tool.py").write_text("def main():\n    print('patched')\n")
    # The console script runs in the job's own environment, whatever its path.
    tool = subprocess.run(
        ["smlaunch-tool"], env=_ranks_environ(environ, first), capture_output=True, text=True, check=True
    )
    assert tool.stdout.strip() == "patched"

    second = prepare(code, "train.py", _job(environ, "reader"), lambda _: None)
    check = (
        "import inspect, os, smlaunch_tool; "
        "print(os.environ.get('PLANTED'), 'patched' in inspect.getsource(smlaunch_tool))"
    )
    seen = subprocess.run([second.python, "-c", check], capture_output=True, text=True, check=True)
    assert seen.stdout.split() == ["None", "False"]
    tool = subprocess.run(
        ["smlaunch-tool"], env=_ranks_environ(environ, second), capture_output=True, text=True, check=True
    )
    assert tool.stdout.strip() == second.environ["VIRTUAL_ENV"]
    # `pip install` in a job installs into the job's environment, with the user's pip.
    pip = shutil.which("pip", path=_ranks_environ(environ, second)["PATH"])
    assert pip == second.environ["VIRTUAL_ENV"] + "/bin/pip"
    assert Path(pip).read_text().splitlines()[0] == f"#!{second.python}"
    subprocess.run([pip, "--version"], capture_output=True, check=True)
    first.release()
    second.release()


@pytest.mark.slow
def test_the_hosts_of_a_job_share_its_environment_and_the_last_removes_it(tmp_path: Path) -> None:
    code, environ = _template_with_a_tool(tmp_path)
    jobs = Path(environ[contract.SMLAUNCH_REQUIREMENTS_CACHE]) / JOBS_DIR
    logged: list[str] = []
    hosts = [prepare(code, "train.py", _job(environ, "pair"), logged.append) for _ in range(2)]
    assert {h.python for h in hosts} == {str(jobs / "pair" / "bin" / "python")}
    assert logged[-1] == f"requirements.txt: using the job's environment {jobs / 'pair'}"
    hosts[0].release()
    hosts[0].release()  # idempotent
    assert (jobs / "pair" / READY_MARKER).is_file()  # the other host still runs there
    hosts[1].release()
    assert sorted(jobs.iterdir()) == []


@pytest.mark.slow
def test_an_environment_its_hosts_left_without_releasing_is_removed_by_the_next_job(tmp_path: Path) -> None:
    code, environ = _template_with_a_tool(tmp_path)
    jobs = Path(environ[contract.SMLAUNCH_REQUIREMENTS_CACHE]) / JOBS_DIR
    killed = subprocess.run(  # a host killed before its last step: it never releases
        [
            sys.executable,
            "-c",
            "import os, sys; from smlaunch.runtime.requirements import prepare; "
            "prepare(sys.argv[1], 'train.py', os.environ, print); os._exit(9)",
            str(code),
        ],
        env=_job(environ, "killed"),
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 9, killed.stderr
    assert (jobs / "killed" / READY_MARKER).is_file()
    running = prepare(code, "train.py", _job(environ, "running"), lambda _: None)
    assert not (jobs / "killed").exists() and not (jobs / "killed.lock").exists()
    later = prepare(code, "train.py", _job(environ, "later"), lambda _: None)
    assert (jobs / "running" / READY_MARKER).is_file()  # held: never swept
    running.release()
    later.release()


def test_a_failed_layer_is_not_kept(tmp_path: Path) -> None:
    (tmp_path / contract.REQUIREMENTS_FILE).write_text(f"--no-index\n{tmp_path / MISSING_WHEEL}\n")
    cache = tmp_path / "envs"
    environ = {**os.environ, **PIP_QUIET, contract.SMLAUNCH_REQUIREMENTS_CACHE: str(cache)}
    with pytest.raises(InstallRequirementsError):
        prepare(tmp_path, "train.py", environ, lambda _: None)
    key = environment_key((tmp_path / contract.REQUIREMENTS_FILE).read_bytes())
    assert not (cache / key).exists()


class FakeCodeArtifact:
    """The two CodeArtifact calls the toolkit makes, answering for a ``file://`` pip index."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.calls: list[tuple[str, dict[str, str]]] = []

    def get_authorization_token(self, **kwargs: str) -> dict[str, str]:
        self.calls.append(("get_authorization_token", kwargs))
        return {"authorizationToken": "SECRET-TOKEN"}

    def get_repository_endpoint(self, **kwargs: str) -> dict[str, str]:
        self.calls.append(("get_repository_endpoint", kwargs))
        return {"repositoryEndpoint": self.endpoint}


@pytest.mark.slow
def test_ca_repository_arn_installs_from_that_codeartifact_repository(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "wheels", "smlaunch_probe", "1.0", {"smlaunch_probe.py": "V = 1\n"})
    project = tmp_path / "pypi" / "simple" / "smlaunch-probe"  # what the repository's index serves
    project.mkdir(parents=True)
    (project / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    code = tmp_path / "code"
    code.mkdir()
    (code / contract.REQUIREMENTS_FILE).write_text("smlaunch_probe==1.0\n")
    fake = FakeCodeArtifact((tmp_path / "pypi").as_uri() + "/")
    regions: list[str] = []

    def client(region: str) -> FakeCodeArtifact:
        regions.append(region)
        return fake

    arn = "arn:aws:codeartifact:eu-west-1:111122223333:repository/my-domain/pypi"
    environ = {**os.environ, **PIP_QUIET, "PIP_TARGET": str(tmp_path / "site"), "CA_REPOSITORY_ARN": arn}
    logged: list[str] = []
    prepare(code, "train.py", environ, logged.append, codeartifact=client)
    assert (tmp_path / "site" / "smlaunch_probe.py").is_file()
    assert regions == ["eu-west-1"]
    assert fake.calls == [
        ("get_authorization_token", {"domain": "my-domain", "domainOwner": "111122223333"}),
        (
            "get_repository_endpoint",
            {"domain": "my-domain", "domainOwner": "111122223333", "repository": "pypi", "format": "pypi"},
        ),
    ]
    assert "pip index: CodeArtifact repository my-domain/pypi of 111122223333 (eu-west-1)" in logged
    assert not any("SECRET-TOKEN" in line for line in logged)


def test_a_malformed_ca_repository_arn_is_refused(tmp_path: Path) -> None:
    (tmp_path / contract.REQUIREMENTS_FILE).write_text("x\n")
    environ = {"CA_REPOSITORY_ARN": "arn:aws:s3:::bucket"}
    with pytest.raises(InstallRequirementsError, match="is not a CodeArtifact repository ARN"):
        prepare(tmp_path, "train.py", environ, lambda _: None, codeartifact=lambda region: None)


@pytest.mark.parametrize(
    "hps",
    [
        {},
        {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"},
        {contract.HP_SMDDP_ENABLED: "true"},
        {contract.HP_MPI_ENABLED: "true", contract.HP_MPI_PROCESSES_PER_HOST: "2"},
    ],
)
def test_every_launcher_starts_its_ranks_in_the_job_environment(tmp_path: Path, hps: dict[str, str]) -> None:
    from smlaunch.runtime.launchers import select_launcher
    from tests.unit.test_launchers_plan import env_for

    root = tmp_path / "envs" / JOBS_DIR / "job-1"
    with open(tmp_path / "job-1.lock", "a") as lock:
        variables = JobEnvironment(root, lock).environ
    env = env_for(tmp_path, hps, environ={**os.environ, contract.SMLAUNCH_NUM_GPUS: "0"})
    env.environ.update({**variables, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    plan = select_launcher(env, python=str(root / "bin" / "python")).plan()
    for spec in plan.processes:  # the host's PATH and VIRTUAL_ENV, as smlaunch.runtime.__main__ set them
        assert (spec.env["VIRTUAL_ENV"], spec.env["PATH"]) == (str(root), env.environ["PATH"])
    if plan.launcher == "mpi":  # and mpirun hands both to the ranks of every host
        exported = [plan.processes[0].argv[i + 1] for i, a in enumerate(plan.processes[0].argv) if a == "-x"]
        assert {"PATH", "VIRTUAL_ENV"} <= set(exported)


@pytest.mark.parametrize("cp", ["gnu", "failing", "missing"])
def test_a_copy_keeps_modes_mtimes_and_links_with_or_without_cp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cp: str
) -> None:
    from smlaunch.runtime import requirements_cache

    source = tmp_path / "template"
    (source / "bin").mkdir(parents=True)
    (source / "lib").mkdir()
    tool = source / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    os.utime(tool, ns=(1_000_000_000, 1_000_000_000))
    (source / "bin" / "python").symlink_to(sys.executable)
    (source / "lib64").symlink_to("lib")
    monkeypatch.setattr(
        requirements_cache, "_CP", {"gnu": requirements_cache._CP, "failing": ("false",)}.get(cp, ("no-cp",))
    )
    dest = tmp_path / "copy"
    requirements_cache._copy_tree(source, dest)
    copied = (dest / "bin" / "tool").stat()
    assert (copied.st_mode & 0o777, copied.st_mtime_ns) == (0o755, 1_000_000_000)
    assert os.readlink(dest / "bin" / "python") == sys.executable
    assert os.readlink(dest / "lib64") == "lib"
    (dest / "bin" / "tool").write_text("changed\n")
    assert tool.read_text() == "#!/bin/sh\n"
