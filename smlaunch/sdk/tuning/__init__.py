"""SageMaker Automatic Model Tuning: ``HyperparameterTuner`` and its parameter ranges.

:mod:`.parameters` (the ranges, as data), :mod:`.configs` (warm start, Hyperband's resources,
completion criteria), :mod:`.request` (CreateHyperParameterTuningJob from the
tuner's and the estimator's arguments), :mod:`.tuner` (the public class: plan, fit, describe, wait,
stop, best job), :mod:`.attach` (DescribeHyperParameterTuningJob back into arguments). Tuning jobs
run on SageMaker, or on a ``LocalSession`` or ``SlurmSession`` as tuning jobs kept in the session's
job store over real training jobs: :mod:`.local` (the tuning job in the job store), :mod:`.agent`
(its detached agent), :mod:`.platform` (what the agent asks of the trials' platform),
:mod:`.search` (the optuna search). On a Kubernetes session the tuner refuses before anything starts.
"""
