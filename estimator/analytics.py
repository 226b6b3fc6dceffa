"""Alias of :mod:`smlaunch.sdk.jobs.analytics` (the import path of earlier releases)."""

from smlaunch.sdk.jobs.analytics import TrainingJobAnalytics as TrainingJobAnalytics

__all__ = ["TrainingJobAnalytics"]
