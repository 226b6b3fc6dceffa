"""Scripts that hard-code ``/opt/ml`` run as processes: each emulated host sees its own tree there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from smlaunch import LocalSession, contract
from smlaunch.sdk.backends.emulated.executors.process.executor import PrivateOptMl
from smlaunch.sdk.request.spec import CheckpointConfig
from tests.functional._local_helpers import job_request, kill_leftover_jobs, make_spec, wait_terminal

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
        backend.submit(job_request(spec))
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


CHECKPOINT_SCRIPT = """
import json, os, sys

local_path = sys.argv[sys.argv.index("--local-path") + 1]
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
with open(os.path.join(local_path, f"{host}.txt"), "w") as handle:
    handle.write(host)
with open(f"/opt/ml/model/{host}.json", "w") as handle:
    json.dump(sorted(os.listdir(local_path)), handle)
"""


@pytest.mark.slow
def test_a_checkpoint_path_outside_opt_ml_is_each_hosts_own(tmp_path: Path) -> None:
    """checkpoint_local_path outside /opt/ml (its parents missing): each host writes its own
    directory mounted there, the agent syncs both, the machine keeps only the empty mount point."""
    if (why := PrivateOptMl().unavailable(tmp_path)) is not None:
        pytest.skip(f"mount namespaces are unavailable here: {why}")
    local_path = tmp_path / "fresh" / "checkpoint" / "path"
    checkpoints = tmp_path / "synced"
    root = tmp_path / "jobs"
    backend = LocalSession(root).backend()
    spec = make_spec(tmp_path, "outside-ckpt", CHECKPOINT_SCRIPT)
    spec = spec.model_copy(
        update={
            "HyperParameters": {**spec.HyperParameters, "local-path": json.dumps(str(local_path))},
            "CheckpointConfig": CheckpointConfig(S3Uri=checkpoints.as_uri(), LocalPath=str(local_path)),
        }
    )
    try:
        backend.submit(job_request(spec))
        description = wait_terminal(backend, "outside-ckpt")
    finally:
        kill_leftover_jobs(root)
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    for host in ("algo-1", "algo-2"):
        tree = root / "outside-ckpt" / "hosts" / host
        assert json.loads((tree / "model" / f"{host}.json").read_text()) == [f"{host}.txt"]
        assert (checkpoints / f"{host}.txt").read_text() == host
    assert local_path.is_dir() and not any(local_path.iterdir())
    log = "\n".join(backend.log_lines("outside-ckpt"))
    assert log.count(f"created {local_path} as a mount point for checkpoint_local_path") == 1
