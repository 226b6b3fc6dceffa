"""Multi-estimator tuning jobs: SDK v2's ``HyperparameterTuner.create(estimator_dict=...)``, whose
CreateHyperParameterTuningJob carries one ``TrainingJobDefinitions`` entry per estimator.

:func:`check_create` checks ``create()``'s dictionaries as the SDK does (the same estimator names
in ``objective_metric_name_dict`` and ``hyperparameter_ranges_dict``, a subset of them in
``metric_definitions_dict``) and each estimator's own tuner arguments; :func:`plan` builds the
request as the SDK's ``_TuningJob._get_tuner_args`` does: in estimator-name order, each
definition the single-estimator ``TrainingJobDefinition`` plus ``DefinitionName``,
``TuningObjective`` and ``HyperParameterRanges``, and the tuning job's config without an
objective or ranges of its own. The job's name, tags and session are the first estimator's (in
name order), as the SDK takes them.

One deliberate difference: given a ``job_name``, the SDK stages every estimator's code at the
same ``<job_name>/source/sourcedir.tar.gz``, so the last upload wins and every definition runs
that code; here a definition whose code would land where an earlier one's did is staged at
``<job_name>/<DefinitionName>/source/sourcedir.tar.gz`` instead.

``fit(estimator_kwargs=...)`` is checked as the SDK checks it (:func:`check_estimator_kwargs`).
These tuning jobs run on SageMaker only: a local tuning job runs one estimator's trials.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.estimator import Estimator
from smlaunch.sdk.request import build as training_request
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request import naming, validation
from smlaunch.sdk.request.spec import TrainingJobSpec
from smlaunch.sdk.tuning import request
from smlaunch.sdk.tuning.parameters import parameter_ranges


@dataclass(frozen=True)
class Definition:
    """One estimator of a multi-estimator tuner: its name (``DefinitionName``), the estimator and
    its own checked tuner arguments (objective metric, ranges, metric definitions)."""

    name: str
    estimator: Estimator
    args: request.TunerArgs


@dataclass(frozen=True)
class Planned:
    """One definition as planned: its trials' CreateTrainingJob spec (the code to stage) and the
    local inputs to upload."""

    definition: Definition
    spec: TrainingJobSpec
    uploads: list[tuple[str, str]]


def _dict_argument(name: str, value: Any, names: list[str], same_keys: bool) -> dict[str, Any]:
    if value is None and not same_keys:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            name, value, f"must be a dict keyed by the estimator names {names}", f"pass {{{names[0]!r}: ...}}"
        )
    keys = sorted(value)
    if same_keys and keys != names:
        raise ConfigurationError(
            name, keys, f"must have the same keys as estimator_dict: {names}", "give one entry per estimator"
        )
    if not set(keys) <= set(names):
        raise ConfigurationError(
            name, keys, f"must use keys of estimator_dict: {names}", "drop the names no estimator has"
        )
    return dict(value)


def check_create(
    estimator_dict: Any,
    objective_metric_name_dict: Any,
    hyperparameter_ranges_dict: Any,
    metric_definitions_dict: Any,
    check: Callable[[Any, Any, Any, Any], request.TunerArgs],
) -> dict[str, Definition]:
    """The definitions of ``create()``'s dictionaries, in estimator-name order; ``check(estimator,
    objective_metric_name, hyperparameter_ranges, metric_definitions)`` checks one estimator's
    arguments with the tuner's shared ones, returning its ``TunerArgs``."""
    if not isinstance(estimator_dict, Mapping) or not estimator_dict:
        raise ConfigurationError(
            "estimator_dict",
            estimator_dict,
            "must name one or more estimators",
            "pass {'xgboost': xgb_estimator, 'torch': torch_estimator}",
        )
    for name in estimator_dict:
        require_type("estimator_dict key", name, str, "name each estimator, e.g. 'torch'")
    names = sorted(estimator_dict)
    objectives = _dict_argument("objective_metric_name_dict", objective_metric_name_dict, names, True)
    ranges = _dict_argument("hyperparameter_ranges_dict", hyperparameter_ranges_dict, names, True)
    metrics = _dict_argument("metric_definitions_dict", metric_definitions_dict, names, False)
    return {
        name: Definition(
            name,
            estimator_dict[name],
            check(estimator_dict[name], objectives[name], ranges[name], metrics.get(name)),
        )
        for name in names
    }


def check_estimator_kwargs(value: Any, names: list[str] | None) -> None:
    """``fit(estimator_kwargs=...)`` as the SDK checks it: a dict keyed by some of the estimator
    names of a tuner ``create()`` made (``names``; None: a tuner of one estimator), each value a
    dict. The SDK hands those arguments on only to an Amazon algorithm estimator fitted on
    ``RecordSet`` inputs, which smlaunch's estimators never are, so any argument in them would be
    ignored: it is refused instead (empty ones, as notebooks pass them, are fine)."""
    if value is None:
        return
    if names is None:
        if value == {}:
            return
        raise ConfigurationError(
            "estimator_kwargs",
            value,
            "applies to the estimators of a tuner made by HyperparameterTuner.create()",
            "drop estimator_kwargs (pass the estimator's arguments to the estimator itself)",
        )
    for name, kwargs in _dict_argument("estimator_kwargs", value, names, False).items():
        if not isinstance(kwargs, Mapping):
            field = f"estimator_kwargs[{name!r}]"
            raise ConfigurationError(field, kwargs, "must be a dict of arguments", "pass {} or leave it out")
        if kwargs:
            raise ConfigurationError(
                f"estimator_kwargs[{name!r}]",
                dict(kwargs),
                "the SageMaker SDK passes these only to an Amazon algorithm estimator's RecordSet "
                "inputs, which smlaunch's estimators do not take: they would be ignored",
                "drop them (pass the estimator's arguments to the estimator itself)",
            )


def code_location(spec: TrainingJobSpec) -> str | None:
    """Where a definition's code is staged: its ``sagemaker_submit_directory``."""
    raw = spec.HyperParameters.get(contract.HP_SUBMIT_DIRECTORY)
    return str(hp.decode_value(raw)) if raw is not None else None


def _uploads_code(estimator: Estimator) -> bool:
    """Whether ``fit()`` uploads the estimator's code (a source_dir given as a URI is not uploaded)."""
    source_dir = estimator.source_dir
    return estimator.entry_point is not None and not (
        source_dir is not None and validation.is_uri(source_dir)
    )


def _staged_apart(spec: TrainingJobSpec, name: str) -> TrainingJobSpec:
    """``spec`` with its code at ``.../<DefinitionName>/source/sourcedir.tar.gz`` (see the module
    docstring)."""
    uri = code_location(spec)
    assert uri is not None
    head, _, tail = uri.rpartition("/source/")
    moved = f"{head}/{name}/source/{tail}"
    return spec.model_copy(
        update={"HyperParameters": {**spec.HyperParameters, contract.HP_SUBMIT_DIRECTORY: json.dumps(moved)}}
    )


def plan(
    definitions: Mapping[str, Definition],
    inputs: Any,
    job_name: str | None,
    include_cls_metadata: bool | Mapping[str, bool],
    now: datetime,
) -> tuple[dict[str, Any], list[Planned]]:
    """The CreateHyperParameterTuningJob request (as a dict) and what to stage for each
    definition; ``inputs`` and ``include_cls_metadata`` may be keyed by estimator name."""
    names = sorted(definitions)
    channels = _dict_argument("inputs", inputs, names, False)
    if not isinstance(include_cls_metadata, bool):
        flags = _dict_argument("include_cls_metadata", include_cls_metadata, names, False)
    else:
        flags = dict.fromkeys(names, include_cls_metadata)
    planned: list[Planned] = []
    staged: set[str] = set()
    for name in names:
        definition = definitions[name]
        spec, uploads = definition.estimator._plan(channels.get(name), job_name, now)
        code = code_location(spec)
        if code is not None and code in staged and _uploads_code(definition.estimator):
            spec = _staged_apart(spec, name)
        if code is not None:
            staged.add(code)
        planned.append(Planned(definition, spec, uploads))
    first = planned[0]
    if job_name is None:
        base = first.definition.args.base_tuning_job_name
        if base is None:
            image = first.spec.AlgorithmSpecification.TrainingImage
            base = (
                naming.base_name_from_image(image)
                if image
                else training_request.base_name(first.definition.estimator.args)
            )
        job_name = request.tuning_job_name(base, now)
    wire_definitions = []
    for item in planned:
        args, estimator_args = item.definition.args, item.definition.estimator.args
        wire = request.training_job_definition(
            args,
            estimator_args,
            item.spec,
            channels.get(item.definition.name),
            bool(flags.get(item.definition.name)),
        )
        wire["DefinitionName"] = item.definition.name
        wire["TuningObjective"] = {"Type": args.objective_type, "MetricName": args.objective_metric_name}
        wire["HyperParameterRanges"] = parameter_ranges(
            args.hyperparameter_ranges, json_categories=estimator_args.framework is not None
        )
        wire_definitions.append(wire)
    config = request.tuning_job_config(first.definition.args, first.definition.estimator.args)
    del config["HyperParameterTuningJobObjective"], config["ParameterRanges"]
    wire_request: dict[str, Any] = {
        "HyperParameterTuningJobName": request.validate_tuning_job_name(job_name),
        "HyperParameterTuningJobConfig": config,
        "TrainingJobDefinitions": wire_definitions,
    }
    args = first.definition.args
    if args.warm_start_config is not None:
        wire_request["WarmStartConfig"] = args.warm_start_config.to_input_req()
    tags = request.tags(args, first.definition.estimator.args)
    if tags is not None:
        wire_request["Tags"] = tags
    return wire_request, planned
