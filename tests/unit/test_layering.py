"""The notebook side stays light: importing ``estimator`` and planning a job loads no torch, no
supervisor, no watchdog and no launcher (the estimator imports only the pure shared layer of
``runtime``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("torch", "runtime.supervisor", "runtime.watchdog", "runtime.launchers", "runtime.rankboot")

PLAN = """
import json, sys
from estimator import PyTorch, LocalSession
est = PyTorch(entry_point="train.py", source_dir={src!r}, role="arn:aws:iam::123456789012:role/R",
              instance_type="ml.p3.16xlarge", instance_count=2, framework_version="2.1.0",
              py_version="py310", hyperparameters={{"epochs": 1}},
              distribution={{"torch_distributed": {{"enabled": True}}}},
              sagemaker_session=LocalSession(root={root!r}))
est.plan({{"train": "file://{src}"}})
forbidden = {forbidden!r}
print(json.dumps(sorted(m for m in sys.modules if m.startswith(forbidden))))
"""


def test_importing_the_estimator_and_planning_loads_no_torch_supervisor_or_launcher(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    code = PLAN.format(src=str(src), root=str(tmp_path / "jobs"), forbidden=FORBIDDEN)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
