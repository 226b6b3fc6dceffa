"""The local backend's pre-flight checks: what only this machine can tell before a job starts.

:meth:`LocalBackend.check <smlaunch.sdk.backends.emulated.backend.LocalBackend.check>` runs them in
order after the executor's own checks and the capabilities: no ``file://`` place of the job inside
the job store (:func:`check_outside_store`), a writable output path and store
(:func:`check_writable`), channels this machine can serve (:func:`check_channels`), checkpoint and
TensorBoard ``LocalPath`` each host can have (:func:`check_local_paths`), spot faults only for
managed-spot jobs (:func:`check_spot_faults`) and, last because it reads data, ManifestFile channels
that parse and name existing objects (:func:`check_manifests`). Each raises a
:class:`~smlaunch.sdk.errors.ConfigurationError` naming the field, the value and the fix. At submit,
:func:`warn_when_short_of_space` warns when the store cannot hold what the job copies there.
"""

from __future__ import annotations

import contextlib
import posixpath
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.contract.channels import ChannelError
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated import data as local_data
from smlaunch.sdk.backends.emulated import layout, store
from smlaunch.sdk.backends.emulated.executors.base import Executor
from smlaunch.sdk.backends.emulated.layout import file_uri_path
from smlaunch.sdk.backends.emulated.spot import spot_faults
from smlaunch.sdk.backends.emulated.state import STORE_FULL_FIX
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.spec import TrainingJobSpec


def check_outside_store(spec: TrainingJobSpec, root: Path) -> None:
    """No ``file://`` place the job writes (artifacts, checkpoints, TensorBoard) or reads
    (channels) inside the job store, where ``smlaunch rm``/``gc`` delete it with a job, except the
    default output path (the store itself: each job's artifacts in its own directory, which go
    with it); no checkpoint prefix or channel holding the store (the job would read itself).
    Checked before anything creates a directory there."""
    output = spec.OutputDataConfig.S3OutputPath
    if urlparse(output).scheme == "file":
        path = file_uri_path(output)
        if not store.same_directory(path, root):  # the default output path is the store
            store.refuse_inside_store(root, "output_path", output, path / spec.TrainingJobName)
    places = [
        (f"inputs[{c.ChannelName!r}]", c.DataSource.S3DataSource.S3Uri, True)
        for c in spec.InputDataConfig or []
        if c.DataSource.S3DataSource is not None
    ]
    if spec.CheckpointConfig is not None:
        places.append(("checkpoint_s3_uri", spec.CheckpointConfig.S3Uri, True))
    if spec.TensorBoardOutputConfig is not None:
        places.append(
            ("tensorboard_output_config.s3_output_path", spec.TensorBoardOutputConfig.S3OutputPath, False)
        )
    for field, uri, contains in places:
        if urlparse(uri).scheme == "file":
            store.refuse_inside_store(root, field, uri, file_uri_path(uri), contains=contains)


def check_writable(spec: TrainingJobSpec, root: Path) -> None:
    """A ``file://`` output path and the job store are directories this user can write (created
    if need be)."""
    output = spec.OutputDataConfig.S3OutputPath
    if urlparse(output).scheme == "file":
        _require_writable_dir("output_path", output, file_uri_path(output))
    _require_writable_dir("sagemaker_session.root", str(root), root)


def check_channels(spec: TrainingJobSpec) -> None:
    """Every channel is an S3DataSource this machine serves: not an augmented manifest; a
    ``file://`` channel exists and is an ``S3Prefix``."""
    for channel in spec.InputDataConfig or []:
        source = channel.DataSource.S3DataSource
        if source is None:
            raise ConfigurationError(
                f"inputs[{channel.ChannelName!r}]",
                channel.DataSource.model_dump(exclude_none=True),
                "only S3DataSource channels (s3:// or file:// URIs) run locally",
                "pass an s3:// or file:// URI",
            )
        if source.S3DataType == "AugmentedManifestFile":
            raise ConfigurationError(
                f"inputs[{channel.ChannelName!r}].s3_data_type",
                source.S3DataType,
                "augmented manifests (JSON Lines records with attribute_names) are not emulated locally",
                "run the job on SageMaker, or use s3_data_type='ManifestFile' (a list of object keys) "
                "or 'S3Prefix'",
            )
        if urlparse(source.S3Uri).scheme == "file":
            path = file_uri_path(source.S3Uri)
            if not path.exists():
                raise ConfigurationError(
                    f"inputs[{channel.ChannelName!r}]",
                    source.S3Uri,
                    f"{path} does not exist",
                    "point the channel at an existing file or directory",
                )
            if source.S3DataType != "S3Prefix":
                raise ConfigurationError(
                    f"inputs[{channel.ChannelName!r}].s3_data_type",
                    source.S3DataType,
                    "manifest files are not supported for file:// channels",
                    "use S3Prefix",
                )


def check_local_paths(spec: TrainingJobSpec, executor: Executor, root: Path) -> None:
    """Checkpoints' and TensorBoard's ``LocalPath`` must each be an absolute path every host can
    have to itself: under ``/opt/ml`` (mapped into each host's tree), or elsewhere where the
    executor gives each host its own directory there (:meth:`.Executor.check_container_dir`;
    ``root`` is the job store); and they must not overlap."""
    if spec.CheckpointConfig is not None and spec.CheckpointConfig.LocalPath is not None:
        _check_local_path(
            "checkpoint_local_path",
            spec.CheckpointConfig.LocalPath,
            contract.DEFAULT_CHECKPOINT_LOCAL_PATH,
            executor,
            root,
        )
    if spec.TensorBoardOutputConfig is not None and spec.TensorBoardOutputConfig.LocalPath is not None:
        _check_local_path(
            "tensorboard_output_config.container_local_output_path",
            spec.TensorBoardOutputConfig.LocalPath,
            contract.DEFAULT_TENSORBOARD_LOCAL_PATH,
            executor,
            root,
        )
    checkpoints, tensorboard = layout.checkpoint_local_path(spec), layout.tensorboard_local_path(spec)
    if checkpoints is not None and tensorboard is not None:
        ckpt, tb = (PurePosixPath(posixpath.normpath(p)) for p in (checkpoints, tensorboard))
        if ckpt == tb or ckpt in tb.parents or tb in ckpt.parents:
            raise ConfigurationError(
                "checkpoint_local_path",
                checkpoints,
                f"overlaps the TensorBoard LocalPath {tensorboard!r}: one directory would be synced "
                "to two places (and checkpoint deletions would delete TensorBoard files)",
                "give checkpoints and TensorBoard output separate directories",
            )


def _check_local_path(field: str, value: str, default: str, executor: Executor, root: Path) -> None:
    if not value.startswith("/"):
        raise ConfigurationError(field, value, "must be an absolute path", f"pass e.g. {default!r}")
    local_path = PurePosixPath(posixpath.normpath(value))
    base = PurePosixPath(contract.DEFAULT_BASE_DIR)
    if local_path == base or local_path in base.parents:
        raise ConfigurationError(
            field,
            value,
            "is /opt/ml itself or above it",
            f"pass a directory of its own, e.g. {default!r}",
        )
    if layout.below_opt_ml(value) is None:
        executor.check_container_dir(field, value, default, root)


def check_spot_faults(spec: TrainingJobSpec, knobs: Mapping[str, str]) -> None:
    """A spot fault (``SMLAUNCH_FAULTS``, from the job's environment or the session's ``knobs``)
    only for a managed-spot job: it interrupts one."""
    environment = layout.job_environment(spec, knobs)
    if spot_faults(environment) and not spec.EnableManagedSpotTraining:
        raise ConfigurationError(
            f"environment[{contract.SMLAUNCH_FAULTS!r}]"
            if contract.SMLAUNCH_FAULTS in (spec.Environment or {})
            else "faults",
            environment[contract.SMLAUNCH_FAULTS],
            "a spot fault interrupts a managed-spot job, and this job does not use managed spot",
            "pass use_spot_instances=True (and max_wait), or drop the spot fault",
        )


def check_manifests(spec: TrainingJobSpec, s3_client: Callable[[], Any]) -> None:
    """Read every ManifestFile channel and prove each object it names exists, so a bad manifest
    fails ``fit()`` before any job directory, host or download exists (staging would read it
    again, after the other channels had been downloaded)."""
    manifests = [
        (c.ChannelName, c.DataSource.S3DataSource.S3Uri)
        for c in spec.InputDataConfig or []
        if c.DataSource.S3DataSource and c.DataSource.S3DataSource.S3DataType == "ManifestFile"
    ]
    if not manifests:
        return
    from botocore.exceptions import BotoCoreError, ClientError

    unreachable = (ClientError, BotoCoreError, OSError)
    engine = TransferEngine(client_factory=s3_client, progress=False)
    for name, uri in manifests:
        field = f"inputs[{name!r}]"
        try:
            entries = local_data.read_manifest(engine, uri)
        except ChannelError as exc:
            raise ConfigurationError(
                field,
                uri,
                f"not a valid manifest: {exc}",
                'write it as a JSON list [{"prefix": "s3://bucket/prefix/"}, "relative/key", ...]',
            ) from None
        except unreachable as exc:
            raise ConfigurationError(
                field,
                uri,
                f"the manifest cannot be read ({type(exc).__name__}: {exc})",
                "check the manifest's URI, that it exists and that your credentials can read it",
            ) from None
        try:
            local_data.expand_manifest(engine, entries, uri)
        except ChannelError as exc:
            raise ConfigurationError(
                field,
                uri,
                str(exc),
                "upload the missing object(s), or remove them from the manifest",
            ) from None
        except unreachable as exc:
            raise ConfigurationError(
                field,
                uri,
                f"the manifest's objects cannot be listed ({type(exc).__name__}: {exc})",
                "check the manifest's prefix and that your credentials can list it",
            ) from None


def warn_when_short_of_space(spec: TrainingJobSpec, root: Path, s3_client: Callable[[], Any]) -> None:
    """Each host extracts the code, and ``s3://`` File-mode channels are downloaded into the job
    directory: warn (the job would fail "No space left on device") when the store has less room
    than that. Called by ``submit``: the warning names its caller's line."""
    needed, parts = 0, []
    submit = (spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY)
    with contextlib.suppress(ValueError, TypeError, OSError):
        code = file_uri_path(str(hp.decode_value(submit or '""')))
        size = code.stat().st_size * spec.ResourceConfig.InstanceCount
        needed += size
        parts.append(f"code {size / 2**20:.1f} MiB")
    downloaded = [
        c.DataSource.S3DataSource
        for c in spec.InputDataConfig or []
        if local_data.channel_mode(spec, c) == "File"
    ]  # FastFile and Pipe stream
    remote = [s.S3Uri for s in downloaded if s is not None and urlparse(s.S3Uri).scheme == "s3"]
    if remote:
        from botocore.exceptions import BotoCoreError, ClientError

        engine = TransferEngine(client_factory=s3_client, progress=False)
        with contextlib.suppress(BotoCoreError, ClientError, OSError):
            size = sum(obj.size for uri in remote for obj in engine.list(uri))
            needed += size
            parts.append(f"s3:// inputs {size / 2**20:.1f} MiB")
    free = shutil.disk_usage(root).free
    if free < needed:
        warnings.warn(
            f"the job store {root} has {free / 2**20:.1f} MiB free, less than job "
            f'{spec.TrainingJobName} copies there ({", ".join(parts)}): it will fail with "No space '
            f'left on device" unless space is freed. Fix: {STORE_FULL_FIX}',
            stacklevel=3,
        )


def _require_writable_dir(field: str, value: str, path: Path) -> None:
    """Create ``path`` if needed and prove it writable with a probe file, or raise naming ``field``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".smlaunch-probe-"):
            pass
    except OSError as exc:
        raise ConfigurationError(
            field,
            value,
            f"not a writable directory ({exc.strerror or exc})",
            "pass a directory you can write to (file:///path/you/own) or an s3:// URI",
        ) from None
