"""requirements.txt: the toolkit's choice of what to install, the toolkit's command inside a host's own
interpreter, and the cached environment layered over the user's interpreter (local processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import contract
from runtime.requirements import (
    READY_MARKER,
    InstallRequirementsError,
    environment_key,
    prepare,
    toolkit_pip_arguments,
)
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
    assert prepare(code, "train.py", environ, logged.append) == sys.executable
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
    assert prepare(tmp_path, "train.py", environ, logged.append) == sys.executable
    assert logged == ["requirements.txt not installed (SMLAUNCH_INSTALL_REQUIREMENTS=0)"]


def _freeze() -> str:
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **PIP_QUIET},
    ).stdout


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
    python = prepare(code, "train.py", environ, logged.append)

    key = environment_key((code / contract.REQUIREMENTS_FILE).read_bytes())
    assert python == str(cache / key / "bin" / "python")
    assert (cache / key / READY_MARKER).is_file()
    assert _freeze() == before  # the user's interpreter is untouched
    assert any(
        "Successfully installed" in line and "smlaunch-probe" in line.replace("_", "-") for line in logged
    )
    assert not any("psutil" in line and "Successfully installed" in line for line in logged)
    probe = subprocess.run(
        [
            python,
            "-c",
            "import iniconfig, psutil, smlaunch_probe, estimator; "
            "print(smlaunch_probe.VALUE, getattr(iniconfig, 'FAKE', False))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["probe", "True"]  # the layer wins; the user's packages are seen
    assert not hasattr(iniconfig, "FAKE")

    for wheel in (new, old):
        wheel.unlink()  # pip would fail now: a second preparation must not run it
    again: list[str] = []

    def no_codeartifact(region: str) -> None:
        raise AssertionError("a cached environment needs no package index")

    reuse = {**environ, "CA_REPOSITORY_ARN": "arn:aws:codeartifact:us-east-1:111122223333:repository/d/r"}
    assert prepare(code, "train.py", reuse, again.append, codeartifact=no_codeartifact) == python
    assert again == [f"requirements.txt: reusing the environment {cache / key} (nothing to install)"]


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
