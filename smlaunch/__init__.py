"""smlaunch client SDK: SageMaker's estimator API, run locally, in Docker or on SageMaker.

Never imports torch. Importing it has no side effects. The public names are imported lazily, on
first access, so the package imports even where the SageMaker backend's dependencies are missing,
and a process that needs one submodule does not load the rest.
"""

from __future__ import annotations

# Every process of ours imports this package first (hosts and ranks too, for smlaunch.runtime and
# smlaunch.rank): it imports nothing, not even typing, so that costs them nothing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from smlaunch.sdk.debugger import TensorBoardOutputConfig
    from smlaunch.sdk.errors import (
        CapacityError,
        ConfigurationError,
        JobFailedError,
        UnexpectedStatusException,
        UnsupportedByBackendError,
        UnsupportedFeatureError,
    )
    from smlaunch.sdk.estimator import Estimator
    from smlaunch.sdk.inputs import ShuffleConfig, TrainingInput
    from smlaunch.sdk.jobs.analytics import TrainingJobAnalytics
    from smlaunch.sdk.jobs.job import TrainingJob
    from smlaunch.sdk.pytorch import PyTorch
    from smlaunch.sdk.request.spec import TrainingJobSpec
    from smlaunch.sdk.sessions.kubernetes import KubernetesSession
    from smlaunch.sdk.sessions.local import LocalSession
    from smlaunch.sdk.sessions.s3 import S3Downloader, S3Uploader
    from smlaunch.sdk.sessions.sagemaker import Session, get_execution_role
    from smlaunch.sdk.sessions.slurm import SlurmSession
    from smlaunch.sdk.tensorflow import TensorFlow
    from smlaunch.sdk.train.configs import (
        CheckpointConfig,
        Compute,
        FileSystemDataSource,
        InputData,
        Networking,
        OutputDataConfig,
        S3DataSource,
        SourceCode,
        StoppingCondition,
    )
    from smlaunch.sdk.train.distributed import MPI, SMP, Torchrun
    from smlaunch.sdk.train.model_trainer import Mode, ModelTrainer
    from smlaunch.sdk.tuning.analytics import HyperparameterTuningJobAnalytics
    from smlaunch.sdk.tuning.configs import (
        HyperbandStrategyConfig,
        StrategyConfig,
        TuningJobCompletionCriteriaConfig,
        WarmStartConfig,
        WarmStartTypes,
    )
    from smlaunch.sdk.tuning.parameters import CategoricalParameter, ContinuousParameter, IntegerParameter
    from smlaunch.sdk.tuning.tuner import HyperparameterTuner

# Imported on first access: processes that only need a submodule (the local backend's per-job
# agent, started once per job) must not pay for the estimator and the instance catalog.
_LAZY = {
    **dict.fromkeys(
        (
            "CapacityError",
            "ConfigurationError",
            "JobFailedError",
            "UnexpectedStatusException",
            "UnsupportedByBackendError",
            "UnsupportedFeatureError",
        ),
        "smlaunch.sdk.errors",
    ),
    "Estimator": "smlaunch.sdk.estimator",
    "TrainingJobAnalytics": "smlaunch.sdk.jobs.analytics",
    "HyperparameterTuner": "smlaunch.sdk.tuning.tuner",
    "HyperparameterTuningJobAnalytics": "smlaunch.sdk.tuning.analytics",
    "IntegerParameter": "smlaunch.sdk.tuning.parameters",
    "ContinuousParameter": "smlaunch.sdk.tuning.parameters",
    "CategoricalParameter": "smlaunch.sdk.tuning.parameters",
    "HyperbandStrategyConfig": "smlaunch.sdk.tuning.configs",
    "StrategyConfig": "smlaunch.sdk.tuning.configs",
    "TuningJobCompletionCriteriaConfig": "smlaunch.sdk.tuning.configs",
    "WarmStartConfig": "smlaunch.sdk.tuning.configs",
    "WarmStartTypes": "smlaunch.sdk.tuning.configs",
    "PyTorch": "smlaunch.sdk.pytorch",
    "get_execution_role": "smlaunch.sdk.sessions.sagemaker",
    "ShuffleConfig": "smlaunch.sdk.inputs",
    "S3Downloader": "smlaunch.sdk.sessions.s3",
    "S3Uploader": "smlaunch.sdk.sessions.s3",
    "TensorBoardOutputConfig": "smlaunch.sdk.debugger",
    "TensorFlow": "smlaunch.sdk.tensorflow",
    "TrainingInput": "smlaunch.sdk.inputs",
    "TrainingJob": "smlaunch.sdk.jobs.job",
    "LocalSession": "smlaunch.sdk.sessions.local",
    "KubernetesSession": "smlaunch.sdk.sessions.kubernetes",
    "Session": "smlaunch.sdk.sessions.sagemaker",
    "SlurmSession": "smlaunch.sdk.sessions.slurm",
    "TrainingJobSpec": "smlaunch.sdk.request.spec",
    # SDK v3's ModelTrainer API (also as smlaunch.train, smlaunch.train.configs, ...).
    "CheckpointConfig": "smlaunch.sdk.train.configs",
    "Compute": "smlaunch.sdk.train.configs",
    "FileSystemDataSource": "smlaunch.sdk.train.configs",
    "InputData": "smlaunch.sdk.train.configs",
    "MPI": "smlaunch.sdk.train.distributed",
    "Mode": "smlaunch.sdk.train.model_trainer",
    "ModelTrainer": "smlaunch.sdk.train.model_trainer",
    "Networking": "smlaunch.sdk.train.configs",
    "OutputDataConfig": "smlaunch.sdk.train.configs",
    "S3DataSource": "smlaunch.sdk.train.configs",
    "SMP": "smlaunch.sdk.train.distributed",
    "SourceCode": "smlaunch.sdk.train.configs",
    "StoppingCondition": "smlaunch.sdk.train.configs",
    "Torchrun": "smlaunch.sdk.train.distributed",
}

__all__ = [
    "MPI",
    "SMP",
    "CapacityError",
    "CategoricalParameter",
    "CheckpointConfig",
    "Compute",
    "ConfigurationError",
    "ContinuousParameter",
    "Estimator",
    "FileSystemDataSource",
    "HyperbandStrategyConfig",
    "HyperparameterTuner",
    "HyperparameterTuningJobAnalytics",
    "InputData",
    "IntegerParameter",
    "JobFailedError",
    "KubernetesSession",
    "LocalSession",
    "Mode",
    "ModelTrainer",
    "Networking",
    "OutputDataConfig",
    "PyTorch",
    "S3DataSource",
    "S3Downloader",
    "S3Uploader",
    "Session",
    "ShuffleConfig",
    "SlurmSession",
    "SourceCode",
    "StoppingCondition",
    "StrategyConfig",
    "TensorBoardOutputConfig",
    "TensorFlow",
    "Torchrun",
    "TrainingInput",
    "TrainingJob",
    "TrainingJobAnalytics",
    "TrainingJobSpec",
    "TuningJobCompletionCriteriaConfig",
    "UnexpectedStatusException",
    "UnsupportedByBackendError",
    "UnsupportedFeatureError",
    "WarmStartConfig",
    "WarmStartTypes",
    "get_execution_role",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'smlaunch' has no attribute {name!r}")
