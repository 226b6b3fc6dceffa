"""The import paths ``ModelTrainer`` had in SDK 2.23x (``sagemaker.modules``): ``smlaunch.modules.train``,
``smlaunch.modules.configs``, ``smlaunch.modules.distributed``. The same classes as :mod:`smlaunch.train`."""
