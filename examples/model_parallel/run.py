"""The notebook cell of a SageMaker model-parallel (smp v1) job, run on this machine.

    python examples/model_parallel/run.py

An emulated ``ml.p3.8xlarge`` (4 GPUs, so 4 ranks) runs ``train_smp.py`` with 2 pipeline partitions,
4 microbatches, the interleaved (1F1B) pipeline, spread placement and ddp over the 2 pipeline
replicas; on a machine without GPUs the ranks use gloo on the CPU. Then the trained model is loaded
in this single process (``load_check.py``) and must predict exactly what it predicted in training.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

from smlaunch import LocalSession, PyTorch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MP_PARAMETERS = {
    "partitions": 2,
    "microbatches": 4,
    "pipeline": "interleaved",
    "placement_strategy": "spread",
    "ddp": True,
}


def main(
    epochs: int = 4,
    instance_type: str = "ml.p3.8xlarge",
    instance_count: int = 1,
    processes_per_host: int = 4,
) -> float:
    """Train, then check the saved model in this process; returns its test accuracy."""
    estimator = PyTorch(
        entry_point="train_smp.py",
        source_dir=str(HERE),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_type=instance_type,
        instance_count=instance_count,
        framework_version="2.0.0",
        py_version="py310",
        distribution={
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": MP_PARAMETERS}},
            "mpi": {"enabled": True, "processes_per_host": processes_per_host},
        },
        hyperparameters={"epochs": epochs, "batch-size": 32, "lr": 3e-3},
        base_job_name="smp-digits",
        sagemaker_session=LocalSession(processes_per_host=processes_per_host),
    )
    estimator.fit()
    print(f"Model artifact: {estimator.model_data}")
    from load_check import check

    model_tar = Path(str(estimator.model_data).removeprefix("file://"))
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(model_tar) as tar:
        tar.extractall(tmp, filter="data")
        return check(Path(tmp))


if __name__ == "__main__":
    main()
