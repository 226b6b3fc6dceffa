"""smlaunch runtime: what runs on every host of a training job (``python -m runtime`` or ``train``).

It reads ``/opt/ml`` (or ``$SAGEMAKER_BASE_DIR``), provides the ``SM_*`` environment as SageMaker's
training toolkit does, picks the launcher, runs the user's script and reports the outcome. It never
imports ``estimator``; importing it has no side effects (no directories made, no paths frozen).
"""
