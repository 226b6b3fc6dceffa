"""Framework-specific host setup: :mod:`.tf_config` (``TF_CONFIG``) and :mod:`.tf_ps` (TensorFlow
parameter servers).
"""
