"""``HyperparameterTuner``: SDK v2's ``sagemaker.tuner.HyperparameterTuner``, run as a SageMaker
tuning job.

The constructor takes the SDK's arguments and checks them (each error names the argument, the value
and the fix); :meth:`~HyperparameterTuner.plan` returns the CreateHyperParameterTuningJob request
(:mod:`smlaunch.sdk.tuning.request`) and :meth:`~HyperparameterTuner.fit` stages the estimator's code
and inputs as its own ``fit()`` would, then sends that request through the session's boto3 SageMaker
client. ``describe``, ``wait``, ``stop_tuning_job``, ``best_training_job``, ``best_estimator`` and
``attach`` read DescribeHyperParameterTuningJob.

On a ``LocalSession``, a ``SlurmSession`` or a ``KubernetesSession`` the same request runs as a
tuning job kept in the session's job store (a ``KubernetesSession``'s ``tuning_root`` on this
machine), over real training jobs of the session (:mod:`smlaunch.sdk.tuning.local`, its agent
:mod:`smlaunch.sdk.tuning.agent`, the trials' platform :mod:`smlaunch.sdk.tuning.platform`), which
the same methods read from the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from smlaunch.sdk.backends.sagemaker.credentials import aws_errors
from smlaunch.sdk.errors import (
    ConfigurationError,
    JobNameTakenError,
    MissingExtraError,
    UnexpectedStatusException,
    UnsupportedByBackendError,
    require_type,
)
from smlaunch.sdk.estimator import Estimator
from smlaunch.sdk.request import build as training_request
from smlaunch.sdk.request import naming
from smlaunch.sdk.request.spec import JobRequest
from smlaunch.sdk.tuning import local, platform, pruning, records, request, search, warm
from smlaunch.sdk.tuning.analytics import HyperparameterTuningJobAnalytics
from smlaunch.sdk.tuning.arguments import check_arguments
from smlaunch.sdk.tuning.configs import StrategyConfig, TuningJobCompletionCriteriaConfig, WarmStartConfig
from smlaunch.sdk.tuning.parameters import (
    ParameterRange,
    parameter_ranges,
)
from smlaunch.sdk.tuning.tracking import track_tuning_job

logger = logging.getLogger(__name__)

IN_PROGRESS = ("InProgress", "Stopping")
STATUS_CODES = {"Completed": "!", "InProgress": ".", "Failed": "*", "Stopped": "s", "Stopping": "_"}
"""What ``wait()`` prints per poll, as the SDK's ``_tuning_job_status``."""


class HyperparameterTuner:
    """SageMaker Automatic Model Tuning over an smlaunch estimator: SDK v2's
    ``sagemaker.tuner.HyperparameterTuner``, for a SageMaker ``Session``.

    ``tuner.args`` holds the checked arguments (:class:`~smlaunch.sdk.tuning.request.TunerArgs`);
    the SDK's attribute names read it (``tuner.strategy``, ``tuner.max_jobs``...).
    """

    TUNING_JOB_NAME_MAX_LENGTH = request.MAX_TUNING_JOB_NAME_CHARS

    def __init__(
        self,
        estimator: Estimator,
        objective_metric_name: str,
        hyperparameter_ranges: Mapping[str, ParameterRange],
        metric_definitions: list[dict[str, str]] | None = None,
        strategy: str = "Bayesian",
        objective_type: str = "Maximize",
        max_jobs: int | None = None,
        max_parallel_jobs: int = 1,
        max_runtime_in_seconds: int | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        base_tuning_job_name: str | None = None,
        warm_start_config: WarmStartConfig | None = None,
        strategy_config: StrategyConfig | None = None,
        completion_criteria_config: TuningJobCompletionCriteriaConfig | None = None,
        early_stopping_type: str = "Off",
        random_seed: int | None = None,
    ) -> None:
        self.estimator = estimator
        self.args = check_arguments(
            estimator,
            objective_metric_name,
            hyperparameter_ranges,
            metric_definitions,
            strategy,
            objective_type,
            max_jobs,
            max_parallel_jobs,
            max_runtime_in_seconds,
            tags,
            base_tuning_job_name,
            early_stopping_type,
            random_seed,
            warm_start_config,
            strategy_config,
            completion_criteria_config,
        )
        self.definitions: dict[str, Any] | None = None
        """A multi-estimator tuner's estimators (:meth:`create`): name -> ``multi.Definition``."""
        self.latest_tuning_job: str | None = None
        """The name of the tuning job ``fit()`` started (or ``attach`` found)."""

    # --- the SDK's attributes ------------------------------------------------------------------

    @property
    def objective_metric_name(self) -> str:
        """The metric the tuning job optimises."""
        return self.args.objective_metric_name

    @property
    def strategy(self) -> str:
        """``Bayesian``, ``Random``, ``Hyperband`` or ``Grid``."""
        return self.args.strategy

    @property
    def objective_type(self) -> str:
        """``Maximize`` or ``Minimize``."""
        return self.args.objective_type

    @property
    def max_jobs(self) -> int | None:
        """Training jobs at most (None: Grid's every combination)."""
        return self.args.max_jobs

    @property
    def max_parallel_jobs(self) -> int:
        """Training jobs at once at most."""
        return self.args.max_parallel_jobs

    @property
    def metric_definitions(self) -> list[dict[str, str]] | None:
        """The metrics read from the trials' logs."""
        return self.args.metric_definitions

    @property
    def early_stopping_type(self) -> str:
        """``Off`` or ``Auto``."""
        return self.args.early_stopping_type

    @classmethod
    def create(
        cls,
        estimator_dict: Mapping[str, Estimator],
        objective_metric_name_dict: Mapping[str, str],
        hyperparameter_ranges_dict: Mapping[str, Mapping[str, ParameterRange]],
        metric_definitions_dict: Mapping[str, list[dict[str, str]]] | None = None,
        **kwargs: Any,
    ) -> HyperparameterTuner:
        """SDK v2's multi-estimator tuner: one training job definition per estimator, each with its
        own objective metric, ranges and metric definitions (dicts keyed by estimator name);
        ``kwargs`` are the constructor's other arguments (``strategy``, ``max_jobs``...), shared.
        It runs on SageMaker (:mod:`smlaunch.sdk.tuning.multi`); ``estimator`` is the first
        estimator in name order, whose session, name and tags the tuning job takes."""
        from smlaunch.sdk.tuning import multi

        definitions = multi.check_create(
            estimator_dict,
            objective_metric_name_dict,
            hyperparameter_ranges_dict,
            metric_definitions_dict,
            lambda estimator, objective, ranges, metrics: (
                cls(estimator, objective, ranges, metrics, **kwargs).args
            ),
        )
        first = next(iter(definitions.values()))
        args = first.args
        tuner = cls(
            first.estimator,
            args.objective_metric_name,
            args.hyperparameter_ranges,
            args.metric_definitions,
            **kwargs,
        )
        tuner.definitions = definitions
        return tuner

    @property
    def estimator_dict(self) -> dict[str, Estimator] | None:
        """A multi-estimator tuner's estimators by name (None for a tuner of one estimator)."""
        return {n: d.estimator for n, d in self.definitions.items()} if self.definitions else None

    @property
    def sagemaker_session(self) -> Any:
        """The estimator's session, which the tuning job is sent through."""
        return self.estimator.sagemaker_session

    def hyperparameter_ranges(self) -> dict[str, Any]:
        """The request's ``ParameterRanges`` (a method, as the SDK's)."""
        json_categories = self.estimator.args.framework is not None
        return parameter_ranges(self.args.hyperparameter_ranges, json_categories=json_categories)

    # --- plan and fit --------------------------------------------------------------------------

    def _runs_here(self) -> bool:
        """Whether the tuning job runs in a job store (a ``LocalSession``'s, ``SlurmSession``'s or
        ``KubernetesSession``'s), not SageMaker; another local-semantics session refuses."""
        session = self.sagemaker_session
        if local.in_local_store(session):
            return True
        if session.is_local:
            raise UnsupportedByBackendError(*platform.refusal(session))
        return False

    def _plan(
        self,
        inputs: Any,
        job_name: str | None,
        include_cls_metadata: bool | Mapping[str, bool],
        now: datetime,
    ) -> tuple[request.TuningJobRequest, Any, list[tuple[str, str]]]:
        """The request, the trials' CreateTrainingJob spec (its code and inputs to stage) and the
        local inputs to upload."""
        if self._runs_here() and self.definitions is not None:
            raise UnsupportedByBackendError(
                "estimator_dict",
                sorted(self.definitions),
                "a local tuning job runs the trials of one estimator",
                "tune each estimator with its own HyperparameterTuner(...), or run on SageMaker",
            )
        if self.definitions is not None:
            from smlaunch.sdk.tuning import multi

            if job_name is not None:
                request.validate_tuning_job_name(job_name)
            wire, planned = multi.plan(self.definitions, inputs, job_name, include_cls_metadata, now)
            return request.TuningJobRequest(**wire), planned, []
        require_type("include_cls_metadata", include_cls_metadata, bool, "pass True or False")
        if job_name is not None:
            request.validate_tuning_job_name(job_name)
        # As the SDK: the trials' code is staged under the tuning job's name when one is given, else
        # under a name the estimator generates.
        spec, uploads = self.estimator._plan(inputs, job_name, now)
        if job_name is None:
            base = self.args.base_tuning_job_name
            if base is None:
                image = spec.AlgorithmSpecification.TrainingImage
                estimator_base = training_request.base_name(self.estimator.args)
                base = naming.base_name_from_image(image) if image else estimator_base
            job_name = request.tuning_job_name(base, now)
        session = self.sagemaker_session
        # A cluster's code is in S3 or on its claim, never in the store: its root is not read here.
        if self._runs_here() and platform.record_kind(session) != platform.KUBERNETES:
            spec = local.code_in_tuning_dir(spec, platform.store_root(session), job_name)
        tuning = request.build(
            self.args, self.estimator.args, spec, inputs, job_name, include_cls_metadata is True
        )
        return tuning, spec, uploads

    def plan(
        self,
        inputs: Any = None,
        job_name: str | None = None,
        include_cls_metadata: bool | Mapping[str, bool] = False,
    ) -> request.TuningJobRequest:
        """The CreateHyperParameterTuningJob request ``fit(inputs, job_name=...)`` would send;
        stages and sends nothing (``print(tuner.plan())`` shows it as JSON)."""
        return self._plan(inputs, job_name, include_cls_metadata, datetime.now(timezone.utc))[0]

    def fit(
        self,
        inputs: Any = None,
        job_name: str | None = None,
        include_cls_metadata: bool | Mapping[str, bool] = False,
        estimator_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        wait: bool = True,
    ) -> None:
        """Stage the estimator's code and local inputs, then start the tuning job (on SageMaker, or
        in a ``LocalSession``'s, ``SlurmSession``'s or ``KubernetesSession``'s job store); with
        ``wait``, block until it ends (:meth:`wait`). ``estimator_kwargs``: the SDK's, keyed by
        :meth:`create`'s estimator names; smlaunch's estimators take no training arguments there, so
        only empty ones are accepted (:func:`smlaunch.sdk.tuning.multi.check_estimator_kwargs`)."""
        from smlaunch.sdk.tuning import multi

        require_type("wait", wait, bool, "pass wait=True or wait=False")
        multi.check_estimator_kwargs(estimator_kwargs, sorted(self.definitions) if self.definitions else None)
        tuning, spec, uploads = self._plan(inputs, job_name, include_cls_metadata, datetime.now(timezone.utc))
        session = self.sagemaker_session
        if self._runs_here():
            self._refuse_locally(tuning)
            trials = JobRequest(spec, self.estimator.args.distribution.strategy)
            platform.check_trials(session, trials)
            with local.claimed(platform.store_root(session), tuning.HyperParameterTuningJobName) as job:
                self.estimator._stage_code(spec, local.code_uri(spec))
                strategy = self.estimator.args.distribution.strategy.value
                local.start(job, tuning.to_request(), spec, strategy, platform.record(session))
        else:
            for estimator, staged, local_inputs, code in self._to_stage(spec, uploads):
                estimator._stage_code(staged, code)
                for channel, path in local_inputs:
                    session.stage_local_input(path, staged.TrainingJobName, channel)
            self._create_on_sagemaker(tuning)
        self.latest_tuning_job = tuning.HyperParameterTuningJobName
        if wait:
            self.wait()

    def _to_stage(self, planned: Any, uploads: list[tuple[str, str]]) -> list[tuple[Any, Any, Any, Any]]:
        """``(estimator, spec, local inputs, code URI)`` of each estimator whose code and inputs
        ``fit()`` stages on SageMaker (one for a tuner of one estimator)."""
        if self.definitions is None:
            return [(self.estimator, planned, uploads, None)]
        from smlaunch.sdk.tuning import multi

        return [(p.definition.estimator, p.spec, p.uploads, multi.code_location(p.spec)) for p in planned]

    def _refuse_locally(self, tuning: request.TuningJobRequest) -> None:
        """What a local tuning job cannot run, refused before anything is staged or started."""
        wire = tuning.to_request()
        refusal = search.local_refusal(wire["HyperParameterTuningJobConfig"])
        if refusal is not None:
            raise UnsupportedByBackendError(*refusal)
        local.refuse_without_metrics(wire)
        if self.args.strategy == "Hyperband":
            pruning.hyperband_resources(wire)
        warm.check_parents(platform.store_root(self.sagemaker_session), wire)
        try:
            import optuna  # noqa: F401  (the agent's search library: refused here, not in the agent)
        except ImportError:
            raise MissingExtraError("local tuning jobs", "optuna", "tuning") from None

    def _create_on_sagemaker(self, tuning: request.TuningJobRequest) -> None:
        session = self.sagemaker_session
        name = tuning.HyperParameterTuningJobName
        logger.info("Creating hyperparameter tuning job with name: %s", name)
        try:
            with aws_errors(f"create the tuning job {name}"):
                session.sagemaker_client().create_hyper_parameter_tuning_job(**tuning.to_request())
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceInUse":
                raise JobNameTakenError(
                    "job_name",
                    name,
                    "a tuning job with this name already exists",
                    "pass another job_name, or leave it unset for a timestamped one",
                ) from None
            raise

    # --- the tuning job ------------------------------------------------------------------------

    def _job_name(self) -> str:
        if self.latest_tuning_job is None:
            raise ConfigurationError(
                "latest_tuning_job",
                None,
                "no tuning job yet",
                "call fit() first, or HyperparameterTuner.attach(tuning_job_name)",
            )
        return self.latest_tuning_job

    def describe(self) -> dict[str, Any]:
        """The DescribeHyperParameterTuningJob answer of the latest tuning job."""
        return records.describe(self.sagemaker_session, self._job_name())

    def wait(self, poll: float = 5.0, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
        """Block until the latest tuning job ends, printing one status mark per poll as the SDK
        does; return its description. With MLflow tracking on, the tuning job becomes a parent run
        and each trial a child run (:mod:`smlaunch.sdk.tuning.tracking`). A Failed job raises
        :class:`~smlaunch.sdk.errors.UnexpectedStatusException`."""
        while True:
            description = self.describe()
            status = description["HyperParameterTuningJobStatus"]
            print(STATUS_CODES.get(status, "?"), end="", flush=True)
            if status not in IN_PROGRESS:
                break
            sleep(poll)
        print()  # ends the line of status marks
        track_tuning_job(self.sagemaker_session, description)
        if status == "Failed":
            raise UnexpectedStatusException(
                f"Error for HyperParameterTuning job {self.latest_tuning_job}: {status}. "
                f"Reason: {description.get('FailureReason', '(none given)')}.",
                allowed_statuses=["Completed", "Stopped"],
                actual_status=status,
            )
        return description

    def stop_tuning_job(self) -> None:
        """Stop the latest tuning job (and its running trials); one that already ended is left as is."""
        self._runs_here()
        records.stop(self.sagemaker_session, self._job_name())

    def analytics(self) -> HyperparameterTuningJobAnalytics:
        """The latest tuning job's trials: ``analytics().dataframe()`` in the SDK's columns,
        ``analytics().plot()`` the objective over the trials and the best so far."""
        return HyperparameterTuningJobAnalytics(self._job_name(), sagemaker_session=self.sagemaker_session)

    def best_training_job(self) -> str:
        """The name of the best training job so far of the latest tuning job."""
        best = self.describe().get("BestTrainingJob")
        if not best:
            raise ConfigurationError(
                "latest_tuning_job",
                self.latest_tuning_job,
                "has no best training job yet (no trial has completed with an objective value)",
                "wait() for the tuning job, or ask again once a trial has completed",
            )
        return str(best["TrainingJobName"])

    def best_estimator(self) -> Estimator:
        """The estimator of the best training job, attached to it (``Estimator.attach``)."""
        estimator = self.estimator
        if self.definitions is not None:  # the estimator of the best job's definition, as the SDK's
            best = self.describe()["BestTrainingJob"]
            estimator = self.definitions[best["TrainingJobDefinitionName"]].estimator
        return type(estimator).attach(self.best_training_job(), sagemaker_session=self.sagemaker_session)

    @classmethod
    def attach(cls, tuning_job_name: str, sagemaker_session: Any | None = None) -> HyperparameterTuner:
        """The tuner of an existing tuning job (a store-kept one with a ``LocalSession`` or
        ``SlurmSession``), rebuilt from DescribeHyperParameterTuningJob (its estimator from the
        ``TrainingJobDefinition``; a tuning job of several ``TrainingJobDefinitions`` as
        :meth:`create` made it, one estimator per definition), with ``latest_tuning_job`` set."""
        from smlaunch.sdk.tuning import attach

        if sagemaker_session is None:
            from smlaunch.sdk.sessions.sagemaker import Session

            sagemaker_session = Session()
        description = records.describe(sagemaker_session, tuning_job_name)
        if description.get("TrainingJobDefinitions"):  # create()'s tuning job: rebuilt by create()
            estimators, create_kwargs = attach.create_arguments(description)
            estimator_dict = {
                name: estimator_cls(sagemaker_session=sagemaker_session, **kwargs)
                for name, (estimator_cls, kwargs) in estimators.items()
            }
            tuner = cls.create(estimator_dict, **create_kwargs)
        else:
            estimator_cls, estimator_kwargs, tuner_kwargs = attach.arguments(description)
            estimator = estimator_cls(sagemaker_session=sagemaker_session, **estimator_kwargs)
            tuner = cls(estimator, **tuner_kwargs)
        tuner.latest_tuning_job = tuning_job_name
        return tuner
