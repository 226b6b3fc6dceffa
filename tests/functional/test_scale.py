"""Many emulated hosts: a 32-host job of a trivial script completes on every host."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from smlaunch import PyTorch, contract
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import assert_no_job_processes

HOSTS = 32
SCRIPT = """
import json, os
host = os.environ["SM_CURRENT_HOST"]
assert len(json.loads(os.environ["SM_HOSTS"])) == 32
print(f"hello from {host}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"model-{host}.txt"), "w") as f:
    f.write(host)
"""


@pytest.mark.slow
def test_every_host_of_a_32_host_job_completes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(SCRIPT)
    session = LocalSession(tmp_path / "jobs", instance_count_quota=HOSTS)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=HOSTS,
        framework_version="2.1.0",
        py_version="py310",
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )
    estimator.fit(logs=False, job_name="thirty-two")
    job = estimator.latest_training_job
    assert job is not None
    description = job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    hosts = [f"algo-{i}" for i in range(1, HOSTS + 1)]
    backend = session.backend()
    lines = set(backend.log_lines("thirty-two"))
    assert {f"[{host}/rank 0] hello from {host}" for host in hosts} <= lines
    model_path = Path(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(fileobj=io.BytesIO(model_path.read_bytes())) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert members == {f"model-{host}.txt": host.encode() for host in hosts}
    assert_no_job_processes("thirty-two", backend.job_dir("thirty-two").path)
