"""smlaunch client SDK: SageMaker's estimator API, run locally, in Docker or on SageMaker.

Never imports torch. Importing it has no side effects. ``Session`` (Amazon SageMaker) is imported
lazily, on first access, so the package imports even where the SageMaker backend's dependencies
are missing.
"""

from __future__ import annotations

from typing import Any

from estimator.errors import ConfigurationError, JobFailedError, UnsupportedByBackendError
from estimator.estimator import Estimator, PyTorch
from estimator.inputs import ShuffleConfig, TrainingInput
from estimator.job import TrainingJob
from estimator.session import LocalSession
from estimator.spec import TrainingJobSpec

__all__ = [
    "ConfigurationError",
    "Estimator",
    "JobFailedError",
    "LocalSession",
    "PyTorch",
    "Session",
    "ShuffleConfig",
    "TrainingInput",
    "TrainingJob",
    "TrainingJobSpec",
    "UnsupportedByBackendError",
]


def __getattr__(name: str) -> Any:
    if name == "Session":
        from estimator.session import Session

        return Session
    raise AttributeError(f"module 'estimator' has no attribute {name!r}")
