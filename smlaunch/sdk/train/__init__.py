"""SDK v3's ``ModelTrainer`` API (``sagemaker.train``) over the job spec the estimators build.

``model_trainer.py`` holds the class, ``configs.py`` and ``distributed.py`` its config classes,
``validation.py`` the argument checks, ``request.py`` the CreateTrainingJob request and
``drivers.py`` the job's ``sm_drivers`` channel. The public import paths are ``smlaunch.train``
(and ``smlaunch.modules``, the paths of SDK 2.23x), see ``docs/porting.md``.
"""
