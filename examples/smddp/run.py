"""The smddp notebook cell: SageMaker's smdistributed.dataparallel job on 2 emulated hosts x 2 ranks.

    python examples/smddp/run.py

Only the import differs from a SageMaker notebook. ``ml.p3.16xlarge`` has 8 GPUs; this machine
likely has none, so ``LocalSession(processes_per_host=2)`` runs 2 ranks per emulated host, over gloo.
Without AWS's ``smdistributed`` library, the script's imports resolve to smlaunch's compat package.
"""

from __future__ import annotations

from pathlib import Path

from smlaunch import LocalSession, PyTorch

HERE = Path(__file__).resolve().parent


def main(epochs: int = 20) -> str:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_type="ml.p3.16xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        hyperparameters={"epochs": epochs, "batch-size": 64, "lr": 3e-3},
        base_job_name="smddp-digits",
        sagemaker_session=LocalSession(processes_per_host=2),
    )
    estimator.fit()
    print(f"Model artifact: {estimator.model_data}")
    return str(estimator.model_data)


if __name__ == "__main__":
    main()
