"""smlaunch client SDK: SageMaker's estimator API, run locally, in Docker or on SageMaker.

Never imports torch. Importing it has no side effects.
"""
