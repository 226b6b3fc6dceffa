"""The handle on a submitted job: :mod:`.job` (``TrainingJob``), :mod:`.analytics`, :mod:`.metrics`,
:mod:`.tracking` (MLflow), :mod:`.jobref` (how the CLI names a job).
"""
