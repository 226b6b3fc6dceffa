# ruff: noqa: F811  (sdk_capture and src are fixtures imported from test_plan_oracle)
"""Oracle: ``sagemaker_*`` hyperparameters and the generic ``Estimator``'s encoding, as SDK v2 sends them.

Each case runs the real SDK's ``fit(wait=False)`` under moto and our ``plan()`` with the same
arguments (the harness of ``test_plan_oracle.py``), and compares the CreateTrainingJob requests
field by field, hyperparameter order included:

- the generic ``Estimator`` sends ``str(value)`` (``json.dumps`` only with a ``source_dir``), so a
  value the notebook JSON-encoded itself is sent as it is, and decoded once by the host;
- the ``Estimator(image_uri=<framework image>, hyperparameters={"sagemaker_program": ...,
  "sagemaker_submit_directory": "s3://..."})`` pattern is sent as given;
- estimators that stage code replace the five script-mode keys with their own, in place;
- a dict the SDK already wrote its keys into (it does at ``fit()``) is taken again;
- launcher keys agreeing with ``distribution=`` are sent as the SDK sends them; contradicting ones
  are refused by name.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from sagemaker.estimator import Estimator as SdkEstimator
from sagemaker.pytorch import PyTorch as SdkPyTorch
from sagemaker.tensorflow import TensorFlow as SdkTensorFlow

from smlaunch import ConfigurationError, Estimator, PyTorch, TensorFlow
from tests.unit.test_plan_oracle import (  # noqa: F401
    INPUTS,
    ROLE,
    FakeSageMakerSession,
    _differences,
    _normalise,
    sdk_capture,
    src,
)

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
SUBMIT = "s3://my-bucket/mnist/sourcedir.tar.gz"
VALUES: dict[str, Any] = {
    "epochs": 2,
    "lr": 3e-5,
    "flag": True,
    "off": False,
    "none": None,
    "words": "a b",
    "encoded": '"value1"',
    "list": [1, "two"],
    "dict": {"a": 1, "b": [True, None]},
}
GENERIC = dict(image_uri=IMAGE, instance_type="ml.c5.xlarge", instance_count=1)
FRAMEWORK = dict(
    instance_type="ml.c5.xlarge", instance_count=1, framework_version="2.1.0", py_version="py310"
)

CASES: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "generic_image_no_code": (SdkEstimator, Estimator, dict(**GENERIC, hyperparameters=VALUES)),
    "generic_framework_image_pattern": (
        SdkEstimator,
        Estimator,
        dict(
            **GENERIC,
            hyperparameters={"sagemaker_program": "train.py", "sagemaker_submit_directory": SUBMIT, **VALUES},
        ),
    ),
    "generic_framework_image_pattern_json_encoded": (
        SdkEstimator,
        Estimator,
        dict(
            **GENERIC,
            hyperparameters={
                "sagemaker_program": '"train.py"',
                "sagemaker_submit_directory": f'"{SUBMIT}"',
                "sagemaker_container_log_level": 20,
                "key": '"value1"',
            },
        ),
    ),
    "generic_launcher_keys_without_distribution": (
        SdkEstimator,
        Estimator,
        dict(
            image_uri=IMAGE,
            instance_type="ml.c5.xlarge",
            instance_count=2,
            hyperparameters={
                "sagemaker_program": "train.py",
                "sagemaker_submit_directory": SUBMIT,
                "sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": 2,
                "sagemaker_mpi_custom_mpi_options": "-verbose",
            },
        ),
    ),
    "generic_entry_point_and_source_dir": (
        SdkEstimator,
        Estimator,
        dict(
            **GENERIC,
            entry_point="train.py",
            source_dir="<src>",
            hyperparameters={"sagemaker_program": "old.py", **VALUES},
        ),
    ),
    "generic_entry_point_only": (
        SdkEstimator,
        Estimator,
        dict(
            **GENERIC,
            entry_point="<src>/train.py",
            hyperparameters={"sagemaker_job_name": "old-job", **VALUES},
        ),
    ),
    "pytorch_script_mode_keys_replaced": (
        SdkPyTorch,
        PyTorch,
        dict(
            **FRAMEWORK,
            entry_point="train.py",
            source_dir="<src>",
            hyperparameters={
                "sagemaker_program": "other.py",
                "epochs": 2,
                "sagemaker_submit_directory": "s3://elsewhere/sourcedir.tar.gz",
                "sagemaker_container_log_level": 10,
                "sagemaker_job_name": "an-old-job",
                "sagemaker_region": "eu-west-1",
            },
        ),
    ),
    "tensorflow_script_mode_keys_replaced_launcher_agreeing": (
        SdkTensorFlow,
        TensorFlow,
        dict(
            instance_type="ml.c5.xlarge",
            instance_count=2,
            framework_version="2.16",
            py_version="py310",
            entry_point="train.py",
            source_dir="<src>",
            distribution={"parameter_server": {"enabled": True}},
            hyperparameters={
                "sagemaker_program": "old.py",
                "sagemaker_parameter_server_enabled": True,
                "epochs": 2,
            },
        ),
    ),
    "pytorch_launcher_keys_agreeing_with_distribution": (
        SdkPyTorch,
        PyTorch,
        dict(
            **{**FRAMEWORK, "instance_count": 2},
            entry_point="train.py",
            source_dir="<src>",
            distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
            hyperparameters={
                "sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": 2,
                "epochs": 2,
            },
        ),
    ),
}


def _resolve(kwargs: dict[str, Any], src: Path) -> dict[str, Any]:
    resolved = copy.deepcopy(kwargs)
    for key in ("entry_point", "source_dir"):
        if key in resolved:
            resolved[key] = resolved[key].replace("<src>", str(src))
    return resolved


def _ours(cls: Any, kwargs: dict[str, Any], job_name: str) -> dict[str, Any]:
    estimator = cls(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
    return estimator.plan(INPUTS["default"], job_name=job_name).to_request()


@pytest.mark.parametrize("case", sorted(CASES))
def test_request_equals_sdk_request(case: str, src: Path, sdk_capture: Any) -> None:
    sdk_class, ours_class, kwargs = CASES[case]
    kwargs = _resolve(kwargs, src)
    job_name = case.replace("_", "-")[:50]
    sdk_raw = sdk_capture(kwargs, INPUTS["default"], job_name, sdk_class=sdk_class)
    ours_raw = _ours(ours_class, kwargs, job_name)
    assert _differences(_normalise(sdk_raw), _normalise(ours_raw)) == []
    assert list(sdk_raw["HyperParameters"]) == list(ours_raw["HyperParameters"])


def test_generic_values_go_as_str_and_a_notebook_encoded_value_once(src: Path, sdk_capture: Any) -> None:
    """The wire values themselves, so the oracle comparison above cannot pass by both being wrong."""
    kwargs = dict(**GENERIC, hyperparameters=VALUES)
    wire = _ours(Estimator, kwargs, "generic-wire")["HyperParameters"]
    assert (
        wire["flag"] == "True"
        and wire["encoded"] == '"value1"'
        and wire["dict"] == "{'a': 1, 'b': [True, None]}"
    )
    with_code = _ours(Estimator, dict(**kwargs, entry_point="train.py", source_dir=str(src)), "generic-json")
    assert with_code["HyperParameters"]["flag"] == "true"


def test_a_dict_the_sdk_already_wrote_into_is_taken_again(src: Path, sdk_capture: Any) -> None:
    """A notebook ran the SDK's estimator, then ours, with the same ``hyperparameters`` dict."""
    hyperparameters: dict[str, Any] = {"epochs": 2, "lr": 3e-5}
    kwargs = dict(**FRAMEWORK, entry_point="train.py", source_dir=str(src))
    sdk = SdkPyTorch(
        role=ROLE, sagemaker_session=sdk_capture.session, hyperparameters=hyperparameters, **kwargs
    )
    sdk.fit(INPUTS["default"], wait=False, job_name="first-sdk-job")
    assert hyperparameters["sagemaker_job_name"] == "first-sdk-job"  # the SDK wrote into the dict
    sdk_raw = sdk_capture({**kwargs, "hyperparameters": hyperparameters}, INPUTS["default"], "second-job")
    ours_raw = _ours(PyTorch, {**kwargs, "hyperparameters": hyperparameters}, "second-job")
    assert _differences(_normalise(sdk_raw), _normalise(ours_raw)) == []
    assert ours_raw["HyperParameters"]["sagemaker_job_name"] == '"second-job"'


@pytest.mark.parametrize(
    ("distribution", "hyperparameters", "problem"),
    [
        (
            {"torch_distributed": {"enabled": True}},
            {"sagemaker_mpi_enabled": True},
            "turns on a launcher that distribution={'torch_distributed': {'enabled': True}} does not start",
        ),
        (
            {"mpi": {"enabled": True, "processes_per_host": 2}},
            {"sagemaker_mpi_num_of_processes_per_host": 4},
            "which sends sagemaker_mpi_num_of_processes_per_host=2",
        ),
        (
            {"mpi": {"enabled": True, "processes_per_host": 2}},
            {"sagemaker_mpi_enabled": False},
            "which sends sagemaker_mpi_enabled=True",
        ),
    ],
)
def test_a_launcher_key_contradicting_distribution_is_refused_by_name(
    distribution: dict[str, Any], hyperparameters: dict[str, Any], problem: str, src: Path
) -> None:
    key, value = next(iter(hyperparameters.items()))
    with pytest.raises(ConfigurationError) as raised:
        PyTorch(
            role=ROLE,
            entry_point="train.py",
            source_dir=str(src),
            distribution=distribution,
            hyperparameters={"epochs": 2, **hyperparameters},
            sagemaker_session=FakeSageMakerSession(),
            **{**FRAMEWORK, "instance_count": 2, "instance_type": "ml.p4d.24xlarge"},
        )
    assert raised.value.field == f"hyperparameters[{key!r}]"
    assert raised.value.value == value
    assert problem in str(raised.value)
    assert f"Fix: drop {key!r} from hyperparameters" in str(raised.value)


def test_a_launcher_key_of_a_launcher_that_is_off_is_no_contradiction(src: Path) -> None:
    PyTorch(
        role=ROLE,
        entry_point="train.py",
        source_dir=str(src),
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"sagemaker_mpi_enabled": False, "sagemaker_mpi_num_of_processes_per_host": 4},
        sagemaker_session=FakeSageMakerSession(),
        **{**FRAMEWORK, "instance_type": "ml.p3.2xlarge"},
    )


def test_set_hyperparameters_refuses_a_contradiction_and_keeps_the_old_values(src: Path) -> None:
    estimator = PyTorch(
        role=ROLE,
        entry_point="train.py",
        source_dir=str(src),
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"epochs": 2},
        sagemaker_session=FakeSageMakerSession(),
        **{**FRAMEWORK, "instance_type": "ml.p3.2xlarge"},
    )
    with pytest.raises(ConfigurationError, match=r"^hyperparameters\['sagemaker_mpi_enabled'\]=True"):
        estimator.set_hyperparameters(sagemaker_mpi_enabled=True)
    assert estimator.hyperparameters() == {"epochs": 2}


@pytest.mark.parametrize(
    ("submit", "words"),
    [
        ("file:///tmp/sourcedir.tar.gz", "SageMaker hosts fetch code from S3 only"),
        ("s3://No_Such/bucket", "malformed S3 URI"),
        (3, "must be the code's URI"),
    ],
)
def test_a_submit_directory_sagemaker_cannot_fetch_is_refused(submit: Any, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words) as raised:
        Estimator(
            role=ROLE,
            hyperparameters={"sagemaker_program": "train.py", "sagemaker_submit_directory": submit},
            sagemaker_session=FakeSageMakerSession(),
            **GENERIC,
        )
    assert raised.value.field == "hyperparameters['sagemaker_submit_directory']"


def test_launcher_flags_sent_with_str_read_as_the_runtime_reads_them() -> None:
    """The generic Estimator sends ``False`` as ``"False"``: off, for the backend's check as for the host."""
    from smlaunch.sdk.request.distribution import Distribution

    assert Distribution.from_hyperparameters({"sagemaker_mpi_enabled": "False"}).strategy == "none"
    assert Distribution.from_hyperparameters({"sagemaker_mpi_enabled": "True"}).strategy == "mpi"
