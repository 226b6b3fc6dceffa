"""Moving bytes between local paths, ``file://`` and ``s3://``: code staging, channels, artifacts
and checkpoints.

:mod:`.engine` (:class:`~.engine.TransferEngine`: parallel, verified, incremental transfers),
:mod:`.hashes` (content hashes of local files and their persistent cache), :mod:`.uris` (URIs, paths
and S3 keys) and :mod:`.errors`. Import each name from the module that defines it; this package
re-exports nothing.
"""
