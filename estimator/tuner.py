"""``HyperparameterTuner``: present so SageMaker notebook cells fail with advice, not an import error.

smlaunch launches training jobs; it does not run SageMaker Automatic Model Tuning. Constructing a
tuner raises :class:`~estimator.errors.UnsupportedFeatureError` saying what to use instead.
"""

from __future__ import annotations

from typing import Any

from estimator.errors import UnsupportedFeatureError

TUNING_ALTERNATIVE = (
    "run one fit() per hyperparameter set (estimator.set_hyperparameters(...), then fit(wait=False)) "
    "and compare est.training_job_analytics.dataframe(), or use sagemaker.tuner.HyperparameterTuner "
    "from the SageMaker Python SDK for tuning jobs on SageMaker"
)


class HyperparameterTuner:
    """SageMaker's ``sagemaker.tuner.HyperparameterTuner``: not supported; raises on construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedFeatureError(
            "HyperparameterTuner (SageMaker Automatic Model Tuning)", TUNING_ALTERNATIVE
        )
