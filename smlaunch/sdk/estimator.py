"""``Estimator`` and ``Framework``: SageMaker SDK v2's constructor and ``fit()``, on any backend
(the frameworks: ``PyTorch`` in :mod:`smlaunch.sdk.pytorch`, ``TensorFlow`` in
:mod:`smlaunch.sdk.tensorflow`).

``fit()`` reads as TorchX's submit: validate (at construction) -> :meth:`Estimator.plan` (pure: the
exact :class:`~smlaunch.sdk.request.spec.TrainingJobSpec`) -> ``backend.check(request)`` (a
:class:`~smlaunch.sdk.request.spec.JobRequest`: the spec and the distribution's strategy) -> stage
code (and local inputs) -> ``backend.submit(request)`` -> :class:`~smlaunch.sdk.jobs.job.TrainingJob`
-> wait. Every bad argument is a :class:`ConfigurationError` naming the argument, the value and the
fix, raised at construction (or, for ``inputs`` and ``job_name``, in ``plan()``), before anything
is staged.

This module holds the constructor, ``plan``/``fit`` and ``attach``. The argument checks are
:mod:`smlaunch.sdk.request.validation`; the checked arguments are one frozen value,
:class:`~smlaunch.sdk.request.args.EstimatorArgs`; the request is built from it by
:func:`smlaunch.sdk.request.build.build` and read back for ``attach`` by
:mod:`smlaunch.sdk.request.describe`; the DLC version tables are
:mod:`smlaunch.sdk.request.image_uris`; what the estimator needs from a session is
:class:`smlaunch.sdk.sessions.protocol.TrainingSession`. It stays over 500 lines because the SDK's
public surface (the constructor's arguments, their attributes, ``fit``, ``attach``) is one concept
that users read in one place; everything behind it lives elsewhere.

The request equals what ``sagemaker.pytorch.PyTorch(...).fit(...)`` (SDK 2.257.x) sends for the same
arguments (``tests/unit/test_plan_oracle.py`` checks it field by field), apart from the deliberate
differences listed in ``docs/porting.md`` ("7. The request: deliberate differences from SDK v2";
distribution ones are in :mod:`smlaunch.sdk.request.distribution`).

SDK v1 argument names (``train_instance_type``, ``train_max_run``, ``image_name``, ...) are taken
with the SDK's deprecation warning and mapped to their v2 names (:mod:`smlaunch.sdk.keywords`).

``tensorboard_output_config`` is sent to SageMaker as given and emulated locally (event files synced
to its ``s3_output_path`` while the job runs, see :mod:`smlaunch.sdk.backends.emulated.checkpoints`).

Not supported: ``model_uri``, ``rules``, debugger/profiler config objects, ``instance_groups``
(refused by name), ``training_recipe``, ``git_config``, pipeline variables.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload
from urllib.parse import unquote, urlparse

from smlaunch import contract
from smlaunch.sdk import keywords
from smlaunch.sdk.debugger import TensorBoardOutputConfig
from smlaunch.sdk.errors import (
    ConfigurationError,
    JobNameTakenError,
    UnsupportedFeatureError,
    no_space_errors,
    require_type,
)
from smlaunch.sdk.jobs import jobref
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.request import build as request
from smlaunch.sdk.request import catalog, describe, image_uris, naming, sdk_config, validation
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.args import EstimatorArgs
from smlaunch.sdk.request.catalog import InstanceType
from smlaunch.sdk.request.distribution import Distribution
from smlaunch.sdk.request.packaging import build_and_stage
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

if TYPE_CHECKING:
    from smlaunch.sdk.sessions.protocol import TrainingSession

logger = logging.getLogger(__name__)

MAX_JOB_NAME_ATTEMPTS = 100
"""Generated names ``fit()`` tries (one per millisecond) while other submitters hold them."""


def _default_session(instance_type: str) -> TrainingSession:
    if instance_type in (contract.LOCAL_INSTANCE_TYPE, contract.LOCAL_GPU_INSTANCE_TYPE):
        from smlaunch.sdk.sessions.local import LocalSession

        return LocalSession()
    try:
        from smlaunch.sdk.sessions.sagemaker import Session
    except ImportError as exc:  # pragma: no cover - only while Session is not installed
        raise ConfigurationError(
            "sagemaker_session",
            None,
            "the SageMaker Session is not available in this installation",
            "pass sagemaker_session=LocalSession() to run on this machine",
        ) from exc
    return Session()


T = TypeVar("T")


class _Arg(Generic[T]):
    """An SDK attribute of the estimator kept in its :class:`EstimatorArgs`: reading it reads
    ``est.args``; setting it (as the SDK's plain attributes allow) replaces ``est.args``, unchecked,
    as setting the SDK's attribute is."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Arg[T]: ...

    @overload
    def __get__(self, obj: Estimator, owner: type) -> T: ...

    def __get__(self, obj: Estimator | None, owner: type) -> _Arg[T] | T:
        if obj is None:
            return self
        value: T = getattr(obj.args, self.name)
        return value

    def __set__(self, obj: Estimator, value: T) -> None:
        change: dict[str, Any] = {self.name: value}
        obj.args = dataclasses.replace(obj.args, **change)


class Estimator:
    """A training job definition: SageMaker SDK v2's ``Estimator`` (generic, ``image_uri``).

    With ``entry_point`` (and ``source_dir``), the code is packed into ``sourcedir.tar.gz`` and the
    script-mode hyperparameters are sent, as for framework estimators. Without it, the image runs
    its own entry point.

    The checked arguments are one frozen value, :attr:`args`
    (:class:`~smlaunch.sdk.request.args.EstimatorArgs`), from which :meth:`plan` builds the request;
    the SDK's attributes (``instance_type``, ``output_path``...) read it, and setting one replaces it.
    """

    _framework: ClassVar[str | None] = None
    _framework_versions: tuple[str | None, str | None] = (None, None)
    """``(framework_version, py_version)``, set by :class:`Framework` before this constructor runs."""
    args: EstimatorArgs
    """The checked constructor arguments (an smlaunch extension): what :meth:`plan` builds from."""

    instance: _Arg[InstanceType] = _Arg()
    """The instance catalog's entry for :attr:`instance_type`."""
    instance_type: _Arg[str] = _Arg()
    instance_count: _Arg[int] = _Arg()
    is_local: _Arg[bool] = _Arg()
    """Whether the session runs jobs on this machine (or on Slurm), not on SageMaker."""
    role: _Arg[str | None] = _Arg()
    image_uri: _Arg[str | None] = _Arg()
    entry_point: _Arg[str | None] = _Arg()
    source_dir: _Arg[str | None] = _Arg()
    dependencies: _Arg[list[str]] = _Arg()
    output_path: _Arg[str | None] = _Arg()
    code_location: _Arg[str | None] = _Arg()
    base_job_name: _Arg[str | None] = _Arg()
    max_run: _Arg[int] = _Arg()
    volume_size: _Arg[int] = _Arg()
    volume_kms_key: _Arg[str | None] = _Arg()
    input_mode: _Arg[str] = _Arg()
    environment: _Arg[dict[str, str] | None] = _Arg()
    metric_definitions: _Arg[list[dict[str, str]] | None] = _Arg()
    tags: _Arg[list[dict[str, str]] | None] = _Arg()
    use_spot_instances: _Arg[bool] = _Arg()
    max_wait: _Arg[int | None] = _Arg()
    checkpoint_s3_uri: _Arg[str | None] = _Arg()
    checkpoint_local_path: _Arg[str | None] = _Arg()
    subnets: _Arg[list[str] | None] = _Arg()
    security_group_ids: _Arg[list[str] | None] = _Arg()
    encrypt_inter_container_traffic: _Arg[bool] = _Arg()
    max_retry_attempts: _Arg[int | None] = _Arg()
    disable_output_compression: _Arg[bool] = _Arg()
    output_kms_key: _Arg[str | None] = _Arg()
    container_log_level: _Arg[int] = _Arg()
    enable_sagemaker_metrics: _Arg[bool | None] = _Arg()
    disable_profiler: _Arg[bool] = _Arg()
    debugger_hook_config: _Arg[bool | None] = _Arg()
    tensorboard_output_config: _Arg[TensorBoardOutputConfig | None] = _Arg()
    keep_alive_period_in_seconds: _Arg[int | None] = _Arg()
    """SageMaker warm pools; sent as ``ResourceConfig.KeepAlivePeriodInSeconds``. Local runs
    accept it and it has no effect there (hosts are processes or containers of this machine)."""
    model_uri: str | None = None
    """The pre-trained model channel's URI of an attached job (see :meth:`attach`); smlaunch's
    constructor has no ``model_uri``, so ``fit()`` does not send it again."""
    model_channel_name: str = "model"
    """The channel :attr:`model_uri` came from."""

    @keywords.sdk_keywords(keywords.RENAMED)
    def __init__(
        self,
        image_uri: str | None = None,
        role: str | None = None,
        instance_count: int | None = None,
        instance_type: str | None = None,
        *,
        entry_point: str | None = None,
        source_dir: str | None = None,
        dependencies: list[str] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        distribution: Mapping[str, Any] | None = None,
        output_path: str | None = None,
        code_location: str | None = None,
        base_job_name: str | None = None,
        max_run: int = 24 * 60 * 60,
        environment: Mapping[str, str] | None = None,
        volume_size: int = 30,
        volume_kms_key: str | None = None,
        input_mode: str = "File",
        metric_definitions: list[dict[str, str]] | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        sagemaker_session: TrainingSession | None = None,
        subnets: list[str] | None = None,
        security_group_ids: list[str] | None = None,
        enable_network_isolation: bool | None = None,
        encrypt_inter_container_traffic: bool | None = None,
        max_retry_attempts: int | None = None,
        disable_output_compression: bool = False,
        output_kms_key: str | None = None,
        container_log_level: int = logging.INFO,
        enable_sagemaker_metrics: bool | None = None,
        disable_profiler: bool | None = None,
        debugger_hook_config: bool | None = None,
        tensorboard_output_config: TensorBoardOutputConfig | None = None,
        keep_alive_period_in_seconds: int | None = None,
    ) -> None:
        # Every argument, before anything reads one: a NUL fails here, naming it, rather than as an
        # internal traceback when a host starts (locals() holds exactly the arguments here).
        naming.refuse_nul({name: value for name, value in locals().items() if name != "self"})
        instance = catalog.lookup(instance_type, "instance_type")
        count = validation.check_instance_count(instance_count)
        validation.check_argument_types(
            image_uri=image_uri,
            role=role,
            source_dir=source_dir,
            dependencies=dependencies,
            hyperparameters=hyperparameters,
            volume_kms_key=volume_kms_key,
            output_kms_key=output_kms_key,
            input_mode=input_mode,
            checkpoint_local_path=checkpoint_local_path,
            use_spot_instances=use_spot_instances,
            subnets=subnets,
            security_group_ids=security_group_ids,
            enable_network_isolation=enable_network_isolation,
            encrypt_inter_container_traffic=encrypt_inter_container_traffic,
            disable_output_compression=disable_output_compression,
            disable_profiler=disable_profiler,
            enable_sagemaker_metrics=enable_sagemaker_metrics,
            debugger_hook_config=debugger_hook_config,
        )
        session = sagemaker_session if sagemaker_session is not None else _default_session(instance.name)
        count = validation.check_instance_quota(count, instance.name, session.instance_count_quota)
        self.sagemaker_session: TrainingSession = session
        is_local = session.is_local
        validation.check_vpc(subnets, security_group_ids)  # as given: the SDK checks before its config
        # The SageMaker SDK's config.yaml defaults fill what was left unset (smlaunch.sdk.request.sdk_config).
        defaults = sdk_config.estimator_arguments(
            session.sagemaker_config,
            instance.name,
            is_local,
            role=role,
            output_kms_key=output_kms_key,
            volume_kms_key=volume_kms_key,
            subnets=subnets,
            security_group_ids=security_group_ids,
            enable_network_isolation=enable_network_isolation,
            encrypt_inter_container_traffic=encrypt_inter_container_traffic,
            disable_profiler=disable_profiler,
            environment=environment,
            debugger_hook_config=debugger_hook_config,
        )
        role, output_kms_key, volume_kms_key = (
            defaults["role"],
            defaults["output_kms_key"],
            defaults["volume_kms_key"],
        )
        subnets, security_group_ids = defaults["subnets"], defaults["security_group_ids"]
        enable_network_isolation = defaults["enable_network_isolation"]
        encrypt_inter_container_traffic = defaults["encrypt_inter_container_traffic"]
        disable_profiler, environment = defaults["disable_profiler"], defaults["environment"]
        debugger_hook_config = defaults["debugger_hook_config"]
        if instance.is_local and not is_local:
            raise ConfigurationError(
                "instance_type",
                instance.name,
                "local types run only with a LocalSession",
                "pass sagemaker_session=LocalSession(), or an ml. instance type",
            )
        if is_local:
            catalog.require_topology(instance, pinned_ranks=session.processes_per_host)
        elif not instance.known:
            logger.warning(
                "instance_type=%r is not in smlaunch's instance catalog (a type newer than it?): sent "
                "to SageMaker as given, without the checks that need its accelerators; suggestions: %s",
                instance.name,
                ", ".join(catalog.suggestions(instance.name)) or "none",
            )
        if not is_local and not role:
            raise ConfigurationError(
                "role",
                role,
                "SageMaker training jobs need an IAM execution role",
                "pass role='arn:aws:iam::<account>:role/<name>'",
            )
        dependencies = list(dependencies or [])
        framework_version, py_version = self._framework_versions
        # What the distribution's checks read; the rest of the arguments follow them, in this order.
        self.args = EstimatorArgs(
            instance=instance,
            instance_type=instance.name,
            instance_count=count,
            is_local=is_local,
            framework=self._framework,
            framework_version=framework_version,
            py_version=py_version,
            role=role,
            image_uri=image_uri,
            entry_point=entry_point,
            source_dir=validation.check_code(entry_point, source_dir, dependencies, is_local),
            dependencies=dependencies,
            hyperparameters=dict(hyperparameters or {}),
        )
        hp.check_limits(request.hyperparameters_wire(self.args))
        self._distribution_arg: dict[str, Any] = {}
        self._distribution_checked: dict[str, Any] = {}
        self._set_distribution(distribution)

        # The rest, checked in the order the SDK's constructor reads them.
        output_path = validation.check_location(output_path, "output_path", is_local)
        code_location = validation.check_location(code_location, "code_location", is_local)
        base_job_name = naming.validate_base_job_name(base_job_name) if base_job_name is not None else None
        max_run = validation.positive_int(max_run, "max_run", "seconds, e.g. 86400")
        volume_size = validation.positive_int(volume_size, "volume_size", "GB, e.g. 30")
        input_mode = validation.check_input_mode(input_mode)
        environment = validation.check_environment(environment)
        metric_definitions = validation.check_metrics(metric_definitions)
        checked_tags = sdk_config.merged_tags(validation.check_tags(tags), session.sagemaker_config)
        max_wait = validation.check_spot(max_wait, use_spot_instances, max_run, is_local)
        checkpoint_s3_uri, checkpoint_local_path = validation.check_checkpoints(
            checkpoint_s3_uri, checkpoint_local_path, is_local
        )
        self.args = dataclasses.replace(
            self.args,
            output_path=output_path,
            code_location=code_location,
            base_job_name=base_job_name,
            max_run=max_run,
            volume_size=volume_size,
            volume_kms_key=volume_kms_key,
            input_mode=input_mode,
            environment=environment,
            metric_definitions=metric_definitions,
            tags=checked_tags,
            use_spot_instances=use_spot_instances,
            max_wait=max_wait,
            checkpoint_s3_uri=checkpoint_s3_uri,
            checkpoint_local_path=checkpoint_local_path,
            subnets=list(subnets) if subnets else None,
            security_group_ids=list(security_group_ids) if security_group_ids else None,
            enable_network_isolation=bool(enable_network_isolation),
            encrypt_inter_container_traffic=bool(encrypt_inter_container_traffic),
            max_retry_attempts=validation.check_max_retry_attempts(max_retry_attempts),
            disable_output_compression=disable_output_compression,
            output_kms_key=output_kms_key,
            container_log_level=validation.check_container_log_level(container_log_level),
            enable_sagemaker_metrics=enable_sagemaker_metrics,
            disable_profiler=bool(disable_profiler),
            debugger_hook_config=debugger_hook_config,
            tensorboard_output_config=validation.check_tensorboard(tensorboard_output_config, is_local),
            keep_alive_period_in_seconds=validation.check_keep_alive(keep_alive_period_in_seconds),
        )
        self.latest_training_job: TrainingJob | None = None

    @property
    def distribution(self) -> dict[str, Any]:
        """The ``distribution`` dict as passed (``{}`` when none), as the SDK keeps it, so code such as
        ``est.distribution["mpi"]`` works; the checked, typed form stays internal. Assigning a new
        dict, or changing this one, is honoured (and checked) by the next ``plan()``/``fit()``."""
        return self._distribution_arg

    @distribution.setter
    def distribution(self, value: Mapping[str, Any] | None) -> None:
        self._set_distribution(value)

    def _set_distribution(self, value: Any) -> None:
        """Parse and check ``value`` against the topology (and the framework image), then keep it."""
        parsed = Distribution.parse(value, self._framework)
        parsed.check(
            self.instance,
            self.instance_count,
            local=self.is_local,
            emulated_processes_per_host=self.sagemaker_session.processes_per_host,
        )
        torch_on = parsed.torch_distributed is not None and parsed.torch_distributed.enabled
        if torch_on and self.entry_point is not None and not self.entry_point.endswith(".py"):
            raise ConfigurationError(
                "entry_point",
                self.entry_point,
                "torch_distributed runs Python programs (*.py) only",
                "point entry_point at a .py file",
            )
        previous = self.args
        self.args = dataclasses.replace(previous, distribution=parsed)
        try:
            self._check_framework_distribution()
            self._check_sagemaker_keys()
        except ConfigurationError:
            self.args = previous
            raise
        self._distribution_arg = value if isinstance(value, dict) else parsed.to_dict()
        self._distribution_checked = copy.deepcopy(self._distribution_arg)

    def _check_framework_distribution(self) -> None:
        """Limits the framework's image puts on the distribution (a generic image has none)."""

    def _check_sagemaker_keys(self) -> None:
        """The user's own ``sagemaker_*`` hyperparameters, taken as the SDK takes them: launcher keys
        must not contradict ``distribution=``
        (:func:`smlaunch.sdk.request.hyperparameters.check_launcher_keys`);
        a ``sagemaker_submit_directory`` the user names (an image run without ``entry_point``) must be
        where the hosts can fetch it. The script-mode keys are replaced when code is staged."""
        wire = request.hyperparameters_wire(self.args)
        distribution = self.args.distribution
        launcher = hp.encode(distribution.to_hyperparameters(self.instance_type), "distribution")
        hp.check_launcher_keys(wire, launcher, distribution.to_dict())
        if self.entry_point is None and contract.HP_SUBMIT_DIRECTORY in wire:
            validation.check_submit_directory(
                hp.decode_value(wire[contract.HP_SUBMIT_DIRECTORY]), self.is_local
            )

    def enable_network_isolation(self) -> bool:
        """Whether the job runs without network access (a method, as in the SDK)."""
        return bool(self.args.enable_network_isolation)

    # --- what subclasses define -----------------------------------------------------------------

    def hyperparameters(self) -> dict[str, Any]:
        """The user's hyperparameters, raw (the SDK returns them JSON-encoded; ``plan()`` shows the
        encoded wire form)."""
        return dict(self.args.hyperparameters)

    def set_hyperparameters(self, **kwargs: Any) -> None:
        """Add or replace hyperparameters. Unlike SDK v2's framework estimators, values are encoded
        once, not twice."""
        previous = self.args
        self.args = dataclasses.replace(previous, hyperparameters={**previous.hyperparameters, **kwargs})
        try:
            hp.check_limits(request.hyperparameters_wire(self.args))
            self._check_sagemaker_keys()
        except ConfigurationError:
            self.args = previous
            raise

    def _plan(
        self,
        inputs: Any,
        job_name: str | None,
        now: datetime | None = None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
        """The spec, and the local input paths to upload as (channel, path) before submitting
        (:func:`smlaunch.sdk.request.build.build`). ``now``: the time a generated job name carries."""
        if self._distribution_arg != self._distribution_checked:  # the dict was changed in place
            self._set_distribution(self._distribution_arg)
        return request.build(self.args, self.sagemaker_session, inputs, job_name, now, experiment_config)

    def plan(
        self,
        inputs: Any = None,
        job_name: str | None = None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> TrainingJobSpec:
        """The exact request ``fit(inputs)`` would send; stages and submits nothing.

        ``plan(...).to_request()`` is the dict boto3's ``create_training_job`` receives, and
        ``print(plan(...))`` shows it as indented JSON; its fields read as attributes
        (``plan().ResourceConfig.InstanceType``).

        The code URI in ``sagemaker_submit_directory`` is where the code *will* be staged. The only
        I/O is checking that local input paths exist (and, for a SageMaker session without an
        ``output_path``, the session resolving its default bucket).
        """
        return self._plan(inputs, job_name, experiment_config=experiment_config)[0]

    # --- fit and the job handle -----------------------------------------------------------------

    def fit(
        self,
        inputs: Any = None,
        wait: bool = True,
        logs: bool | str = True,
        job_name: str | None = None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> None:
        """Plan, check with the backend, stage code and inputs, submit; wait when asked.

        ``experiment_config`` (``ExperimentName``, ``TrialName``, ``TrialComponentDisplayName``,
        ``RunName``) is sent as the request's ``ExperimentConfig``, as the SDK sends it; a local job
        records it in its ``describe()``.
        """
        require_type("wait", wait, bool, "pass wait=True or wait=False")
        require_type("logs", logs, (bool, str), "pass logs=True or logs=False")
        backend = self.sagemaker_session.backend()
        job_request, uploads = self._claim(backend, inputs, job_name, experiment_config)
        spec = job_request.spec
        try:
            self._stage_code(spec)
            for channel, path in uploads:
                self.sagemaker_session.stage_local_input(path, spec.TrainingJobName, channel)
            backend.submit(job_request)
        except BaseException:
            backend.release(spec)  # the name is free again, and nothing staged for it is left
            raise
        print(f"Creating training-job with name: {spec.TrainingJobName}", flush=True)
        self.latest_training_job = TrainingJob(backend, spec.TrainingJobName)
        if wait:
            show_logs = logs not in (False, "None")
            self.latest_training_job.wait(logs=show_logs)

    def _claim(
        self,
        backend: Any,
        inputs: Any,
        job_name: str | None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> tuple[JobRequest, list[tuple[str, str]]]:
        """Plan, check and reserve the job's name before anything is staged (``backend.reserve``).
        The backend gets the distribution's strategy with the spec (it never decodes the wire).

        A generated name that another submitter holds (same base, same millisecond: concurrent
        ``fit(wait=False)`` calls) is replaced by the next millisecond's, as the SDK's
        ``name_from_base`` gives every call a fresh name; a name the user chose is refused.
        """
        moment = datetime.now(timezone.utc)
        for _ in range(MAX_JOB_NAME_ATTEMPTS):
            spec, uploads = self._plan(inputs, job_name, moment, experiment_config)
            job_request = JobRequest(spec, self.args.distribution.strategy)
            try:
                backend.check(job_request)
                backend.reserve(spec)
                return job_request, uploads
            except JobNameTakenError:
                if job_name is not None:
                    raise
            moment = max(datetime.now(timezone.utc), moment + timedelta(milliseconds=1))
        raise JobNameTakenError(
            "base_job_name",
            request.base_name(self.args),
            f"{MAX_JOB_NAME_ATTEMPTS} generated job names in a row were taken",
            "pass job_name=... explicitly, or another base_job_name",
        )

    def _stage_code(self, spec: TrainingJobSpec, uri: str | None = None) -> None:
        """Build and stage the code ``spec`` runs, at ``uri`` (default: where ``spec``'s job stages
        it, :func:`smlaunch.sdk.request.build.code_uri`); a code URI the user gave is left as is."""
        if self.entry_point is None or (self.source_dir is not None and validation.is_uri(self.source_dir)):
            return
        uri = uri or request.code_uri(self.args, spec.TrainingJobName, spec.OutputDataConfig.S3OutputPath)
        assert uri is not None
        s3_client = None
        extra_args: dict[str, Any] | None = None
        if urlparse(uri).scheme == "s3":
            s3_client = self.sagemaker_session.s3_client()
            bucket = urlparse(uri).netloc
            extra_args = {"ServerSideEncryption": "aws:kms"}
            output_bucket = urlparse(spec.OutputDataConfig.S3OutputPath).netloc
            if self.output_kms_key and bucket == output_bucket:
                extra_args["SSEKMSKeyId"] = self.output_kms_key
            extra_args.update(self.sagemaker_session.bucket_owner_args(bucket))
        # A full disk (the code's own file:// destination, or the temp dir it is built in) is named.
        where = unquote(urlparse(uri).path) if urlparse(uri).scheme == "file" else tempfile.gettempdir()
        with no_space_errors(
            where,
            "free space on that filesystem, or stage the code elsewhere "
            "(code_location=..., output_path=..., or LocalSession(root=...))",
        ):
            archive, uploaded = build_and_stage(
                self.entry_point,
                self.source_dir,
                self.dependencies,
                uri,
                s3_client=s3_client,
                extra_args=extra_args,
            )
        logger.info(
            "%s %s (sha256 %s)",
            "Staged code to" if uploaded else "Code unchanged at",
            uri,
            archive.sha256[:12],
        )

    def _require_job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise ConfigurationError(
                "latest_training_job",
                None,
                "no training job yet",
                "call fit() first, or Estimator.attach(job_name)",
            )
        return self.latest_training_job

    @property
    def model_data(self) -> str:
        """``<output_path>/<job>/output/model.tar.gz`` of the latest job."""
        job = self._require_job()
        uri = job.model_data
        if uri:
            return uri
        return request.join_uri(
            request.resolve_output_path(self.args, self.sagemaker_session),
            job.name,
            "output",
            contract.MODEL_TARBALL,
        )

    @property
    def training_job_analytics(self) -> Any:
        """The latest job's metrics: a :class:`~smlaunch.sdk.jobs.analytics.TrainingJobAnalytics`
        (``.dataframe()``, ``.plot()``), from any backend, as the SDK's property of this name."""
        from smlaunch.sdk.jobs.analytics import TrainingJobAnalytics

        job = self._require_job()
        return TrainingJobAnalytics(job.name, sagemaker_session=self.sagemaker_session)

    def logs(self) -> None:
        """Print the latest job's logs, following them until it ends."""
        self._require_job().logs(follow=True)

    def stop(self, reason: str | None = None) -> None:
        """Stop the latest job (returns without waiting). ``reason="spot"`` emulates a spot
        interruption of a local managed-spot job instead: it resumes on fresh hosts."""
        self._require_job().stop(reason=reason)

    def deploy(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: smlaunch trains; it does not host endpoints. Raises
        :class:`UnsupportedFeatureError` saying where the model is and what can serve it."""
        raise UnsupportedFeatureError(
            "deploy() (SageMaker real-time endpoints)",
            "take the trained model from est.model_data (model.tar.gz) and serve it with "
            "sagemaker.pytorch.PyTorchModel(model_data=est.model_data, role=..., entry_point=...)"
            ".deploy(...) "
            "from the SageMaker Python SDK, or with TorchServe on your own machine",
        )

    # --- attach ---------------------------------------------------------------------------------

    @classmethod
    def attach(
        cls,
        training_job_name: str,
        sagemaker_session: Any | None = None,
        model_channel_name: str | None = "model",
        *,
        wait: bool = True,
    ) -> Estimator:
        """Rebuild the estimator of an existing job from DescribeTrainingJob (``distribution`` and
        ``metric_definitions`` included), point ``latest_training_job`` at it, and, as the SDK's,
        block until the job ends, streaming nothing (``logs()`` shows them).

        ``training_job_name`` may say where the job is (:mod:`smlaunch.sdk.jobs.jobref`: ``local:NAME``,
        ``slurm:SHARED_DIR:NAME``, ``sagemaker:NAME``). Without ``sagemaker_session``, a bare name
        is the local job store's when it has that job, else SageMaker's, as for ``smlaunch``.

        A Failed job raises :class:`~smlaunch.sdk.errors.UnexpectedStatusException` (a ``ValueError``)
        once it ended, as the SDK's; a Stopped one warns. ``wait=False`` (an smlaunch extension)
        returns at once, whatever the job's state. Ctrl-C while waiting stops the waiting, never
        the job. ``model_channel_name``: when the job has an input channel of that name,
        ``model_uri`` and ``model_channel_name`` are set from it, as the SDK sets them.
        """
        require_type("model_channel_name", model_channel_name, (str, type(None)), "pass e.g. 'model'")
        require_type("wait", wait, bool, "pass wait=True (block until the job ends) or wait=False")
        bare = sagemaker_session is None and jobref.parse(training_job_name).scheme is None
        sagemaker_session, training_job_name = jobref.resolve(training_job_name, sagemaker_session)
        backend = sagemaker_session.backend()
        try:
            description = backend.describe(training_job_name)
        except ConfigurationError as exc:
            if not bare or sagemaker_session.is_local:
                raise
            # A bare name the local store lacks went to SageMaker, which could not be asked.
            from smlaunch.sdk.sessions.local import LocalSession

            raise jobref.not_found_anywhere(
                "training_job_name",
                training_job_name,
                LocalSession().root,
                exc,
                "check the name (smlaunch list), or pass sagemaker_session= for the place the job is in",
            ) from None
        kwargs = describe.arguments(description, cls._framework)
        estimator = cls(sagemaker_session=sagemaker_session, **kwargs)
        for channel in description.get("InputDataConfig") or []:
            if model_channel_name and channel.get("ChannelName") == model_channel_name:
                source = (channel.get("DataSource") or {}).get("S3DataSource") or {}
                estimator.model_uri = source.get("S3Uri")
                estimator.model_channel_name = model_channel_name
        estimator.latest_training_job = TrainingJob(backend, training_job_name)
        if wait:
            estimator.latest_training_job.wait(logs=False, stop_on_interrupt=False)
        return estimator


class Framework(Estimator):
    """SageMaker SDK v2's ``sagemaker.estimator.Framework``: script mode on a Deep Learning Container.

    ``framework_version`` and ``py_version`` pick the DLC image (see :mod:`smlaunch.sdk.request.image_uris`);
    ``image_uri`` overrides it (e.g. an smlaunch image from ``container/`` pushed to ECR).
    Subclasses name the framework, its display name and the version from which the SDK turns
    metrics time series on.
    """

    _display_name: ClassVar[str]
    _metrics_since: ClassVar[tuple[int, ...]]
    _version_example: ClassVar[str]

    framework_version: _Arg[str | None] = _Arg()
    py_version: _Arg[str | None] = _Arg()

    @keywords.sdk_keywords(keywords.RENAMED)
    def __init__(
        self,
        entry_point: str | None = None,
        framework_version: str | None = None,
        py_version: str | None = None,
        source_dir: str | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        catalog.lookup(kwargs.get("instance_type"), "instance_type")  # the first thing to get right
        require_type("framework_version", framework_version, (str, type(None)), "pass e.g. '2.1.0'")
        require_type("py_version", py_version, (str, type(None)), "pass e.g. 'py310'")
        if entry_point is None:
            raise ConfigurationError(
                "entry_point",
                None,
                f"{self._display_name} runs a training script",
                "pass entry_point='train.py'",
            )
        if image_uri is None and (framework_version is None or py_version is None):
            raise ConfigurationError(
                "framework_version" if framework_version is None else "py_version",
                None,
                f"framework_version and py_version pick the {self._display_name} image",
                f"pass both (e.g. {self._version_example}) or image_uri",
            )
        if image_uri is None:
            image_uris.version_config(str(framework_version), str(py_version), str(self._framework))
        self._framework_versions = (framework_version, py_version)
        if "enable_sagemaker_metrics" not in kwargs and framework_version is not None:
            # The SDK turns metrics time series on from a version on (PyTorch 1.3, TensorFlow 1.15).
            since = self._metrics_since
            kwargs["enable_sagemaker_metrics"] = image_uris.version_tuple(framework_version) >= since
            if not kwargs["enable_sagemaker_metrics"]:
                kwargs["enable_sagemaker_metrics"] = None
        super().__init__(
            image_uri,
            entry_point=entry_point,
            source_dir=source_dir,
            hyperparameters=hyperparameters,
            distribution=distribution,
            **kwargs,
        )
