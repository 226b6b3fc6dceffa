"""Scripts that hard-code ``/opt/ml`` run as processes: each emulated host sees its own tree there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from estimator import LocalSession
from estimator.backends.local.executors.process import PrivateOptMl
from runtime import contract
from tests.functional._local_helpers import kill_leftover_jobs, make_spec, wait_terminal

if sys.platform != "linux":
    pytest.skip("mount namespaces are Linux's", allow_module_level=True)

LITERAL_PATHS = """
import argparse, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
with open("/opt/ml/input/config/resourceconfig.json") as handle:
    host = json.load(handle)["current_host"]
rows = open("/opt/ml/input/data/train/data.csv").read().splitlines()
os.makedirs("/opt/ml/model/weights", exist_ok=True)
with open(f"/opt/ml/model/weights/{host}.json", "w") as handle:
    json.dump({"host": host, "env_host": os.environ["SM_CURRENT_HOST"], "rows": len(rows),
               "epochs": args.epochs, "model_dir": os.environ["SM_MODEL_DIR"]}, handle)
with open("/opt/ml/output/data/metrics.txt", "w") as handle:
    handle.write(host)
print(f"{host} wrote /opt/ml/model/weights/{host}.json")
"""


def test_literal_opt_ml_paths_are_each_hosts_own_tree(tmp_path: Path) -> None:
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.csv").write_text("1,2\n3,4\n5,6\n")
    root = tmp_path / "jobs"
    backend = LocalSession(root).backend()
    spec = make_spec(
        tmp_path,
        "literal-opt-ml",
        LITERAL_PATHS,
        hyperparameters={"epochs": 3},
        inputs={"train": data.as_uri()},
    )
    try:
        backend.submit(spec)
        description = wait_terminal(backend, "literal-opt-ml")
    finally:
        kill_leftover_jobs(root)
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    for host in ("algo-1", "algo-2"):
        tree = root / "literal-opt-ml" / "hosts" / host
        written = json.loads((tree / "model" / "weights" / f"{host}.json").read_text())
        assert written == {
            "host": host,
            "env_host": host,
            "rows": 3,
            "epochs": 3,
            "model_dir": str(tree / "model"),
        }
        assert (tree / "output" / "data" / "metrics.txt").read_text() == host
    log = "\n".join(backend.log_lines("literal-opt-ml"))
    assert "No private /opt/ml" not in log
