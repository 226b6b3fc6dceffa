"""A local job's channel download, done by its agent, drawn as a progress bar in the notebook that
follows the job (notebook-like: output not a terminal, ipykernel loaded), ending in its summary line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smlaunch.contract.progress import MiB
from tests.functional._local_helpers import kill_leftover_jobs, moto_s3_server

NOTEBOOK = """\
import sys
import boto3
import ipykernel  # noqa: F401 - what a Jupyter kernel process has loaded
from smlaunch import LocalSession, PyTorch

root, source, endpoint = sys.argv[1:4]
session = LocalSession(root, s3_client=boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1"))
est = PyTorch(entry_point="train.py", source_dir=source, role="r", instance_type="local", instance_count=1,
              framework_version="2.1.0", py_version="py310", sagemaker_session=session)
est.fit({"train": "s3://data/big/"}, job_name="download-progress")
"""


@pytest.mark.slow
def test_channel_download_bar_in_a_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ipykernel")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import os\nprint('read', os.path.getsize(os.environ['SM_CHANNEL_TRAIN'] + '/weights.bin'))\n"
    )
    (tmp_path / "notebook.py").write_text(NOTEBOOK)
    with moto_s3_server(monkeypatch, "data") as s3:
        s3.put_object(Bucket="data", Key="big/weights.bin", Body=bytes(65 * MiB))
        endpoint: Any = s3.meta.endpoint_url
        try:
            done = subprocess.run(
                [sys.executable, "notebook.py", str(tmp_path / "jobs"), str(tmp_path / "src"), endpoint],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=240,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            )
        finally:
            kill_leftover_jobs(tmp_path / "jobs")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"read {65 * MiB}" in done.stdout
    assert "Channel 'train': download" in done.stderr and "%|" in done.stderr  # the bar, drawn here
    summary = [line for line in done.stderr.splitlines() if line.endswith("skipped unchanged")]
    assert len(summary) == 1 and summary[0].startswith("Channel 'train': download: 1 file(s), 65.0 MiB in ")
    assert summary[0].endswith(", 0 skipped unchanged")
    assert "[smlaunch] " + summary[0] in done.stdout  # the job log says it too
