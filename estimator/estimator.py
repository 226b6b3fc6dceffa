"""``Estimator`` and ``Framework``: SageMaker SDK v2's constructor and ``fit()``, on any backend
(the frameworks: ``PyTorch`` in :mod:`estimator.pytorch`, ``TensorFlow`` in :mod:`estimator.tensorflow`).

``fit()`` reads as TorchX's submit: validate (at construction) -> :meth:`Estimator.plan` (pure: the
exact :class:`~estimator.spec.TrainingJobSpec`) -> ``backend.check(spec)`` -> stage code (and local
inputs) -> ``backend.submit(spec)`` -> :class:`~estimator.job.TrainingJob` -> wait. Every bad
argument is a :class:`ConfigurationError` naming the argument, the value and the fix, raised at
construction (or, for ``inputs`` and ``job_name``, in ``plan()``), before anything is staged.

This module holds the constructor, ``plan``/``fit`` and ``attach``. The argument checks are
:mod:`estimator.validation`; the request is built by :mod:`estimator.request`; the DLC version
tables are :mod:`estimator.image_uris`; what the estimator needs from a session is
:class:`estimator.session_protocol.TrainingSession`. It stays over 500 lines because the SDK's
public surface (the constructor's arguments, their attributes, ``fit``, ``attach``) is one concept
that users read in one place; everything behind it lives elsewhere.

The request equals what ``sagemaker.pytorch.PyTorch(...).fit(...)`` (SDK 2.257.x) sends for the same
arguments (``tests/unit/test_plan_oracle.py`` checks it field by field), apart from these
deliberate differences (distribution ones are in :mod:`estimator.distribution`):

| topic                            | SDK v2                      | smlaunch                                |
|----------------------------------|-----------------------------|-----------------------------------------|
| ``pytorchddp``                   | rewritten to smddp keys     | ``sagemaker_pytorch_ddp_enabled``       |
| entry point / image / mp checks  | at ``fit()``                | at construction                         |
| type unknown to smlaunch         | sent to the service         | sent with a warning; local runs refuse  |
| malformed instance type          | sent to the service         | error naming the nearest types          |
| Trainium type, no ``image_uri``  | pytorch-training-neuron 1.11| error asking for a Neuron ``image_uri`` |
| ``ml.`` type + LocalSession      | not emulated                | allowed: the topology is emulated       |
| local spot, checkpoints          | refused                     | left to ``backend.check(spec)``         |
| local_gpu multi-host             | refused                     | left to ``backend.check(spec)``         |
| torch_distributed, CPU, local    | refused                     | allowed (gloo)                          |
| Debug/ProfilerConfig, local      | sent                        | left out (nothing reads them)           |
| code of local runs               | S3 unless ``local_code``    | ``<output_path>/<job>/source/``         |
| smddp/torch_distributed versions | DLC lists always            | DLC lists on SageMaker only             |
| image, region w/o registry       | error                       | ``pytorch-training:<tag>``              |
| local input path, no scheme      | error                       | ``file://`` (local), uploaded (Session) |
| job-name milliseconds            | 1 to 3 digits               | always 3 digits                         |
| ``attach()``                     | loses distribution, metrics | restores both                           |
| ``attach()`` waiting             | blocks until the job ends   | the same; ``wait=False`` returns at once|
| ``attach()``, Ctrl-C waiting     | stops waiting               | the same (the job goes on)              |
| ``attach()`` model channel       | ``model_uri``, re-sent      | ``model_uri`` set, not re-sent by fit() |
| ``set_hyperparameters``          | encodes values twice        | encodes once                            |
| ``config.yaml``, local session   | every key applies           | Environment and Tags only               |
| launcher hp vs ``distribution``  | replaced, or sent beside it | refused, naming the hyperparameter      |
| SDK v1 ``script_mode``           | swallowed silently          | dropped with a no-op warning            |
| any other unknown keyword        | swallowed silently          | ``TypeError``                           |
| ``instance_groups``              | heterogeneous cluster       | ``ConfigurationError`` at construction  |
| ``Estimator(image_name=...)``    | ``TypeError`` (v1 name)     | renamed ``image_uri``, with the warning |

SDK v1 argument names (``train_instance_type``, ``train_max_run``, ``image_name``, ...) are taken
with the SDK's deprecation warning and mapped to their v2 names (:mod:`estimator.keywords`).

``tensorboard_output_config`` is sent to SageMaker as given and emulated locally (event files synced
to its ``s3_output_path`` while the job runs, see :mod:`estimator.backends.local.checkpoints`).

Not supported: ``model_uri``, ``rules``, debugger/profiler config objects, ``instance_groups``
(refused by name), ``training_recipe``, ``git_config``, pipeline variables.
"""

from __future__ import annotations

import copy
import logging
import tempfile
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlparse

from estimator import catalog, image_uris, jobref, keywords, naming, request, sdk_config, validation
from estimator import hyperparameters as hp
from estimator.debugger import TensorBoardOutputConfig
from estimator.distribution import DISTRIBUTION_KEYS, Distribution
from estimator.errors import (
    ConfigurationError,
    JobNameTakenError,
    UnsupportedFeatureError,
    no_space_errors,
    require_type,
)
from estimator.job import TrainingJob
from estimator.packaging import build_and_stage
from estimator.spec import DebugHookConfig, TrainingJobSpec
from runtime import contract

if TYPE_CHECKING:
    from estimator.session_protocol import TrainingSession

logger = logging.getLogger(__name__)

MAX_JOB_NAME_ATTEMPTS = 100
"""Generated names ``fit()`` tries (one per millisecond) while other submitters hold them."""


def _default_session(instance_type: str) -> TrainingSession:
    if instance_type in (contract.LOCAL_INSTANCE_TYPE, contract.LOCAL_GPU_INSTANCE_TYPE):
        from estimator.local_session import LocalSession

        return LocalSession()
    try:
        from estimator.session import Session
    except ImportError as exc:  # pragma: no cover - only while Session is not installed
        raise ConfigurationError(
            "sagemaker_session",
            None,
            "the SageMaker Session is not available in this installation",
            "pass sagemaker_session=LocalSession() to run on this machine",
        ) from exc
    return Session()


class Estimator:
    """A training job definition: SageMaker SDK v2's ``Estimator`` (generic, ``image_uri``).

    With ``entry_point`` (and ``source_dir``), the code is packed into ``sourcedir.tar.gz`` and the
    script-mode hyperparameters are sent, as for framework estimators. Without it, the image runs
    its own entry point.
    """

    _framework: ClassVar[str | None] = None
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
        self.instance = catalog.lookup(instance_type, "instance_type")
        self.instance_type: str = self.instance.name
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
        session = sagemaker_session if sagemaker_session is not None else _default_session(self.instance_type)
        self.instance_count = validation.check_instance_quota(
            count, self.instance_type, session.instance_count_quota
        )
        self.sagemaker_session: TrainingSession = session
        self.is_local = session.is_local
        validation.check_vpc(subnets, security_group_ids)  # as given: the SDK checks before its config
        # The SageMaker SDK's config.yaml defaults fill what was left unset (estimator.sdk_config).
        defaults = sdk_config.estimator_arguments(
            session.sagemaker_config,
            self.instance_type,
            self.is_local,
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
        if self.instance.is_local and not self.is_local:
            raise ConfigurationError(
                "instance_type",
                self.instance_type,
                "local types run only with a LocalSession",
                "pass sagemaker_session=LocalSession(), or an ml. instance type",
            )
        if self.is_local:
            catalog.require_topology(self.instance, pinned_ranks=session.processes_per_host)
        elif not self.instance.known:
            logger.warning(
                "instance_type=%r is not in smlaunch's instance catalog (a type newer than it?): sent "
                "to SageMaker as given, without the checks that need its accelerators; suggestions: %s",
                self.instance_type,
                ", ".join(catalog.suggestions(self.instance_type)) or "none",
            )
        if not self.is_local and not role:
            raise ConfigurationError(
                "role",
                role,
                "SageMaker training jobs need an IAM execution role",
                "pass role='arn:aws:iam::<account>:role/<name>'",
            )
        self.role = role
        self.image_uri = image_uri
        self.entry_point = entry_point
        self.source_dir = source_dir
        self.dependencies = list(dependencies or [])
        self.source_dir = validation.check_code(entry_point, source_dir, self.dependencies, self.is_local)

        self._hyperparameters = dict(hyperparameters or {})
        hp.check_limits(self._hyperparameters_wire())
        self._distribution_arg: dict[str, Any] = {}
        self._distribution_checked: dict[str, Any] = {}
        self._set_distribution(distribution)

        self.output_path = validation.check_location(output_path, "output_path", self.is_local)
        self.code_location = validation.check_location(code_location, "code_location", self.is_local)
        self.base_job_name = (
            naming.validate_base_job_name(base_job_name) if base_job_name is not None else None
        )
        self.max_run = validation.positive_int(max_run, "max_run", "seconds, e.g. 86400")
        self.volume_size = validation.positive_int(volume_size, "volume_size", "GB, e.g. 30")
        self.volume_kms_key = volume_kms_key
        self.input_mode = validation.check_input_mode(input_mode)
        self.environment = validation.check_environment(environment)
        self.metric_definitions = validation.check_metrics(metric_definitions)
        self.tags = sdk_config.merged_tags(validation.check_tags(tags), session.sagemaker_config)
        self.use_spot_instances = use_spot_instances
        self.max_wait = validation.check_spot(max_wait, use_spot_instances, self.max_run, self.is_local)
        self.checkpoint_s3_uri, self.checkpoint_local_path = validation.check_checkpoints(
            checkpoint_s3_uri, checkpoint_local_path, self.is_local
        )
        self.subnets = list(subnets) if subnets else None
        self.security_group_ids = list(security_group_ids) if security_group_ids else None
        self._enable_network_isolation = bool(enable_network_isolation)
        self.encrypt_inter_container_traffic = bool(encrypt_inter_container_traffic)
        self.max_retry_attempts = validation.check_max_retry_attempts(max_retry_attempts)
        self.disable_output_compression = disable_output_compression
        self.output_kms_key = output_kms_key
        self.container_log_level = validation.check_container_log_level(container_log_level)
        self.enable_sagemaker_metrics = enable_sagemaker_metrics
        self.disable_profiler = bool(disable_profiler)
        self.debugger_hook_config = debugger_hook_config
        self.tensorboard_output_config = validation.check_tensorboard(
            tensorboard_output_config, self.is_local
        )
        self.keep_alive_period_in_seconds = validation.check_keep_alive(keep_alive_period_in_seconds)
        """SageMaker warm pools; sent as ``ResourceConfig.KeepAlivePeriodInSeconds``. Local runs
        accept it and it has no effect there (hosts are processes or containers of this machine)."""
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
        previous = getattr(self, "_distribution", None)
        self._distribution = parsed
        try:
            self._check_framework_distribution()
            self._check_sagemaker_keys()
        except ConfigurationError:
            if previous is not None:
                self._distribution = previous
            raise
        self._distribution_arg = value if isinstance(value, dict) else parsed.to_dict()
        self._distribution_checked = copy.deepcopy(self._distribution_arg)

    def _check_framework_distribution(self) -> None:
        """Limits the framework's image puts on the distribution (a generic image has none)."""

    def _check_sagemaker_keys(self) -> None:
        """The user's own ``sagemaker_*`` hyperparameters, taken as the SDK takes them: launcher keys
        must not contradict ``distribution=`` (:func:`estimator.hyperparameters.check_launcher_keys`);
        a ``sagemaker_submit_directory`` the user names (an image run without ``entry_point``) must be
        where the hosts can fetch it. The script-mode keys are replaced when code is staged."""
        wire = self._hyperparameters_wire()
        launcher = hp.encode(self._distribution.to_hyperparameters(self.instance_type), "distribution")
        hp.check_launcher_keys(wire, launcher, self._distribution.to_dict())
        if self.entry_point is None and contract.HP_SUBMIT_DIRECTORY in wire:
            validation.check_submit_directory(
                hp.decode_value(wire[contract.HP_SUBMIT_DIRECTORY]), self.is_local
            )

    def enable_network_isolation(self) -> bool:
        """Whether the job runs without network access (a method, as in the SDK)."""
        return bool(self._enable_network_isolation)

    # --- what subclasses define -----------------------------------------------------------------

    def hyperparameters(self) -> dict[str, Any]:
        """The user's hyperparameters, raw (the SDK returns them JSON-encoded; ``plan()`` shows the
        encoded wire form)."""
        return dict(self._hyperparameters)

    def set_hyperparameters(self, **kwargs: Any) -> None:
        """Add or replace hyperparameters. Unlike SDK v2's framework estimators, values are encoded
        once, not twice."""
        previous = self._hyperparameters
        self._hyperparameters = {**previous, **kwargs}
        try:
            hp.check_limits(self._hyperparameters_wire())
            self._check_sagemaker_keys()
        except ConfigurationError:
            self._hyperparameters = previous
            raise

    def _hyperparameters_wire(self) -> dict[str, str]:
        """The user's hyperparameters as the SDK's generic ``Estimator`` sends them: ``str(value)``,
        or ``json.dumps(value)`` when it has a ``source_dir`` (its ``set_hyperparameters`` encodes
        them then), so a value the notebook JSON-encoded itself reaches the script decoded."""
        return hp.encode(self._hyperparameters, as_str=not self.source_dir)

    def _image(self, region: str) -> str | None:
        return self.image_uri

    def _base_name(self) -> str:
        if self.base_job_name:
            return self.base_job_name
        if self.image_uri:
            return naming.base_name_from_image(self.image_uri)
        return "smlaunch"

    def _framework_hyperparameters(self, job_name: str, output_path: str) -> dict[str, Any]:
        """Keys a framework estimator adds after the distribution's (TensorFlow's ``model_dir``)."""
        return {}

    def _metrics_time_series(self) -> bool | None:
        return self.enable_sagemaker_metrics

    # --- plan -----------------------------------------------------------------------------------

    def _job_name(self, job_name: str | None, now: datetime | None = None) -> str:
        if job_name is not None:
            return naming.validate_job_name(job_name)
        return naming.validate_job_name(naming.name_from_base(self._base_name(), now), "base_job_name")

    def _output_path(self) -> str:
        return self.output_path or self.sagemaker_session.default_output_path()

    def _plan(
        self,
        inputs: Any,
        job_name: str | None,
        now: datetime | None = None,
        experiment_config: Mapping[str, str] | None = None,
    ) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
        """The spec, and the local input paths to upload as (channel, path) before submitting
        (:func:`estimator.request.build`). ``now``: the time a generated job name carries."""
        if self._distribution_arg != self._distribution_checked:  # the dict was changed in place
            self._set_distribution(self._distribution_arg)
        return request.build(self, inputs, job_name, now, experiment_config)

    def _debug_hook_config(self, region: str, output_path: str) -> DebugHookConfig | None:
        """The request's ``DebugHookConfig`` (None where the SDK leaves it out); a framework may
        narrow it further."""
        unsupported = region in request.DEBUGGER_UNSUPPORTED_REGIONS
        if self.is_local or unsupported or self.debugger_hook_config is False:
            return None
        # SDK Framework._validate_and_set_debugger_configs: SMDebug cannot follow distributed jobs
        # that checkpoint; for framework estimators (distribution always set) that is every job.
        if (
            self.checkpoint_s3_uri
            and self.checkpoint_local_path
            and (self._framework is not None or self.instance_count > 1)
        ):
            return None
        return DebugHookConfig(S3OutputPath=output_path, CollectionConfigurations=[])

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
        spec, uploads = self._claim(backend, inputs, job_name, experiment_config)
        try:
            self._stage_code(spec)
            for channel, path in uploads:
                self.sagemaker_session.stage_local_input(path, spec.TrainingJobName, channel)
            backend.submit(spec)
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
    ) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
        """Plan, check and reserve the job's name before anything is staged (``backend.reserve``).

        A generated name that another submitter holds (same base, same millisecond: concurrent
        ``fit(wait=False)`` calls) is replaced by the next millisecond's, as the SDK's
        ``name_from_base`` gives every call a fresh name; a name the user chose is refused.
        """
        moment = datetime.now(timezone.utc)
        for _ in range(MAX_JOB_NAME_ATTEMPTS):
            spec, uploads = self._plan(inputs, job_name, moment, experiment_config)
            try:
                backend.check(spec)
                backend.reserve(spec)
                return spec, uploads
            except JobNameTakenError:
                if job_name is not None:
                    raise
            moment = max(datetime.now(timezone.utc), moment + timedelta(milliseconds=1))
        raise JobNameTakenError(
            "base_job_name",
            self._base_name(),
            f"{MAX_JOB_NAME_ATTEMPTS} generated job names in a row were taken",
            "pass job_name=... explicitly, or another base_job_name",
        )

    def _stage_code(self, spec: TrainingJobSpec) -> None:
        if self.entry_point is None or (self.source_dir is not None and validation.is_uri(self.source_dir)):
            return
        uri = request.code_uri(self, spec.TrainingJobName, spec.OutputDataConfig.S3OutputPath)
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
        return request.join_uri(self._output_path(), job.name, "output", contract.MODEL_TARBALL)

    @property
    def training_job_analytics(self) -> Any:
        """The latest job's metrics: a :class:`~estimator.analytics.TrainingJobAnalytics`
        (``.dataframe()``, ``.plot()``), from any backend, as the SDK's property of this name."""
        from estimator.analytics import TrainingJobAnalytics

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

        ``training_job_name`` may say where the job is (:mod:`estimator.jobref`: ``local:NAME``,
        ``slurm:SHARED_DIR:NAME``, ``sagemaker:NAME``). Without ``sagemaker_session``, a bare name
        is the local job store's when it has that job, else SageMaker's, as for ``smlaunch``.

        A Failed job raises :class:`~estimator.errors.UnexpectedStatusException` (a ``ValueError``)
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
            from estimator.local_session import LocalSession

            raise jobref.not_found_anywhere(
                "training_job_name",
                training_job_name,
                LocalSession().root,
                exc,
                "check the name (smlaunch list), or pass sagemaker_session= for the place the job is in",
            ) from None
        kwargs = cls._init_params_from_description(description)
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

    @classmethod
    def _init_params_from_description(cls, desc: Mapping[str, Any]) -> dict[str, Any]:
        algorithm = desc.get("AlgorithmSpecification") or {}
        resources = desc.get("ResourceConfig") or {}
        stopping = desc.get("StoppingCondition") or {}
        output = desc.get("OutputDataConfig") or {}
        kwargs: dict[str, Any] = {
            "role": desc.get("RoleArn"),
            "instance_count": resources.get("InstanceCount"),
            "instance_type": resources.get("InstanceType"),
            "volume_size": resources.get("VolumeSizeInGB", 30),
            "volume_kms_key": resources.get("VolumeKmsKeyId"),
            "keep_alive_period_in_seconds": resources.get("KeepAlivePeriodInSeconds"),
            "max_run": stopping.get("MaxRuntimeInSeconds", 24 * 60 * 60),
            "max_wait": stopping.get("MaxWaitTimeInSeconds"),
            "input_mode": algorithm.get("TrainingInputMode", "File"),
            "output_path": output.get("S3OutputPath"),
            "output_kms_key": output.get("KmsKeyId"),
            "disable_output_compression": output.get("CompressionType") == "NONE",
            "base_job_name": naming.base_from_name(desc["TrainingJobName"]),
            "use_spot_instances": bool(desc.get("EnableManagedSpotTraining")),
            "enable_network_isolation": bool(desc.get("EnableNetworkIsolation")),
            "encrypt_inter_container_traffic": bool(desc.get("EnableInterContainerTrafficEncryption")),
            "environment": desc.get("Environment") or None,
            "metric_definitions": [
                {"Name": m["Name"], "Regex": m["Regex"]} for m in algorithm.get("MetricDefinitions") or []
            ]
            or None,
            "enable_sagemaker_metrics": algorithm.get("EnableSageMakerMetricsTimeSeries"),
            "image_uri": algorithm.get("TrainingImage"),
        }
        if desc.get("Tags"):
            kwargs["tags"] = [{"Key": t["Key"], "Value": t["Value"]} for t in desc["Tags"]]
        if desc.get("VpcConfig"):
            kwargs["subnets"] = desc["VpcConfig"].get("Subnets")
            kwargs["security_group_ids"] = desc["VpcConfig"].get("SecurityGroupIds")
        if desc.get("RetryStrategy"):
            kwargs["max_retry_attempts"] = desc["RetryStrategy"].get("MaximumRetryAttempts")
        if desc.get("CheckpointConfig"):
            kwargs["checkpoint_s3_uri"] = desc["CheckpointConfig"].get("S3Uri")
            kwargs["checkpoint_local_path"] = desc["CheckpointConfig"].get("LocalPath")
        if desc.get("TensorBoardOutputConfig"):
            tensorboard = desc["TensorBoardOutputConfig"]
            kwargs["tensorboard_output_config"] = TensorBoardOutputConfig(
                tensorboard["S3OutputPath"], tensorboard.get("LocalPath")
            )

        decoded = hp.decode(desc.get("HyperParameters") or {})
        if contract.HP_PROGRAM in decoded:
            kwargs["entry_point"] = decoded[contract.HP_PROGRAM]
            kwargs["source_dir"] = decoded.get(contract.HP_SUBMIT_DIRECTORY)
        if contract.HP_LOG_LEVEL in decoded:
            kwargs["container_log_level"] = int(decoded[contract.HP_LOG_LEVEL])
        kwargs["distribution"] = Distribution.from_hyperparameters(decoded).to_dict() or None
        script_keys = set(contract.SCRIPT_MODE_KEYS)
        # Every other sagemaker_* key is the platform's (or another SDK's), never the user's.
        kwargs["hyperparameters"] = {
            key: value
            for key, value in decoded.items()
            if key not in script_keys
            and key not in DISTRIBUTION_KEYS
            and not key.startswith(contract.FRAMEWORK_PARAM_PREFIX)
        }
        return kwargs


class Framework(Estimator):
    """SageMaker SDK v2's ``sagemaker.estimator.Framework``: script mode on a Deep Learning Container.

    ``framework_version`` and ``py_version`` pick the DLC image (see :mod:`estimator.image_uris`);
    ``image_uri`` overrides it (e.g. an smlaunch image from ``container/`` pushed to ECR).
    Subclasses name the framework, its display name and the version from which the SDK turns
    metrics time series on.
    """

    _display_name: ClassVar[str]
    _metrics_since: ClassVar[tuple[int, ...]]
    _version_example: ClassVar[str]

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
        self.framework_version = framework_version
        self.py_version = py_version
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

    def _hyperparameters_wire(self) -> dict[str, str]:
        """Every value ``json.dumps``-encoded, as the SDK's framework estimators send them."""
        return hp.encode(self._hyperparameters)

    def _image(self, region: str) -> str | None:
        if self.image_uri is not None:
            return self.image_uri
        version, py, framework = str(self.framework_version), str(self.py_version), str(self._framework)
        if self.is_local and not image_uris.has_region(version, py, region, framework):
            # No registry for this region (LocalSession's is "local"): name the image without one,
            # so the request still says which framework build it is (attach reads it back).
            row = image_uris.version_config(version, py, framework)
            return f"{row['repository']}:{version}-{self.instance.processor}-{py}"
        return image_uris.retrieve(
            version,
            py,
            self.instance,
            region,
            smdistributed=self._distribution.smdistributed is not None,
            framework=framework,
        )

    def _base_name(self) -> str:
        if self.base_job_name:
            return self.base_job_name
        if self.image_uri:
            return naming.base_name_from_image(self.image_uri)
        row = image_uris.version_config(
            str(self.framework_version), str(self.py_version), str(self._framework)
        )
        return str(row["repository"])

    @classmethod
    def _init_params_from_description(cls, desc: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = super()._init_params_from_description(desc)
        image = kwargs.get("image_uri") or ""
        match = image_uris.DLC_TAG.match(image)
        if match and match.group("repository") == f"{cls._framework}-training":
            kwargs["framework_version"] = match.group("version")
            kwargs["py_version"] = match.group("py")
            kwargs["image_uri"] = None
        return kwargs
