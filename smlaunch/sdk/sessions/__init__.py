"""Sessions: where jobs run. :mod:`.sagemaker` (``Session``, Amazon SageMaker), :mod:`.local`
(``LocalSession``, the emulated platform on this machine), :mod:`.slurm` (``SlurmSession``),
:mod:`.kubernetes` (``KubernetesSession``), the
:mod:`.protocol` they share, :mod:`.settings` (the local knobs) and :mod:`.s3` (S3 helpers).
"""
