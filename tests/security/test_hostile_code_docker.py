"""Hostile code archives extracted by the training image's own Python (Debian bookworm's python3
3.11.2, whose ``tarfile`` has no ``filter``): ``train`` in one container per run of all cases.

Marker ``docker``; skipped with the reason when no engine answers or the image cannot be built
(the image comes from the same session fixture as ``tests/integration``). The container sees the
test's tree at ``/opt/ml``; each case gets its own ``SAGEMAKER_BASE_DIR`` below it, and the
archives aim at ``/opt/ml/victim`` (absolute and by ``..``), which the host sees too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from smlaunch import contract
from tests.functional._runtime_tree import write_host_tree
from tests.integration.test_docker_executor import engine, image  # noqa: F401 - session fixtures
from tests.security import hostile

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3000)]

MOUNT = PurePosixPath("/opt/ml")
RUN_SCRIPT = """
python3 -c 'import sys, tarfile; print(sys.version.split()[0], hasattr(tarfile, "data_filter"))' \
  > /opt/ml/python.txt
for case in /opt/ml/cases/*; do
  SAGEMAKER_BASE_DIR="$case/ml" train > "$case/output.txt" 2>&1
  echo $? > "$case/rc"
done
"""


def test_the_images_train_refuses_every_hostile_archive(tmp_path: Path, engine: Any, image: str) -> None:  # noqa: F811
    outside = MOUNT / "victim"
    hostile.make_outside(tmp_path / "victim")
    trees = {}
    for case in hostile.CASES:
        hostile.write_archive(case, tmp_path / "archives" / f"{case.name}.tar.gz", outside)
        submit = MOUNT / "archives" / f"{case.name}.tar.gz"
        hps = {contract.HP_PROGRAM: '"train.py"', contract.HP_SUBMIT_DIRECTORY: json.dumps(str(submit))}
        trees[case.name] = write_host_tree(tmp_path / "cases" / case.name / "ml", "algo-1", ["algo-1"], hps)
    before = hostile.snapshot(tmp_path)
    engine.containers.run(
        image,
        ["sh", "-c", RUN_SCRIPT],
        remove=True,
        network_mode="none",
        user=f"{os.getuid()}:{os.getgid()}",
        group_add=["0"],
        volumes={str(tmp_path): {"bind": str(MOUNT), "mode": "rw"}},
    )
    python = (tmp_path / "python.txt").read_text().strip()
    for case in hostile.CASES:
        paths = trees[case.name]
        output = (tmp_path / "cases" / case.name / "output.txt").read_text()
        assert (tmp_path / "cases" / case.name / "rc").read_text().strip() == "1", (case.name, python, output)
        failure = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())["reason"]
        assert failure.startswith("ClientError: refusing archive member"), (case.name, python, failure)
        assert case.refusal(outside) in failure, (case.name, failure)
        assert "SHOULD NOT RUN" not in output, case.name
        assert os.listdir(paths.code_dir) == [], case.name
    hostile.assert_untouched(before, tmp_path, [p.code_dir for p in trees.values()])
