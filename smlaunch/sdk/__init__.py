"""The notebook process: SageMaker's estimator API and everything ``fit()`` does before a job runs.

Public classes at this level (:mod:`.estimator`, :mod:`.pytorch`, :mod:`.tensorflow`, :mod:`.inputs`,
:mod:`.exceptions`...; :mod:`smlaunch` re-exports them); :mod:`.request` turns an estimator's arguments
into the SageMaker request, :mod:`.sessions` picks the platform, :mod:`.jobs` is the handle on a
submitted job, :mod:`.cli` the ``smlaunch`` command, :mod:`.backends` the platforms. Imports
:mod:`smlaunch.contract` and nothing of :mod:`smlaunch.runtime` or :mod:`smlaunch.rank`.
"""
