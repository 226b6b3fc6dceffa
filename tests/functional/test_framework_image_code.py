"""The generic ``Estimator`` run on a framework image with the code named by hyperparameters, as
notebooks did before script mode had its own estimators::

    Estimator(image_uri=<pytorch-training image>, hyperparameters={
        "sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://.../sourcedir.tar.gz"})

The hosts fetch that code (``s3://``, ``file://``) and run it; the values reach the script as
SageMaker passes them: ``str()`` on the wire, JSON-decoded where they decode, so a value the
notebook JSON-encoded itself arrives decoded (``value1``)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import Estimator, LocalSession, contract
from tests.functional._local_helpers import kill_leftover_jobs, moto_s3_server

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
TRAIN = """
import json, os, sys
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "hps": json.loads(os.environ["SM_HPS"])}, f)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _sourcedir(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(TRAIN)
    archive = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "code" / "train.py", arcname="train.py")
    return archive


def _seen(tmp_path: Path, job_name: str) -> dict[str, object]:
    with tarfile.open(tmp_path / "out" / job_name / "output" / contract.MODEL_TARBALL) as tar:
        member = tar.extractfile("seen.json")
        assert member is not None
        return dict(json.load(member))


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["file", "s3"])
def test_the_framework_image_pattern_fetches_and_runs_the_named_code(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _sourcedir(tmp_path)
    with moto_s3_server(monkeypatch, "code-bucket") as s3:
        if scheme == "s3":
            s3.upload_file(str(archive), "code-bucket", "mnist/sourcedir.tar.gz")
            submit = "s3://code-bucket/mnist/sourcedir.tar.gz"
        else:
            submit = archive.as_uri()
        estimator = Estimator(
            image_uri=IMAGE,
            role="SageMakerRole",
            instance_count=1,
            instance_type="local",
            output_path=(tmp_path / "out").as_uri(),
            hyperparameters={
                "sagemaker_program": '"train.py"',  # JSON-encoded by the notebook, as some do
                "sagemaker_submit_directory": submit,
                "key": '"value1"',
                "epochs": 2,
                "flag": True,
            },
            sagemaker_session=LocalSession(tmp_path / "jobs", s3_client=s3),
        )
        estimator.fit(job_name=f"image-code-{scheme}", logs=False)
    seen = _seen(tmp_path, f"image-code-{scheme}")
    assert seen["hps"] == {"key": "value1", "epochs": 2, "flag": "True"}
    assert seen["argv"] == ["--epochs", "2", "--flag", "True", "--key", "value1"]
