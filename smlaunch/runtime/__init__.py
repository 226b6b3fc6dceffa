"""The host process: what runs on every host of a training job (``python -m smlaunch.runtime``;
``smlaunch-train``; ``train`` inside our images).

It reads ``/opt/ml`` (or ``$SAGEMAKER_BASE_DIR``), provides the ``SM_*`` environment as SageMaker's
training toolkit does, picks the launcher (:mod:`.launchers`), runs the user's script under the
supervisor (:mod:`.supervision`) and reports the outcome. It imports :mod:`smlaunch.contract` and
:mod:`smlaunch.rank`'s hooks, never :mod:`smlaunch.sdk`; importing it has no side effects (no
directories made, no paths frozen).
"""
