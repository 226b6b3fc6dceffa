"""``ModelTrainer``: SageMaker Python SDK v3's training API (``sagemaker.train.ModelTrainer``), on
every platform smlaunch has.

A v3 cell runs unchanged but for its imports (``from smlaunch.train import ModelTrainer``,
``from smlaunch.train.configs import ...``, ``from smlaunch.train.distributed import Torchrun``).
``train()`` reads as the estimator's ``fit()``: the arguments are checked at construction
(:mod:`.validation`), :meth:`ModelTrainer.plan` builds the request v3 sends (:mod:`.request`,
pure), the backend checks it, the code, the drivers channel (:mod:`.drivers`) and local inputs are
staged, and the job is submitted and, with ``wait``, followed to its end.

The SDK's ``config.yaml`` fills what v3's "intelligent defaults" fill (:mod:`.sdk_defaults`).

The session picks the platform as for the estimators: ``sagemaker_session=`` wins; without one,
``Mode.LOCAL_CONTAINER`` (or a ``local`` instance type) runs on this machine (``LocalSession()``)
and ``Mode.SAGEMAKER_TRAINING_JOB`` on SageMaker (``Session()``). The host gets v3's container
contract (:mod:`smlaunch.contract.v3`, :mod:`smlaunch.runtime.v3`), not the toolkit's.

Not supported (refused by name): ``algorithm_name``, ``training_image_config``,
``Compute.instance_groups`` and ``training_plan_arn``, ``.tar.gz`` sources, recipes, JumpStart,
pipeline variables. ``MPI`` on SageMaker runs in images with smlaunch's runtime (its drivers hand
the job to ``smlaunch-train``, which brings ``mpirun``'s sshd), and warns so.
"""

from __future__ import annotations

import enum
import logging
import tempfile
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smlaunch import contract
from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError, require_type
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.request import catalog
from smlaunch.sdk.request import validation as estimator_validation
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.train import configs, drivers, request, sdk_defaults, validation
from smlaunch.sdk.train.distributed import MPI, DistributedConfig

if TYPE_CHECKING:
    from smlaunch.sdk.sessions.protocol import TrainingSession

logger = logging.getLogger(__name__)

DEFAULT_INSTANCE_TYPE = "ml.m5.xlarge"
MAX_JOB_NAME_ATTEMPTS = 100
LOCAL_JOBS_DIR = "smlaunch-jobs"
"""Below ``local_container_root``: the job store of a local ModelTrainer without a session."""


class Mode(enum.Enum):
    """Where ``train()`` runs the job (v3's ``Mode``)."""

    LOCAL_CONTAINER = "LOCAL_CONTAINER"
    SAGEMAKER_TRAINING_JOB = "SAGEMAKER_TRAINING_JOB"


def _session(mode: Mode, instance_type: str, local_container_root: str | None) -> TrainingSession:
    local = mode is Mode.LOCAL_CONTAINER or instance_type in (
        contract.LOCAL_INSTANCE_TYPE,
        contract.LOCAL_GPU_INSTANCE_TYPE,
    )
    if local:
        from smlaunch.sdk.sessions.local import LocalSession

        # v3 keeps a local job's files under local_container_root; smlaunch's job store holds
        # nothing but jobs, so it is a folder of its own there.
        root = None if local_container_root is None else Path(local_container_root) / LOCAL_JOBS_DIR
        return LocalSession(root=root)
    from smlaunch.sdk.sessions.sagemaker import Session

    return Session()


class ModelTrainer:
    """SDK v3's ``ModelTrainer``: its keyword arguments, defaults and ``train()``.

    Defaults as v3's: ``compute`` one ``ml.m5.xlarge`` with 30 GB, ``stopping_condition`` one hour,
    ``base_job_name`` ``<image repository>-job``, ``output_data_config``
    ``<default output path><base_job_name>`` (``GZIP``), ``training_input_mode`` ``File``.
    """

    def __init__(
        self,
        *,
        training_mode: Mode = Mode.SAGEMAKER_TRAINING_JOB,
        sagemaker_session: TrainingSession | None = None,
        role: str | None = None,
        base_job_name: str | None = None,
        source_code: configs.SourceCode | None = None,
        distributed: DistributedConfig | None = None,
        compute: configs.Compute | None = None,
        networking: configs.Networking | None = None,
        stopping_condition: configs.StoppingCondition | None = None,
        training_image: str | None = None,
        training_image_config: Any = None,
        algorithm_name: str | None = None,
        output_data_config: configs.OutputDataConfig | None = None,
        input_data_config: list[configs.InputData | configs.Channel] | None = None,
        checkpoint_config: configs.CheckpointConfig | None = None,
        training_input_mode: str = "File",
        environment: Mapping[str, str] | None = None,
        hyperparameters: Mapping[str, Any] | str | None = None,
        tags: list[configs.Tag] | None = None,
        input_s3_key_prefix: str | None = None,
        local_container_root: str | None = None,
    ) -> None:
        if not isinstance(training_mode, Mode):
            raise ConfigurationError(
                "training_mode",
                training_mode,
                "must be a Mode",
                "pass Mode.SAGEMAKER_TRAINING_JOB or Mode.LOCAL_CONTAINER",
            )
        for name, value in (
            ("algorithm_name", algorithm_name),
            ("training_image_config", training_image_config),
        ):
            if value is not None:
                raise ConfigurationError(
                    name, value, "is not supported by smlaunch", "pass training_image=... (an image URI)"
                )
        if not training_image:
            raise ConfigurationError(
                "training_image",
                training_image,
                "ModelTrainer runs a training image",
                "pass training_image=<image URI>",
            )
        require_type("training_image", training_image, str, "pass the image URI as a string")
        require_type("training_input_mode", training_input_mode, str, "pass 'File', 'FastFile' or 'Pipe'")
        if training_input_mode not in ("File", "FastFile", "Pipe"):
            raise ConfigurationError(
                "training_input_mode",
                training_input_mode,
                "unknown input mode",
                "pass 'File', 'FastFile' or 'Pipe'",
            )
        compute = validation.config("compute", compute, configs.Compute) or configs.Compute()
        for name in ("instance_groups", "training_plan_arn"):
            if getattr(compute, name) is not None:
                raise ConfigurationError(
                    f"compute.{name}", getattr(compute, name), "is not supported by smlaunch", f"drop {name}"
                )
        instance = catalog.lookup(compute.instance_type or DEFAULT_INSTANCE_TYPE, "compute.instance_type")
        count = estimator_validation.check_instance_count(
            1 if compute.instance_count is None else compute.instance_count
        )
        require_type("local_container_root", local_container_root, (str, type(None)), "pass a directory path")
        session = (
            sagemaker_session
            if sagemaker_session is not None
            else _session(training_mode, instance.name, local_container_root)
        )
        count = estimator_validation.check_instance_quota(count, instance.name, session.instance_count_quota)
        defaults = sdk_defaults.resolve(
            session.sagemaker_config,
            session.is_local,
            source_code=source_code,
            networking=networking,
            checkpoint_config=checkpoint_config,
            input_s3_key_prefix=input_s3_key_prefix,
            environment=environment,
            role=role,
        )
        role, environment = defaults["role"], defaults["environment"]
        source_code, networking = defaults["source_code"], defaults["networking"]
        checkpoint_config, input_s3_key_prefix = (
            defaults["checkpoint_config"],
            defaults["input_s3_key_prefix"],
        )
        if instance.is_local and not session.is_local:
            raise ConfigurationError(
                "compute.instance_type",
                instance.name,
                "local types run only with a LocalSession",
                "pass an ml. type",
            )
        if session.is_local:
            catalog.require_topology(instance, session.processes_per_host, "compute.instance_type")
        elif not role:
            raise ConfigurationError(
                "role",
                role,
                "SageMaker training jobs need an IAM execution role",
                "pass role='arn:aws:iam::<account>:role/<name>'",
            )
        self.sagemaker_session: TrainingSession = session
        self.training_mode = training_mode
        self.role = role
        self.training_image = training_image
        self.training_input_mode = training_input_mode
        self.compute = compute.model_copy(update={"instance_type": instance.name, "instance_count": count})
        self.source_code = validation.config("source_code", source_code, configs.SourceCode)
        validation.source_code(self.source_code, session.is_local)
        self.distributed = validation.distributed(distributed, self.source_code)
        if isinstance(self.distributed, MPI) and not session.is_local:
            logger.warning(
                "distributed=MPI(...) on SageMaker: smlaunch's drivers hand an MPI job to smlaunch's runtime "
                "(smlaunch-train, in the images of container/), which brings mpirun's sshd; "
                "in another image the job fails at its start"
            )
        self.networking = validation.config("networking", networking, configs.Networking)
        stopping = validation.config("stopping_condition", stopping_condition, configs.StoppingCondition)
        self.stopping_condition = stopping or configs.StoppingCondition(max_runtime_in_seconds=3600)
        self.output_data_config = validation.config(
            "output_data_config", output_data_config, configs.OutputDataConfig
        )
        self.checkpoint_config = validation.config(
            "checkpoint_config", checkpoint_config, configs.CheckpointConfig
        )
        self.input_data_config = validation.inputs(input_data_config, self.source_code)
        self.environment = validation.environment(environment)
        self.hyperparameters = validation.hyperparameters(hyperparameters)
        self.tags = [validation.config("tags", t, configs.Tag) for t in tags or []] or None
        if base_job_name is None:
            # v3's _get_repo_name_from_image: the last path segment, less its tag or digest.
            base_job_name = f"{training_image.split('/')[-1].split(':')[0].split('@')[0]}-job"
        require_type("base_job_name", base_job_name, str, "pass e.g. base_job_name='my-training'")
        self.base_job_name = base_job_name
        require_type("input_s3_key_prefix", input_s3_key_prefix, (str, type(None)), "pass e.g. 'my-pipeline'")
        self.input_s3_key_prefix = input_s3_key_prefix
        self._tensorboard_output_config: configs.TensorBoardOutputConfig | None = None
        self._retry_strategy: configs.RetryStrategy | None = None
        self._metric_definitions: list[configs.MetricDefinition] | None = None
        self._latest_training_job: TrainingJob | None = None

    # --- v3's builder methods -------------------------------------------------------------------

    def with_tensorboard_output_config(
        self, tensorboard_output_config: configs.TensorBoardOutputConfig | None = None
    ) -> ModelTrainer:
        """Sync TensorBoard event files (default ``s3_output_path``: ``<output>/<base_job_name>``)."""
        value = tensorboard_output_config or configs.TensorBoardOutputConfig()
        self._tensorboard_output_config = validation.config(
            "tensorboard_output_config", value, configs.TensorBoardOutputConfig
        )
        return self

    def with_retry_strategy(self, retry_strategy: configs.RetryStrategy) -> ModelTrainer:
        """Retry the job on SageMaker's internal errors (``RetryStrategy``)."""
        self._retry_strategy = validation.config("retry_strategy", retry_strategy, configs.RetryStrategy)
        return self

    def with_checkpoint_config(
        self, checkpoint_config: configs.CheckpointConfig | None = None
    ) -> ModelTrainer:
        """Sync checkpoints (default ``s3_uri``: ``<output>/<base_job_name>/<job>/checkpoints``)."""
        value = checkpoint_config or configs.CheckpointConfig()
        self.checkpoint_config = validation.config("checkpoint_config", value, configs.CheckpointConfig)
        return self

    def with_metric_definitions(self, metric_definitions: list[configs.MetricDefinition]) -> ModelTrainer:
        """Metrics scraped from the job's log (``MetricDefinitions``)."""
        self._metric_definitions = [
            m
            for m in (
                validation.config("metric_definitions", d, configs.MetricDefinition)
                for d in metric_definitions
            )
            if m
        ]
        return self

    # --- plan and train --------------------------------------------------------------------------

    @property
    def strategy(self) -> Strategy:
        """The launch strategy of the job (a ``command`` runs one process per host)."""
        if self.distributed is None or (self.source_code is not None and self.source_code.command):
            return Strategy.NONE
        return self.distributed.strategy

    def plan(
        self,
        input_data_config: list[configs.InputData | configs.Channel] | None = None,
        now: datetime | None = None,
    ) -> TrainingJobSpec:
        """The exact CreateTrainingJob request ``train()`` would send; stages and submits nothing."""
        checked = validation.inputs(input_data_config, self.source_code)
        return request.build(self, checked, now or datetime.now()).spec

    def train(
        self,
        input_data_config: list[configs.InputData | configs.Channel] | None = None,
        wait: bool = True,
        logs: bool = True,
        dry_run: bool = False,
    ) -> None:
        """Plan, check with the backend, stage code, drivers and local inputs, submit; wait when asked.

        ``dry_run``: check everything (the arguments, the request against the backend) and return,
        staging and submitting nothing (:meth:`plan` shows the request)."""
        require_type("wait", wait, bool, "pass wait=True or wait=False")
        require_type("logs", logs, bool, "pass logs=True or logs=False")
        require_type("dry_run", dry_run, bool, "pass dry_run=True or dry_run=False")
        checked = validation.inputs(input_data_config, self.source_code)
        backend = self.sagemaker_session.backend()
        if dry_run:
            plan = self._planned(checked, datetime.now(timezone.utc).astimezone())
            backend.check(JobRequest(plan.spec, self.strategy))
            logger.info("Dry run: %s checked, nothing submitted", plan.spec.TrainingJobName)
            return
        plan = self._claim(backend, checked)
        spec = plan.spec
        try:
            self._stage(plan)
            backend.submit(JobRequest(spec, self.strategy))
        except BaseException:
            backend.release(spec)
            raise
        print(f"Creating training-job with name: {spec.TrainingJobName}", flush=True)
        self._latest_training_job = TrainingJob(backend, spec.TrainingJobName)
        if wait:
            self._latest_training_job.wait(logs=logs)

    def _claim(self, backend: Any, inputs: list[configs.InputData | configs.Channel]) -> request.Plan:
        """Plan, check and reserve the job's name; a generated name another job holds is replaced
        by the next second's (v3's names have a resolution of one second)."""
        moment = datetime.now(timezone.utc).astimezone()
        for _ in range(MAX_JOB_NAME_ATTEMPTS):
            plan = self._planned(inputs, moment)
            job_request = JobRequest(plan.spec, self.strategy)
            try:
                backend.check(job_request)
                backend.reserve(plan.spec)
                return plan
            except JobNameTakenError:
                moment += timedelta(seconds=1)
        raise JobNameTakenError(
            "base_job_name",
            self.base_job_name,
            "every generated job name was taken",
            "pass another base_job_name",
        )

    def _planned(self, inputs: list[configs.InputData | configs.Channel], moment: datetime) -> request.Plan:
        """The plan, with a local job's shared drivers directory written (a ``file://`` channel
        must exist when the backend checks it)."""
        plan = request.build(self, inputs, moment)
        for upload in plan.uploads:
            if upload.local is not None and upload.files is not None:
                drivers.ensure_local_drivers(upload.local, upload.files)
        return plan

    def _stage(self, plan: request.Plan) -> None:
        """Upload what the job reads from its output bucket (a local job reads in place)."""
        with tempfile.TemporaryDirectory() as scratch:
            for upload in plan.uploads:
                if upload.local is not None:
                    continue  # written before the checks
                source = upload.source
                if source is None:
                    assert upload.files is not None
                    source = Path(scratch) / "sm_drivers"
                    drivers.write_drivers(source, upload.files)
                drivers.stage_tree(self.sagemaker_session, source, upload.uri, upload.ignore_patterns)

    # --- the job ---------------------------------------------------------------------------------

    @property
    def latest_training_job(self) -> TrainingJob | None:
        """The handle on the last job ``train()`` submitted (v3 keeps it as ``_latest_training_job``)."""
        return self._latest_training_job

    @property
    def model_data(self) -> str | None:
        """``model.tar.gz`` of the last job, once packaged."""
        return None if self._latest_training_job is None else self._latest_training_job.model_data
