"""What a job's processes get that public SageMaker examples rely on without saying so.

Each script here is written the way the public examples write theirs (argparse hyperparameters with
``SM_*`` defaults, ``torch.distributed`` on ``env://``), and runs as a real local job.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, PyTorch, TensorFlow, contract
from smlaunch.sdk.errors import UnexpectedStatusException
from tests.functional._local_helpers import kill_leftover_jobs

# The shape of the classic pytorch_mnist example's mnist.py: no distribution= on the estimator, the
# script ranks itself by host and calls init_process_group on env:// without a master of its own.
PYTORCH_MNIST_SHAPE = """
import argparse, json, os

import torch
import torch.distributed as dist


def train(args):
    is_distributed = len(args.hosts) > 1 and args.backend is not None
    if is_distributed:
        world_size = len(args.hosts)
        os.environ["WORLD_SIZE"] = str(world_size)
        host_rank = args.hosts.index(args.current_host)
        os.environ["RANK"] = str(host_rank)
        dist.init_process_group(backend=args.backend, rank=host_rank, world_size=world_size)
        print(f"Initialized the distributed environment: '{args.backend}' backend on "
              f"{dist.get_world_size()} nodes. Current host rank is {dist.get_rank()}.")
    weight = torch.tensor([float(args.hosts.index(args.current_host) + 1)])
    if is_distributed:
        dist.all_reduce(weight)
    print(f"{args.current_host} all_reduce={weight.item()} epochs={args.epochs}")
    if not is_distributed or dist.get_rank() == 0:
        with open(os.path.join(args.model_dir, "model.pth"), "w") as handle:
            handle.write(f"{weight.item()}\\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", type=str, default=None)
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
    parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    train(parser.parse_args())
"""

# What a TensorFlow job's process sees of the torch rendezvous variables: SageMaker's TensorFlow
# container sets none.
REPORT_MASTER = """
import argparse, os

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", type=str)
parser.add_argument("--sm-model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
args, _ = parser.parse_known_args()
with open(os.path.join(args.sm_model_dir, "master.txt"), "w") as handle:
    handle.write(f"{os.environ.get('MASTER_ADDR')} {os.environ.get('MASTER_PORT')}\\n")
"""


# A .sh entry point that runs `python` and `pip` by name, then a script that shells out to both, as
# notebooks' launch scripts do. Every rank writes what it found.
RUN_SH = """#!/bin/sh
set -e
SH_PYTHON=$(python -c 'import sys; print(sys.prefix)')
SH_PIP=$(pip --version)
export SH_PYTHON SH_PIP
exec python check.py "$@"
"""

CHECK_PY = """
import argparse, json, os, subprocess, sys

parser = argparse.ArgumentParser()
parser.add_argument("--mpi", type=int, default=0)
args = parser.parse_args()
rank = 0
if args.mpi:
    from mpi4py import MPI  # the interpreter `python` found must be the one with mpi4py

    rank = MPI.COMM_WORLD.Get_rank()
    assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.Get_size()
python = subprocess.run(["python", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
pip = subprocess.run(["pip", "--version"], capture_output=True, text=True)
found = {
    "sh_python": os.environ["SH_PYTHON"],
    "sh_pip": os.environ["SH_PIP"],
    "script": sys.prefix,
    "python": [python.returncode, python.stdout.strip()],
    "pip": [pip.returncode, pip.stdout.strip()],
    "os_system_pip": os.system("pip list > /dev/null") >> 8,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank{rank}.json"), "w") as handle:
    json.dump(found, handle)
"""


@pytest.fixture
def foreign_python_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's PATH starts with a `python` and a `pip` that are not the job's (they exit 99)."""
    fakes = tmp_path / "foreign-bin"
    fakes.mkdir()
    for name in ("python", "python3", "pip", "pip3"):
        (fakes / name).write_text("#!/bin/sh\necho foreign >&2\nexit 99\n")
        (fakes / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakes}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _estimator(
    cls: type[PyTorch] | type[TensorFlow],
    tmp_path: Path,
    script: str,
    *,
    entry_point: str = "train.py",
    files: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """The notebook's estimator for ``script`` (saved as ``entry_point``, beside ``files``), run on
    this machine."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    for name, text in {entry_point: script, **(files or {})}.items():
        (source / name).write_text(text)
    kwargs.setdefault("instance_count", 1)
    return cls(
        entry_point=entry_point,
        framework_version="2.1.0" if cls is PyTorch else "2.13",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        py_version="py310",
        instance_type="ml.c5.xlarge",
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=LocalSession(tmp_path / "jobs"),
        **kwargs,
    )


def _model(uri: str) -> dict[str, bytes]:
    with tarfile.open(uri.removeprefix("file://")) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.slow
def test_pytorch_mnist_shape_rendezvous_on_two_hosts_without_a_distribution(tmp_path: Path) -> None:
    estimator = _estimator(
        PyTorch,
        tmp_path,
        PYTORCH_MNIST_SHAPE,
        instance_count=2,
        hyperparameters={"epochs": 1, "backend": "gloo"},
    )
    estimator.fit(logs=False, job_name="pytorch-mnist-shape")
    job = estimator.latest_training_job
    assert job is not None
    description = job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")
    # Both hosts joined one group of 2: the all_reduce of 1 and 2 is 3, and only rank 0 saved.
    assert _model(estimator.model_data) == {"model.pth": b"3.0\n"}
    lines = list(estimator.sagemaker_session.backend().log_lines("pytorch-mnist-shape"))
    for host in ("algo-1", "algo-2"):
        assert f"[{host}/rank 0] {host} all_reduce=3.0 epochs=1" in lines


@pytest.mark.slow
def test_tensorflow_jobs_get_no_torch_master(tmp_path: Path) -> None:
    estimator = _estimator(TensorFlow, tmp_path, REPORT_MASTER)
    estimator.fit(logs=False, job_name="tensorflow-no-master")
    assert _model(estimator.model_data) == {"master.txt": b"None None\n"}


def _assert_job_interpreter(members: dict[str, bytes], ranks: int) -> None:
    assert sorted(members) == [f"rank{r}.json" for r in range(ranks)]
    for name, body in members.items():
        found = json.loads(body)
        assert found["sh_python"] == found["script"] == sys.prefix, name
        assert found["python"] == [0, sys.prefix], name
        assert found["sh_pip"].startswith("pip ") and f" from {sys.prefix}" in found["sh_pip"], name
        assert found["pip"][0] == 0 and f" from {sys.prefix}" in found["pip"][1], name
        assert found["os_system_pip"] == 0, name


needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun and mpi4py",
)


@pytest.mark.slow
@pytest.mark.usefixtures("foreign_python_first")
@pytest.mark.parametrize(
    ("distribution", "ranks"),
    [
        pytest.param(None, 1, id="process"),
        pytest.param({"mpi": {"enabled": True, "processes_per_host": 2}}, 2, id="mpi", marks=needs_mpi),
    ],
)
def test_python_and_pip_in_a_job_are_the_ranks_interpreter(
    tmp_path: Path, distribution: dict[str, Any] | None, ranks: int
) -> None:
    estimator = _estimator(
        PyTorch,
        tmp_path,
        RUN_SH,
        entry_point="run.sh",
        files={"check.py": CHECK_PY},
        hyperparameters={"mpi": int(distribution is not None)},
        distribution=distribution,
    )
    estimator.fit(logs=False, job_name="job-interpreter")
    _assert_job_interpreter(_model(estimator.model_data), ranks)


# A Keras-style failure: the traceback, then what TensorFlow's C++ runtime logs and an atexit
# handler prints on the way out.
FAILS_THEN_LOGS = """
import argparse, atexit, os, sys

atexit.register(lambda: print("Saving run metadata before exit", file=sys.stderr, flush=True))
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--model_dir", type=str)
args, _ = parser.parse_known_args()


def fit(epochs):
    raise ValueError(f"Shapes (None, 10) and (None, 1) are incompatible after {epochs} epochs")


try:
    fit(args.epochs)
finally:
    print("2025-05-01 12:00:00.123456: I tensorflow/core/common_runtime/executor.cc:1197] "
          "Executor start aborting", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_the_failure_summary_is_the_exception_whatever_follows_it(tmp_path: Path) -> None:
    estimator = _estimator(TensorFlow, tmp_path, FAILS_THEN_LOGS, hyperparameters={"epochs": 2})
    with pytest.raises(UnexpectedStatusException) as failed:
        estimator.fit(logs=False, job_name="fails-then-logs")
    expected = "ErrorMessage: ValueError: Shapes (None, 10) and (None, 1) are incompatible after 2 epochs"
    reason = estimator.latest_training_job.describe()["FailureReason"]
    assert reason.splitlines()[1] == expected
    assert "Saving run metadata before exit" in reason  # the whole tail is still there, after it
    assert expected in str(failed.value)
