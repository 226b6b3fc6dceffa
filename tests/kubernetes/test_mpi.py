"""MPI and smp model parallelism between host pods on the dev cluster.

An ``mpi`` job of 2 host pods x 2 ranks: the master pod's ``mpirun`` starts the other pod's ranks
over ssh (per-job keys the agent put in each host's tree, each host's sshd on its own loopback
address and port of the host network), a gloo all-reduce across all four, and the same
``model.tar.gz`` as the process executor's run of the same job. Then the model-parallel example
(``examples/model_parallel``, 2 pipeline partitions spread over the 2 pods). Each test ends with no
pod, Service or other object of the job left. See docs/kubernetes.md.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from smlaunch import KubernetesSession, LocalSession, PyTorch
from tests.kubernetes.conftest import S3_BUCKET, estimator, fit_to_completion, job_objects, model_members

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_parallel"

MPI_SCRIPT = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    host = os.environ["SM_CURRENT_HOST"]
    print(f"rank {rank}/{world} current_host={host} ompi={os.environ['OMPI_COMM_WORLD_RANK']} "
          f"sum={total.item():g}", flush=True)
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "host": host})
    if rank == 0:
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as handle:
            json.dump({"sum": total.item(), "world": world, "ranks": ranks}, handle)
    dist.destroy_process_group()
    """
)


MPI = {"mpi": {"enabled": True, "processes_per_host": 2}}


@pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="the process executor's half needs OpenMPI's mpirun on this machine (apt-get install openmpi-bin)",
)
def test_mpi_job_across_two_host_pods_matches_the_process_executor(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = estimator(k8s_session(), tmp_path, MPI_SCRIPT, distribution=MPI, base_job_name="k8s-mpi")
    description, logs = fit_to_completion(job, capsys)
    # mpirun on algo-1 started two ranks in each pod; the other pod's over ssh.
    for host, rank in (("algo-1", 0), ("algo-1", 1), ("algo-2", 2), ("algo-2", 3)):
        line = f"[{host}/rank {rank}] rank {rank}/4 current_host={host} ompi={rank} sum=10"
        assert line in logs, logs[-4000:]
    assert "sshd ports" in logs and "PRIVATE KEY" not in logs
    pods_model = model_members(s3, description)
    assert job_objects(api, namespace) == []

    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path / "home"))
    session = LocalSession(root=tmp_path / "jobs", executor="process")
    local = estimator(session, tmp_path, MPI_SCRIPT, distribution=MPI, output_path=None)
    local.fit(logs=False)
    with tarfile.open(str(local.model_data).removeprefix("file://")) as tar:
        local_model = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert pods_model == local_model
    assert json.loads(pods_model["result.json"]) == {
        "sum": 10.0,
        "world": 4,
        "ranks": [{"rank": r, "host": f"algo-{r // 2 + 1}"} for r in range(4)],
    }


def test_smp_model_parallel_example_pipelines_across_two_host_pods(
    api: client.ApiClient,
    namespace: str,
    s3: Any,
    k8s_session: Callable[..., KubernetesSession],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The example's notebook cell with the session swapped: 2 pods x 2 ranks, 2 pipeline
    partitions spread over the pods (ranks 0+2, 1+3); the model loads in this one process."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from load_check import check  # type: ignore[import-not-found]
        from run import MP_PARAMETERS  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLE))
    job = PyTorch(
        entry_point="train_smp.py",
        source_dir=str(EXAMPLE),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_count=2,
        instance_type="ml.c5.xlarge",
        framework_version="2.0.0",
        py_version="py310",
        distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": MP_PARAMETERS}}}
        | MPI,
        hyperparameters={"epochs": 1, "batch-size": 32, "lr": 3e-3},
        output_path=f"s3://{S3_BUCKET}/out",
        base_job_name="k8s-smp",
        sagemaker_session=k8s_session(),
    )
    description, logs = fit_to_completion(job, capsys)
    assert "smp: world=4 pp=2 dp=2 microbatches=4" in logs, logs[-4000:]
    assert "[algo-2] launcher: smp" in logs, logs[-4000:]
    assert "sshd ports" not in logs  # smp starts each pod's ranks itself: no ssh between pods
    unpacked = tmp_path / "model"
    unpacked.mkdir()
    for name, data in model_members(s3, description).items():
        (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
        (unpacked / name).write_bytes(data)
    assert check(unpacked) > 0.1  # the same predictions as in training, in one plain process
    assert job_objects(api, namespace) == []
