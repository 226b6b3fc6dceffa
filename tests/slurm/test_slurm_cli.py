"""``smlaunch run --slurm SHARED_DIR``: the notebook cell as a command, on the real two-node cluster,
found afterwards by ``list --slurm`` as any Slurm job is."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.cli import main as cli
from smlaunch.sdk.sessions.slurm import SlurmSession

TRAIN = """
import argparse, os, socket
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
host = os.environ["SM_CURRENT_HOST"]
print(f"{host} trains {args.epochs} epochs on {os.environ['SLURMD_NODENAME']}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}.txt"), "w") as handle:
    handle.write(str(args.epochs))
"""


def test_smlaunch_run_slurm_trains_on_both_nodes_and_list_finds_it(
    session: SlurmSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(TRAIN)
    name = f"slurm-cli-{os.getpid()}"
    shared = str(session.shared_dir)
    flags = ["--source-dir", str(source), "--instance-count", "2", "--hp", "epochs=3", "--job-name", name]
    assert cli.main(["run", "train.py", "--slurm", shared, *flags]) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() == name
    assert "[algo-1/rank 0] algo-1 trains 3 epochs on node1" in printed.err, printed.err
    assert "[algo-2/rank 0] algo-2 trains 3 epochs on node2" in printed.err, printed.err
    assert cli.main(["list", "--slurm", shared, "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["TrainingJobSummaries"]
    assert [(r["TrainingJobName"], r["TrainingJobStatus"]) for r in rows] == [
        (name, contract.STATUS_COMPLETED)
    ]
    model = session.root / name / "output" / "model.tar.gz"
    with tarfile.open(model) as archive:
        assert sorted(archive.getnames()) == ["algo-1.txt", "algo-2.txt"]
