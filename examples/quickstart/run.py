"""The quickstart notebook cell: a 2-host x 2-rank DDP job on this machine, no AWS, no Docker.

    python examples/quickstart/run.py

Only the import differs from a SageMaker notebook. ``LocalSession`` runs every host of the
requested topology as processes here (``algo-1``, ``algo-2``, each with its own /opt/ml tree);
``processes_per_host=2`` gives each emulated host two ranks, as a 2-GPU instance would have.
Jobs live under ``~/.smlaunch/jobs`` (``$SMLAUNCH_HOME/jobs`` when set).
"""

from __future__ import annotations

from pathlib import Path

from smlaunch import LocalSession, PyTorch

HERE = Path(__file__).resolve().parent


def main() -> str:
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        framework_version="2.1.0",
        py_version="py310",
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"epochs": 30, "batch-size": 32, "lr": 3e-3},
        metric_definitions=[
            {"Name": "train:loss", "Regex": r"loss ([0-9.]+)"},
            {"Name": "validation:accuracy", "Regex": r"val accuracy ([0-9.]+)"},
        ],
        base_job_name="quickstart",
        sagemaker_session=LocalSession(processes_per_host=2),
    )
    estimator.fit()
    print(f"Model artifact: {estimator.model_data}")
    return str(estimator.model_data)


if __name__ == "__main__":
    main()
