"""SDK habits smlaunch does not provide fail with advice; entry points answer ``--help``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from smlaunch import LocalSession, PyTorch, UnsupportedFeatureError


def test_deploy_says_it_is_not_supported_and_what_to_use(tmp_path) -> None:
    (tmp_path / "train.py").write_text("")
    est = PyTorch(
        entry_point=str(tmp_path / "train.py"),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local",
        instance_count=1,
        sagemaker_session=LocalSession(root=tmp_path),
    )
    with pytest.raises(UnsupportedFeatureError, match=r"deploy\(\).*not supported.*PyTorchModel"):
        est.deploy(initial_instance_count=1, instance_type="ml.m5.large")


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ([sys.executable, "-m", "smlaunch.runtime", "--help"], "usage: smlaunch-train"),
        (
            [
                sys.executable,
                "-c",
                "import sys; from smlaunch.runtime.__main__ import main; "
                "sys.argv[0] = 'train'; sys.exit(main())",
                "--help",
            ],
            "usage: train",  # the image's `train` link
        ),
    ],
)
def test_runtime_help_prints_usage(command: list[str], usage: str, tmp_path) -> None:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage)
    assert "resourceconfig.json" in done.stdout
    assert not (tmp_path / "opt").exists()
