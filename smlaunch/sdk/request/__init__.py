"""Request building: an estimator's arguments -> the SageMaker ``CreateTrainingJob`` request.

:mod:`.build` (the request), :mod:`.spec` (its typed shape), :mod:`.distribution`,
:mod:`.hyperparameters`, :mod:`.validation`, :mod:`.image_uris`, :mod:`.catalog` (instance types),
:mod:`.naming`, :mod:`.packaging` (``sourcedir.tar.gz``), :mod:`.sdk_config` (the SDK's
``config.yaml`` defaults). Pure but for packaging and reading config files.
"""
