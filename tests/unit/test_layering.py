"""The notebook side stays light: importing ``estimator`` and planning a job loads no torch, no
supervisor, no watchdog and no launcher; the estimator imports only the documented shared layer of
``runtime`` (listed in ``runtime/__init__.py`` and ``docs/architecture.md``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import runtime

FORBIDDEN = ("torch", "runtime.supervisor", "runtime.watchdog", "runtime.launchers", "runtime.rankboot")

SHARED_LAYER = set(runtime.SHARED_LAYER)
"""Every ``runtime`` module the estimator may load: the list ``runtime/__init__.py`` documents."""

PLAN = """
import importlib, json, pkgutil, sys
import estimator
from estimator import PyTorch, LocalSession
est = PyTorch(entry_point="train.py", source_dir={src!r}, role="arn:aws:iam::123456789012:role/R",
              instance_type="ml.p3.16xlarge", instance_count=2, framework_version="2.1.0",
              py_version="py310", hyperparameters={{"epochs": 1}},
              distribution={{"torch_distributed": {{"enabled": True}}}},
              environment={{"SMLAUNCH_FAULTS": '[{{"kind": "crash", "rank": 1, "after_seconds": 3}}]'}},
              sagemaker_session=LocalSession(root={root!r}))
est.plan({{"train": "file://{src}"}})
if {every_module!r}:
    for found in pkgutil.walk_packages(estimator.__path__, "estimator."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "runtime")))))
"""


def _loaded(tmp_path: Path, every_module: bool) -> list[str]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    code = PLAN.format(src=str(src), root=str(tmp_path / "jobs"), every_module=every_module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_estimator_and_planning_loads_no_torch_supervisor_or_launcher(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, every_module=False)
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []
    assert "runtime.faults" in loaded  # the fault spec was parsed in the notebook
    assert sorted(set(loaded) - SHARED_LAYER) == []


def test_every_estimator_module_loads_only_the_documented_shared_layer(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, every_module=True)
    assert sorted(set(loaded) - SHARED_LAYER) == [], "the estimator imports runtime beyond its shared layer"


def test_the_shared_layer_is_documented_in_the_runtime_package_and_the_architecture_page() -> None:
    assert runtime.__doc__ is not None
    architecture = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    for module in SHARED_LAYER - {"runtime"}:
        assert f":mod:`{module}`" in runtime.__doc__, module
        assert f"`{module.split('.')[1]}.py`" in architecture, module
    for heavy in FORBIDDEN:
        assert not any(m == heavy or m.startswith(heavy + ".") for m in SHARED_LAYER), heavy
