"""``smlaunch serve``: a training service that speaks SageMaker's own API (issue 29).

One more face over the same platforms: boto3, the AWS CLI and the SageMaker SDK v2 send their
``CreateTrainingJob`` (and the other training-job and CloudWatch Logs calls) to this server with
nothing changed but the endpoint URL, and the jobs run through the SDK's sessions and backends
(the emulated platform by default). The modules, each one concept:

- :mod:`.wire`: botocore's JSON 1.1 protocol: the service's error shape, the output encoding;
- :mod:`.validation`: requests checked against botocore's service model (shapes and constraints);
- :mod:`.auth`: SigV4 verification against the key pairs the server was started with;
- :mod:`.intake`: a received CreateTrainingJob made into the backends' job request;
- :mod:`.records`: what the server keeps beside the job store (queued jobs, tags);
- :mod:`.training`: the SageMaker operations and the tracker (the queue);
- :mod:`.listing`: ListTrainingJobs' filters, sorting and pagination;
- :mod:`.logs`: the CloudWatch Logs calls on ``/aws/sagemaker/TrainingJobs``;
- :mod:`.metrics`: CloudWatch's metric reads there (``TrainingJobAnalytics``);
- :mod:`.server`: the HTTP server that routes ``X-Amz-Target`` to them;
- :mod:`.cli`: the ``smlaunch serve`` command.

Nothing of ours imports this package but the ``smlaunch`` command's entry (``tests/unit/test_layering.py``).
"""
