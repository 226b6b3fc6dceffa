"""smlaunch installed from its wheel beside ``sagemaker-training``: both console scripts keep their names.

``train`` is ``sagemaker-training``'s console script (the package every AWS training image ships);
ours are ``smlaunch`` and ``smlaunch-train``, so installing smlaunch after sagemaker-training leaves
``train`` running the toolkit. Offline: the checkout's wheel is built without build isolation, the
installed ``sagemaker-training`` of this test environment is packed back into a wheel, and both are
installed with ``--no-index --no-deps`` into a fresh venv that sees this environment's libraries
(their directory is on its path; their ``.pth`` files, among them a development install of
smlaunch, are not run).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "smlaunch", "estimator")
"""What the wheel is built from (copied, so the build leaves nothing in the checkout)."""


def _run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=240, **kwargs)


def _build_smlaunch_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name in PACKAGING_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            dist,
            source,
        ]
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("smlaunch-*.whl")
    return wheel


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _repack_installed(project: str, directory: Path) -> Path:
    """The installed distribution ``project`` as the wheel it was installed from: its files inside
    site-packages (not the scripts pip generated, nor pip's own markers), a fresh RECORD."""
    dist = metadata.distribution(project)
    info = next(f for f in dist.files or [] if f.name == "WHEEL").parent
    tags = Parser().parsestr(dist.read_text("WHEEL") or "").get_all("Tag") or []
    name = dist.metadata["Name"].replace("-", "_")
    wheel = directory / f"{name}-{dist.version}-{tags[0]}.whl"
    directory.mkdir(parents=True, exist_ok=True)
    skipped = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    record = ""
    with zipfile.ZipFile(wheel, "w") as whl:
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            if file.parent == info and file.name in skipped:
                continue
            data = Path(str(file.locate())).read_bytes()
            whl.writestr(file.as_posix(), data)
            record += _record_line(file.as_posix(), data)
        whl.writestr(f"{info.as_posix()}/RECORD", record + f"{info.as_posix()}/RECORD,,\n")
    return wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with sagemaker-training installed first, then smlaunch from its wheel."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    ours = _build_smlaunch_wheel(tmp_path)
    theirs = _repack_installed("sagemaker-training", tmp_path / "theirs")
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    for wheel in (theirs, ours):
        installed = _run(
            [sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--no-deps", wheel]
        )
        assert "Successfully installed" in installed.stdout, (
            installed.stdout[-3000:] + installed.stderr[-3000:]
        )
    # Then this environment's libraries (boto3, pydantic, ...), which the wheels installed without
    # their dependencies need: a plain path entry, so its .pth files (the checkout's editable
    # install) do not run. Only now: pip would take its sagemaker-training as installed already.
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    (Path(site) / "test-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def _environ(venv: Path, home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("SM_")}
    return dict(environ, PATH=f"{venv / 'bin'}{os.pathsep}{environ.get('PATH', '')}", HOME=str(home))


@pytest.mark.slow
def test_train_stays_sagemaker_trainings_after_smlaunch_is_installed(venv: Path, tmp_path: Path) -> None:
    train = shutil.which("train", path=str(venv / "bin"))
    assert train == str(venv / "bin" / "train")
    assert "from sagemaker_training.cli.train import main" in Path(train).read_text()
    # With no job to run, the toolkit's entry point says so in its own words.
    ran = _run(["train"], env=_environ(venv, tmp_path), cwd=tmp_path)
    assert ran.returncode != 0
    assert "sagemaker-training-toolkit" in ran.stdout + ran.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "says"),
    [("smlaunch", "usage: smlaunch"), ("smlaunch-train", "usage: smlaunch-train")],
)
def test_our_console_scripts_run_the_installed_smlaunch(
    venv: Path, tmp_path: Path, script: str, says: str
) -> None:
    ran = _run([script, "--help"], env=_environ(venv, tmp_path), cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert says in ran.stdout


@pytest.mark.slow
def test_the_wheel_holds_every_file_of_ours_and_only_our_console_scripts(venv: Path, tmp_path: Path) -> None:
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    where = _run(
        [
            venv / "bin" / "python",
            "-c",
            "import smlaunch, estimator; print(smlaunch.__file__, estimator.__file__)",
        ],
        env=_environ(venv, tmp_path),
        cwd=tmp_path,
    )
    assert where.stdout.split() == [
        str(site / "smlaunch" / "__init__.py"),
        str(site / "estimator" / "__init__.py"),
    ]
    tracked = _run(["git", "ls-files", "smlaunch", "estimator"], cwd=ROOT).stdout.split()
    missing = [f for f in tracked if not f.endswith(".md") and not (site / f).is_file()]
    assert missing == []  # the rank's sitecustomize, the shims, the image tables, py.typed
    (info,) = site.glob("smlaunch-*.dist-info")
    scripts = (info / "entry_points.txt").read_text()
    assert scripts.split("[console_scripts]")[1].split() == [
        "smlaunch",
        "=",
        "smlaunch.sdk.cli.main:main",
        "smlaunch-train",
        "=",
        "smlaunch.runtime.__main__:main",
    ]
