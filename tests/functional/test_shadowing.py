"""A user's module may take any name ours once had: ``runtime``, ``estimator``, ``contract``, ...

Both directions, on an emulated GPU instance type so that the rank bootstrap and the CUDA emulation
are loaded into every rank:

- **In ``source_dir``.** The script imports its own ``runtime.py``, ``estimator.py``, ... and gets
  them, as on SageMaker; none of those names is taken before the script's first line; the rank
  bootstrap and the CUDA emulation still run (``torch.cuda.is_available()`` is True) and the model
  is written.
- **Beside the notebook.** A notebook directory holding its own ``estimator.py``, ``runtime.py`` and
  ``contract.py`` still plans and fits with ``from smlaunch import PyTorch, LocalSession`` (the job's
  agent starts in that directory too).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from smlaunch.contract.processes import environment_importing_smlaunch
from tests.functional._dist_helpers import ROLE, run_job
from tests.functional._local_helpers import kill_leftover_jobs

if sys.platform != "linux":
    pytest.skip("the local backend's functional tests need Linux", allow_module_level=True)

GPU_TYPE = "ml.g5.xlarge"
"""One emulated GPU: the emulation is on (this machine has none), one rank keeps the job short."""

USER_NAMES = (
    "runtime",
    "estimator",
    "contract",
    "launchers",
    "rank",
    "sdk",
    "boot",
    "cuda_emulation",
    "after_import",
)
"""Plausible helper names that were, or are, names of ours (top-level packages before ``smlaunch/``,
its folders, the rank bootstrap's modules)."""


def _user_module(name: str) -> str:
    return f"WHO = 'the user\\'s {name}'\n"


SCRIPT = """
import importlib, json, os, pathlib, sys

NAMES = {names!r}
taken_before_the_script = sorted(n for n in NAMES if n in sys.modules)
import torch  # the CUDA emulation patches it here, importing what it needs of ours

mine = {{n: importlib.import_module(n) for n in NAMES}}
here = os.path.dirname(os.path.abspath(__file__))
facts = {{
    "taken_before_the_script": taken_before_the_script,
    "who": {{n: m.WHO for n, m in mine.items()}},
    "from_source_dir": sorted(n for n, m in mine.items() if os.path.dirname(m.__file__) == here),
    "cuda": torch.cuda.is_available(),
    "gpus": torch.cuda.device_count(),
    "emulated": "emulated" in torch.cuda.get_device_name(0),
    "bootstrap": "smlaunch.rank.boot" in sys.modules,
}}
pathlib.Path(os.environ["SM_MODEL_DIR"], "facts.json").write_text(json.dumps(facts))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "distribution",
    [None, {"torch_distributed": {"enabled": True}}],
    ids=["single-process", "torchrun"],
)
def test_source_dir_modules_named_as_ours_are_the_users(
    tmp_path: Path, distribution: dict[str, Any] | None
) -> None:
    run = run_job(
        tmp_path,
        SCRIPT.format(names=USER_NAMES),
        base_name="shadow",
        instance_type=GPU_TYPE,
        instance_count=1,
        distribution=distribution,
        files={f"{name}.py": _user_module(name) for name in USER_NAMES},
    )
    assert run.status == "Completed", run.reason + run.log[-3000:]
    facts = json.loads(run.tar_members()["facts.json"])
    assert facts == {
        "taken_before_the_script": [],
        "who": {name: f"the user's {name}" for name in USER_NAMES},
        "from_source_dir": sorted(USER_NAMES),
        "cuda": True,
        "gpus": 1,
        "emulated": True,
        "bootstrap": True,
    }
    assert "bootstrap failed" not in run.log
    assert "could not be installed" not in run.log


NOTEBOOK = """
import json, sys
import contract, estimator, runtime  # the notebook's own helpers, beside it

assert [contract.WHO, estimator.WHO, runtime.WHO] == [
    "the user's contract", "the user's estimator", "the user's runtime"], "not the notebook's own"
from smlaunch import LocalSession, PyTorch

pytorch = PyTorch(entry_point="train.py", source_dir={src!r}, role={role!r}, instance_type={gpu!r},
                  instance_count=1, framework_version="2.1.0", py_version="py310",
                  sagemaker_session=LocalSession(root={root!r}))
planned = pytorch.plan()
pytorch.fit(logs=False)
job = pytorch.latest_training_job
print(json.dumps({{"planned": planned.ResourceConfig.InstanceType, "model": pytorch.model_data,
                  "status": job.describe()["TrainingJobStatus"]}}))
"""

TRAIN = """
import os, pathlib
import torch

assert torch.cuda.is_available(), "CUDA emulation is off"
pathlib.Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text(torch.cuda.get_device_name(0))
"""


@pytest.mark.slow
def test_a_notebook_beside_its_own_estimator_and_runtime_modules_still_fits(tmp_path: Path) -> None:
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    for name in ("estimator", "runtime", "contract"):
        (notebook / f"{name}.py").write_text(_user_module(name))
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(textwrap.dedent(TRAIN))
    root = tmp_path / "jobs"
    code = NOTEBOOK.format(src=str(src), role=ROLE, gpu=GPU_TYPE, root=str(root))
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=notebook,  # '' (this directory) is first on the notebook's sys.path, as in Jupyter
            env=environment_importing_smlaunch(),
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        kill_leftover_jobs(root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["planned"] == GPU_TYPE
    assert result["status"] == "Completed"
    with tarfile.open(result["model"].removeprefix("file://")) as tar:
        member = tar.extractfile("model.txt")
        assert member is not None
        assert b"emulated" in member.read()
