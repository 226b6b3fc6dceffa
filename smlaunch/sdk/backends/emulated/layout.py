"""Per-host ``/opt/ml`` trees written from a job spec, as the SageMaker platform writes them.

Shared by every backend that emulates hosts on this machine (local processes, Docker containers):
they differ in how they start a host, not in what the host finds on disk. This module owns:

- the config files (``hyperparameters.json`` verbatim from the spec, ``resourceconfig.json`` with
  ``instance_groups`` and sorted hosts, ``inputdataconfig.json``, ``checkpointconfig.json``,
  ``tensorboardoutputconfig.json``);
- where a container path under ``/opt/ml`` (checkpoints' and TensorBoard's ``LocalPath``) lies in
  a host's tree (:func:`checkpoint_dir`, :func:`tensorboard_dir`);
- the channel views under ``input/data/<channel>`` (:func:`link_view`);
- the environment a host runtime starts with.

Channel views (the guarantee the local backends give for ``file://`` data)
--------------------------------------------------------------------------
Each host's ``input/data/<channel>/`` is a fresh tree of *real directories* created for the job, in
which every *file* is a symlink to the original file (nothing is copied, so a 50 GB data set costs
nothing to stage). Precisely:

- the job may create, delete, rename or replace entries anywhere in its channel directory (including
  ``os.remove``/``os.replace`` of a data file): that changes only the job's tree, never the user's
  directory, and never another host's view;
- reading through the links reads the originals (``os.walk`` works, since directories are real);
- writing *in place* into an existing data file (``open(path, "r+")`` or ``"w"`` on the link) would
  reach the original: this cannot be prevented without copying or a read-only mount, so it is
  *detected* instead: :func:`fingerprint_files` records size and mtime of every original when the
  view is made, and :func:`changed_files` lists the originals that changed, which the local agent
  reports as a warning in the job log.

Which files a host sees (``s3://`` downloads, ``ShardedByS3Key``, FastFile and Pipe modes) is
decided by :mod:`smlaunch.sdk.backends.emulated.data`, which builds these views with :func:`link_view`.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from smlaunch import contract
from smlaunch.contract.framework_env import training_module_of_image
from smlaunch.sdk.backends.emulated.image_env import image_environment
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.spec import Channel, TrainingJobSpec

if TYPE_CHECKING:
    from smlaunch.sdk.backends.emulated.job_settings import EmulatedGpus, JobSettings
    from smlaunch.sdk.backends.emulated.state import JobDir


def host_names(count: int) -> list[str]:
    """``algo-1..N`` sorted as the platform sorts them (lexicographically)."""
    return sorted((contract.host_name(i) for i in range(count)), key=str)


def resource_config(spec: TrainingJobSpec, host: str, hosts: list[str]) -> dict[str, Any]:
    instance_type = spec.ResourceConfig.InstanceType
    return {
        "current_host": host,
        "current_instance_type": instance_type,
        "current_group_name": contract.DEFAULT_GROUP_NAME,
        "hosts": sorted(hosts),
        "instance_groups": [
            {
                "instance_group_name": contract.DEFAULT_GROUP_NAME,
                "instance_type": instance_type,
                "hosts": sorted(hosts),
            }
        ],
        "network_interface_name": contract.DEFAULT_NETWORK_INTERFACE,
    }


def input_data_config(spec: TrainingJobSpec) -> dict[str, dict[str, str]]:
    config: dict[str, dict[str, str]] = {}
    for channel in spec.InputDataConfig or []:
        entry = {
            "TrainingInputMode": channel.InputMode or spec.AlgorithmSpecification.TrainingInputMode,
            "S3DistributionType": _distribution(channel),
            "RecordWrapperType": channel.RecordWrapperType or "None",
        }
        if channel.ContentType:
            entry["ContentType"] = channel.ContentType
        config[channel.ChannelName] = entry
    return config


def checkpoint_config(spec: TrainingJobSpec, local_path: str) -> dict[str, str]:
    """``checkpointconfig.json``: where this host's checkpoints are, and where they are synced."""
    assert spec.CheckpointConfig is not None
    return {"LocalPath": local_path, "S3Uri": spec.CheckpointConfig.S3Uri}


def below_opt_ml(container_path: str) -> PurePosixPath | None:
    """``container_path`` relative to ``/opt/ml`` when it lies strictly below it, else ``None``.

    Normalised first, so ``/opt/ml/../etc`` is not below ``/opt/ml``.
    """
    path = PurePosixPath(posixpath.normpath(container_path))
    base = PurePosixPath(contract.DEFAULT_BASE_DIR)
    return path.relative_to(base) if base in path.parents else None


def host_dir(local_path: str | None, paths: contract.Paths, fallback: Path) -> Path | None:
    """Where a host's container path is on this machine (None for None): under ``/opt/ml``, the
    same place in the host's tree; any other path (accepted only by the Docker executor, which
    bind-mounts this directory there) is ``fallback``, a directory of that tree."""
    if local_path is None:
        return None
    relative = below_opt_ml(local_path)
    return paths.base / relative if relative is not None else fallback


def checkpoint_local_path(spec: TrainingJobSpec) -> str | None:
    """Checkpoints' ``LocalPath`` inside a host (SageMaker's default when unset); None when off."""
    config = spec.CheckpointConfig
    return None if config is None else config.LocalPath or contract.DEFAULT_CHECKPOINT_LOCAL_PATH


def tensorboard_local_path(spec: TrainingJobSpec) -> str | None:
    """TensorBoard's ``LocalPath`` inside a host (SageMaker's default when unset); None when off."""
    config = spec.TensorBoardOutputConfig
    return None if config is None else config.LocalPath or contract.DEFAULT_TENSORBOARD_LOCAL_PATH


def checkpoint_dir(spec: TrainingJobSpec, paths: contract.Paths) -> Path | None:
    """Where one host's checkpoint ``LocalPath`` is on this machine, or None without checkpoints."""
    return host_dir(checkpoint_local_path(spec), paths, paths.checkpoints_dir)


def tensorboard_dir(spec: TrainingJobSpec, paths: contract.Paths) -> Path | None:
    """Where one host's TensorBoard ``LocalPath`` is on this machine, or None when not configured."""
    return host_dir(tensorboard_local_path(spec), paths, paths.tensorboard_dir)


def container_dirs(spec: TrainingJobSpec, paths: contract.Paths) -> dict[str, tuple[str, Path]]:
    """Checkpoints' and TensorBoard's ``LocalPath`` outside ``/opt/ml`` (normalised), each with its
    field and the host tree's directory an executor puts there (which the agent syncs); under
    ``/opt/ml`` each is in the host's tree already."""
    dirs: dict[str, tuple[str, Path]] = {}
    for field, local_path, directory in (
        ("checkpoint_local_path", checkpoint_local_path(spec), checkpoint_dir(spec, paths)),
        (
            "tensorboard_output_config.container_local_output_path",
            tensorboard_local_path(spec),
            tensorboard_dir(spec, paths),
        ),
    ):
        if local_path is not None and directory is not None and below_opt_ml(local_path) is None:
            dirs[posixpath.normpath(local_path)] = (field, directory)
    return dirs


def _distribution(channel: Channel) -> str:
    s3 = channel.DataSource.S3DataSource
    return s3.S3DataDistributionType if s3 is not None else "FullyReplicated"


def write_host_tree(
    spec: TrainingJobSpec,
    base_dir: Path,
    host: str,
    hosts: list[str],
) -> contract.Paths:
    """Create one host's ``/opt/ml`` directories and config files below ``base_dir``.

    ``checkpointconfig.json`` and ``tensorboardoutputconfig.json`` (where smdebug looks for
    ``LocalPath``) name the host tree's directories, which is where a process host finds them; the
    Docker executor rewrites both to the container paths.
    """
    paths = contract.Paths(base_dir)
    for directory in paths.directories():
        directory.mkdir(parents=True, exist_ok=True)
    _write(paths.hyperparameters_file, dict(spec.HyperParameters))
    _write(paths.resource_config_file, resource_config(spec, host, hosts))
    _write(paths.input_data_config_file, input_data_config(spec))
    checkpoints = checkpoint_dir(spec, paths)
    if checkpoints is not None:
        checkpoints.mkdir(parents=True, exist_ok=True)
        _write(paths.checkpoint_config_file, checkpoint_config(spec, str(checkpoints)))
    tensorboard = tensorboard_dir(spec, paths)
    if tensorboard is not None and spec.TensorBoardOutputConfig is not None:
        tensorboard.mkdir(parents=True, exist_ok=True)
        _write(
            paths.tensorboard_config_file,
            {"LocalPath": str(tensorboard), "S3OutputPath": spec.TensorBoardOutputConfig.S3OutputPath},
        )
    return paths


def _write(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def read_only_sources(spec: TrainingJobSpec, job: JobDir | None) -> list[Path]:
    """Host paths a container reads at their own absolute path: ``file://`` code (the submit
    directory), ``file://`` channel originals (the channel views link to them) and, with ``job``,
    the job's ``s3://`` download cache."""
    sources: list[Path] = []
    submit = spec.HyperParameters.get(contract.HP_SUBMIT_DIRECTORY) if spec.HyperParameters else None
    if submit:
        submit = hp.decode_value(submit)
        if isinstance(submit, str) and urlparse(submit).scheme == "file":
            path = file_uri_path(submit)
            sources.append(path.parent if path.suffix == ".gz" or path.is_file() else path)
    uses_s3 = False
    for channel in spec.InputDataConfig or []:
        s3 = channel.DataSource.S3DataSource
        if s3 is None:
            continue
        if urlparse(s3.S3Uri).scheme == "file":
            sources.append(file_uri_path(s3.S3Uri))
        else:
            uses_s3 = True
    if uses_s3 and job is not None:
        sources.append(job.s3_cache_dir)
    unique: list[Path] = []
    for source in sources:
        resolved = Path(os.path.abspath(source))
        if resolved not in unique:
            unique.append(resolved)
    return unique


def host_view(
    spec: TrainingJobSpec, settings: JobSettings, job: JobDir, shared: Iterable[Path]
) -> dict[str, Any]:
    """What of the job store the hosts of one attempt reach, as
    :meth:`~smlaunch.sdk.backends.emulated.executors.process.spawn.PrivateOptMl.from_view` takes it.

    The store (the session's root: every job's record) is hidden from the hosts, who see at their
    own paths only: writable, the job's host trees (one ``mpirun`` on the master serves every
    emulated host), ``shared`` (the attempt's scratch directory) and the requirements cache (hosts
    build and copy environments there: created here, as the store hides where it would be made; the
    ranks see it read-only but for their job's copy: :func:`smlaunch.runtime.requirements_cache.seal_hook`);
    read-only, the job's code, its ``file://`` channel originals and its ``s3://`` download cache
    (:func:`read_only_sources`). Never ``state.json``, ``spec.json``, the stop file or the logs, of
    this job or any other.
    """
    writable = [job.hosts_dir, *shared]
    cache = settings_environment(settings).get(contract.SMLAUNCH_REQUIREMENTS_CACHE)
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        writable.append(Path(cache))
    return {
        "store": str(job.path.parent),
        "writable": [str(path) for path in writable],
        "read_only": [str(path) for path in read_only_sources(spec, job)],
    }


# --- channels -----------------------------------------------------------------------------------


def file_uri_path(uri: str) -> Path:
    """The local path of a ``file://`` URI (``file:///a/b`` and ``file://localhost/a/b``)."""
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(f"{uri!r}: file:// URIs must name a local path (file:///abs/path)")
    # POSIX's urllib.request.url2pathname is unquote; importing it would load http.client, email
    # and ssl (10-30 ms), which the agent would pay while its hosts start or its job ends.
    return Path(unquote(parsed.path))


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of every file below ``root`` (or ``[""]`` when ``root`` is a file)."""
    if root.is_file():
        return [""]
    found: list[str] = []
    for current, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        rel = Path(current).relative_to(root)
        found.extend((rel / name).as_posix() for name in sorted(files))
    return sorted(found)


def link_view(source: Path, dest: Path, files: Iterable[str] | None = None) -> list[Path]:
    """Make ``dest`` a tree of real directories whose files are symlinks into ``source``.

    ``files`` limits the view to those relative paths (sharding); default every file. Empty
    directories of ``source`` are reproduced. Returns the originals linked (absolute paths).
    """
    source = source.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        target = dest / source.name
        target.symlink_to(source)
        return [source]
    if files is None:
        for current, dirs, _ in os.walk(source, followlinks=True):
            for name in dirs:
                (dest / Path(current).relative_to(source) / name).mkdir(parents=True, exist_ok=True)
        files = list_files(source)
    linked: list[Path] = []
    for rel in files:
        original = source / rel
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(original)
        linked.append(original)
    return linked


def fingerprint_files(files: Iterable[Path]) -> dict[str, list[int]]:
    """``{path: [size, mtime_ns]}`` of each file, to detect in-place writes through a view."""
    prints: dict[str, list[int]] = {}
    for path in files:
        stat = path.stat()
        prints[str(path)] = [stat.st_size, stat.st_mtime_ns]
    return prints


def changed_files(prints: Mapping[str, list[int]]) -> list[str]:
    """The files of ``prints`` whose size or mtime changed, or that disappeared."""
    changed: list[str] = []
    for path, (size, mtime_ns) in sorted(prints.items()):
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            changed.append(path)
            continue
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
            changed.append(path)
    return changed


# --- the host runtime's environment -------------------------------------------------------------


def host_environment(
    spec: TrainingJobSpec,
    base_dir: Path,
    addresses: Mapping[str, str],
    master_port: int,
    processes_per_host: int,
    stop_grace_seconds: float,
    num_gpus: int | None,
    emulate_cuda: EmulatedGpus | None = None,
) -> dict[str, str]:
    """What a host runtime needs besides the inherited environment (``spec.Environment`` included).

    ``emulate_cuda`` (``JobSettings.emulate_cuda``) becomes ``SMLAUNCH_EMULATE_CUDA``, which makes
    every rank emulate those GPUs on the CPU. A framework image's ``SAGEMAKER_TRAINING_MODULE``
    (:func:`smlaunch.contract.framework_env.training_module_of_image`) tells the runtime the job's framework,
    as the image's own setting does on SageMaker; ``environment=`` may set it for another image. What
    else the image provides comes from :func:`.image_env.image_environment` (Keras 2 for TensorFlow
    images before 2.16), again below ``environment=``."""
    env = dict(spec.Environment or {})
    module = training_module_of_image(spec.AlgorithmSpecification.TrainingImage)
    if module is not None:
        env.setdefault(contract.TRAINING_MODULE_ENV, module)
    for name, value in image_environment(spec.AlgorithmSpecification.TrainingImage).items():
        env.setdefault(name, value)
    env.update(
        {
            contract.BASE_DIR_ENV: str(base_dir),
            contract.TRAINING_JOB_NAME_ENV: spec.TrainingJobName,
            contract.SMLAUNCH_HOST_ADDRESSES: json.dumps(dict(addresses), sort_keys=True),
            contract.SMLAUNCH_MASTER_PORT: str(master_port),
            contract.SMLAUNCH_PROCESSES_PER_HOST: str(processes_per_host),
            contract.SMLAUNCH_STOP_GRACE_SECONDS: f"{stop_grace_seconds:g}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if num_gpus is not None:
        env[contract.SMLAUNCH_NUM_GPUS] = str(num_gpus)
    if emulate_cuda:
        env[contract.SMLAUNCH_EMULATE_CUDA] = json.dumps(emulate_cuda.model_dump(), sort_keys=True)
    return env


def settings_environment(settings: JobSettings) -> dict[str, str]:
    """A host runtime's variables that follow from the job's settings: the session's knobs the
    runtime reads (``knobs``, from :meth:`smlaunch.sdk.sessions.settings.Settings.host_environment`,
    less those the job's ``environment=`` sets) and how it treats ``requirements.txt``
    (:mod:`smlaunch.runtime.requirements`): skipped, in the layered environments under
    ``requirements_cache``, or (neither) as the toolkit does."""
    env = dict(settings.knobs)
    if not settings.install_requirements:
        env[contract.SMLAUNCH_INSTALL_REQUIREMENTS] = "0"
    elif settings.requirements_cache:
        env[contract.SMLAUNCH_REQUIREMENTS_CACHE] = str(settings.requirements_cache)
    return env


def job_environment(spec: TrainingJobSpec, knobs: Mapping[str, str]) -> dict[str, str]:
    """The job's ``environment=`` with the session's ``knobs`` (``JobSettings.knobs``) it does not
    set: what its hosts see of both."""
    return {**knobs, **(spec.Environment or {})}


def machine_gpu_count() -> int:
    """NVIDIA GPUs on this machine, without importing torch (the estimator never does)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return sum(1 for _ in gpus.iterdir())
    except OSError:
        return 0
