"""The Amazon SageMaker platform: :mod:`.backend` (boto3, the SDK's exact request),
:mod:`.cloudwatch` (its logs) and :mod:`.credentials` (missing or rejected AWS credentials).
"""
