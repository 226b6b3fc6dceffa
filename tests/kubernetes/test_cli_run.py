"""``smlaunch run --kubernetes NAMESPACE``: the notebook cell as a command on the dev cluster, its
session given as the ``--kubernetes-*`` flags ``serve`` takes; ``list --kubernetes`` finds the job,
its model is in S3 (a moto server on 127.0.0.1), and nothing of it is left but its record."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch.sdk.cli import main as cli
from tests.kubernetes.conftest import S3_BUCKET, DevCluster, job_objects

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(900)]

TRAIN = """
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
host = os.environ["SM_CURRENT_HOST"]
print(f"{host} trains {args.epochs} epochs", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"{host}.txt"), "w") as handle:
    handle.write(str(args.epochs))
"""


def test_smlaunch_run_kubernetes_trains_on_two_pods_and_list_finds_it(
    k8s_cluster: DevCluster,
    api: client.ApiClient,
    namespace: str,
    image: str,
    s3: Any,
    k8s_session: Callable[..., Any],  # for the Secret "aws" it makes: the pods' S3 keys
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))  # the kubeconfig's cluster, as a user's
    name = f"k8s-cli-{os.getpid()}"
    platform = [
        "--kubernetes",
        namespace,
        "--kubernetes-image",
        image,
        "--kubernetes-image-pull-policy",
        "Never",
        "--kubernetes-resources",
        "off",
        "--kubernetes-host-network",
        "--kubernetes-s3-endpoint",
        s3.meta.endpoint_url,
        "--kubernetes-credentials-secret",
        "aws",
    ]
    job = ["--source-dir", str(tmp_path / "src"), "--instance-type", "ml.c5.xlarge", "--instance-count", "2"]
    job += ["--hp", "epochs=3", "--output-path", f"s3://{S3_BUCKET}/out", "--job-name", name]
    assert cli.main(["run", "train.py", *platform, *job]) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() == name
    for host in ("algo-1", "algo-2"):
        assert f"[{host}/rank 0] {host} trains 3 epochs" in printed.err, printed.err[-4000:]

    assert cli.main(["list", "--kubernetes", namespace, "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["TrainingJobSummaries"]
    assert [(r["TrainingJobName"], r["TrainingJobStatus"]) for r in rows] == [(name, "Completed")]
    model = s3.get_object(Bucket=S3_BUCKET, Key=f"out/{name}/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(model)) as archive:
        assert sorted(archive.getnames()) == ["algo-1.txt", "algo-2.txt"]
    assert job_objects(api, namespace) == []
