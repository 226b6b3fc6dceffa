"""``output_path``, ``checkpoint_s3_uri``, TensorBoard output and channels inside the local job store are
refused before anything is staged, naming the field: ``smlaunch rm``/``gc`` of a job would delete
what another job wrote or reads there. However the path is spelled: relative, through a symlink,
with ``..``. The default output path (the store itself: each job's artifacts in its own directory,
removed with it) still works; a channel or checkpoint prefix that holds the store is refused too
(the job would read the store, its own directory included).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch.sdk.debugger import TensorBoardOutputConfig
from smlaunch.sdk.errors import ConfigurationError
from tests.functional._local_helpers import kill_leftover_jobs, local_pytorch

REPO = Path(__file__).resolve().parents[2]
SMLAUNCH = (sys.executable, "-m", "smlaunch.sdk.cli.main")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    jobs = tmp_path / "home" / "jobs"
    yield jobs
    kill_leftover_jobs(jobs)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text(
        "import os\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'model.txt'), 'w').write('weights')\n"
    )
    return code


@pytest.fixture
def first(src: Path, root: Path) -> Path:
    """A finished job with the default output path: its model is in its own directory."""
    estimator = local_pytorch(src, root)
    estimator.fit(job_name="first", logs=False)
    model = root / "first" / "output" / "model.tar.gz"
    assert estimator.model_data == model.as_uri()
    return model


def _refused(estimator: Any, field: str, inputs: Any = None) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as refused:
        estimator.fit(inputs, job_name="second", logs=False)
    assert refused.value.field == field, refused.value
    return refused.value


def test_output_paths_inside_the_store_are_refused_however_spelled(
    src: Path, root: Path, first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "link-to-store"
    link.symlink_to(root)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in root.iterdir())
    for output_path in (
        (root / "first").as_uri(),  # another job's directory
        "home/jobs/first/mine",  # relative
        link.as_uri() + "/first/",  # through a symlink
        (tmp_path / "elsewhere" / ".." / "home" / "jobs" / "new").as_uri(),  # '..'
    ):
        error = _refused(local_pytorch(src, root, output_path=output_path), "output_path")
        assert "inside the job store" in str(error) and str(root) in str(error), error
    # <output_path>/<job> would be the store itself
    with pytest.raises(ConfigurationError, match="output_path") as refused:
        local_pytorch(src, root, output_path=root.parent.as_uri()).fit(job_name="jobs", logs=False)
    assert "inside the job store" in str(refused.value)
    assert sorted(p.name for p in root.iterdir()) == before  # nothing claimed, nothing staged
    assert not (root / "first" / "mine").exists() and not (root / "new").exists()
    assert first.is_file()

    # The store itself, as the default is, stays accepted: each job's artifacts in its own directory.
    explicit = local_pytorch(src, root, output_path=link.as_uri())
    explicit.fit(job_name="second", logs=False)
    assert explicit.latest_training_job is not None
    assert (root / "second" / "output" / "model.tar.gz").is_file()


def test_checkpoints_tensorboard_and_channels_inside_the_store_are_refused(
    src: Path, root: Path, first: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link-to-first"
    link.symlink_to(root / "first")
    before = sorted(p.name for p in root.iterdir())
    inside = (link / "checkpoints").as_uri()
    _refused(local_pytorch(src, root, checkpoint_s3_uri=inside), "checkpoint_s3_uri")
    holding = _refused(local_pytorch(src, root, checkpoint_s3_uri=tmp_path.as_uri()), "checkpoint_s3_uri")
    assert "holds the job store" in str(holding)
    tensorboard = TensorBoardOutputConfig(s3_output_path=(root / "tb").as_uri())
    _refused(
        local_pytorch(src, root, tensorboard_output_config=tensorboard),
        "tensorboard_output_config.s3_output_path",
    )
    _refused(local_pytorch(src, root), "inputs['train']", {"train": str(link / "output")})
    _refused(local_pytorch(src, root), "inputs['model']", {"model": first.as_uri()})
    _refused(local_pytorch(src, root), "inputs['all']", {"all": str(tmp_path)})
    assert sorted(p.name for p in root.iterdir()) == before
    assert not (root / "first" / "checkpoints").exists() and not (root / "tb").exists()

    outside = tmp_path / "data"
    outside.mkdir()
    (outside / "x.csv").write_text("1\n")
    fine = local_pytorch(src, root, checkpoint_s3_uri=(tmp_path / "ckpt").as_uri())
    fine.fit({"train": str(outside)}, job_name="second", logs=False)
    assert (root / "second" / "output" / "model.tar.gz").is_file()


def test_smlaunch_run_refuses_an_output_path_inside_the_store(src: Path, root: Path, first: Path) -> None:
    env = dict(os.environ, SMLAUNCH_HOME=str(root.parent), PYTHONPATH=str(REPO))
    result = subprocess.run(
        [*SMLAUNCH, "run", "train.py", "--source-dir", str(src), "--output-path", str(root / "first")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: --output-path='{(root / 'first').as_uri()}'"), result.stderr
    assert sorted(p.name for p in root.iterdir() if p.name != ".requirements") == ["first"]
