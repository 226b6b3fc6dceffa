"""smlaunch client SDK: SageMaker's estimator API, run locally, in Docker or on SageMaker.

Never imports torch. Importing it has no side effects. The public names are imported lazily, on
first access, so the package imports even where the SageMaker backend's dependencies are missing,
and a process that needs one submodule does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from estimator.errors import (
    CapacityError,
    ConfigurationError,
    JobFailedError,
    UnexpectedStatusException,
    UnsupportedByBackendError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from estimator.analytics import TrainingJobAnalytics
    from estimator.debugger import TensorBoardOutputConfig
    from estimator.estimator import Estimator
    from estimator.inputs import ShuffleConfig, TrainingInput
    from estimator.job import TrainingJob
    from estimator.local_session import LocalSession
    from estimator.pytorch import PyTorch
    from estimator.roles import get_execution_role
    from estimator.s3 import S3Downloader, S3Uploader
    from estimator.session import Session
    from estimator.slurm_session import SlurmSession
    from estimator.spec import TrainingJobSpec
    from estimator.tensorflow import TensorFlow
    from estimator.tuner import HyperparameterTuner

# Imported on first access: processes that only need a submodule (the local backend's per-job
# agent, started once per job) must not pay for the estimator and the instance catalog.
_LAZY = {
    "Estimator": "estimator.estimator",
    "TrainingJobAnalytics": "estimator.analytics",
    "HyperparameterTuner": "estimator.tuner",
    "PyTorch": "estimator.pytorch",
    "get_execution_role": "estimator.roles",
    "ShuffleConfig": "estimator.inputs",
    "S3Downloader": "estimator.s3",
    "S3Uploader": "estimator.s3",
    "TensorBoardOutputConfig": "estimator.debugger",
    "TensorFlow": "estimator.tensorflow",
    "TrainingInput": "estimator.inputs",
    "TrainingJob": "estimator.job",
    "LocalSession": "estimator.local_session",
    "Session": "estimator.session",
    "SlurmSession": "estimator.slurm_session",
    "TrainingJobSpec": "estimator.spec",
}

__all__ = [
    "CapacityError",
    "ConfigurationError",
    "Estimator",
    "HyperparameterTuner",
    "JobFailedError",
    "LocalSession",
    "PyTorch",
    "S3Downloader",
    "S3Uploader",
    "Session",
    "ShuffleConfig",
    "SlurmSession",
    "TensorBoardOutputConfig",
    "TensorFlow",
    "TrainingInput",
    "TrainingJob",
    "TrainingJobAnalytics",
    "TrainingJobSpec",
    "UnexpectedStatusException",
    "UnsupportedByBackendError",
    "UnsupportedFeatureError",
    "get_execution_role",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'estimator' has no attribute {name!r}")
