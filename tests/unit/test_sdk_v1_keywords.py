# ruff: noqa: F811  (sdk_capture and src are fixtures imported from test_plan_oracle)
"""Oracle: SDK v1 argument names (``train_instance_type=``...) are taken as SDK v2 takes them.

The table of renamed keywords is read from the installed SDK (every ``renamed_kwargs("old", "new",
...)`` call in the ``__init__`` of each class of an estimator's MRO), so a name the SDK adds or drops
shows up here. For each name, the SDK's estimator and ours are built with the old name and must
agree on the v2 attribute and on the warning text; the whole request is compared as in
``test_plan_oracle.py``.
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from sagemaker.estimator import Estimator as SdkEstimator
from sagemaker.pytorch import PyTorch as SdkPyTorch
from sagemaker.tensorflow import TensorFlow as SdkTensorFlow

from smlaunch import ConfigurationError, Estimator, LocalSession, PyTorch, TensorFlow
from smlaunch.sdk.keywords import renamed_message
from tests.unit.test_plan_oracle import (  # noqa: F401
    INPUTS,
    ROLE,
    FakeSageMakerSession,
    _differences,
    _normalise,
    sdk_capture,
    src,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PAIRS = {
    "Estimator": (SdkEstimator, Estimator),
    "PyTorch": (SdkPyTorch, PyTorch),
    "TensorFlow": (SdkTensorFlow, TensorFlow),
}
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
# A v2 value for every renamed argument, unlike its default, so that the mapping shows.
V2_VALUES: dict[str, Any] = {
    "instance_count": 2,
    "instance_type": "ml.c5.xlarge",
    "max_run": 3600,
    "use_spot_instances": True,
    "max_wait": 7200,
    "volume_size": 50,
    "volume_kms_key": "vol-key",
    "image_uri": IMAGE,
    "distribution": {"parameter_server": {"enabled": True}},
}
BASE: dict[str, dict[str, Any]] = {
    "Estimator": dict(image_uri=IMAGE),
    "PyTorch": dict(entry_point="train.py", framework_version="2.1.0", py_version="py310"),
    "TensorFlow": dict(entry_point="train.py", framework_version="2.16", py_version="py310"),
}


def sdk_renamed(sdk_class: type) -> dict[str, str]:
    """old -> new for every ``renamed_kwargs`` call in the SDK constructors ``sdk_class`` runs."""
    table: dict[str, str] = {}
    for cls in sdk_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "renamed_kwargs":
                old, new = (arg.value for arg in node.args[:2])  # type: ignore[attr-defined]
                table[old] = new
    return table


def test_the_sdk_table_is_the_one_notebooks_use() -> None:
    """The derivation finds the SDK v1 names of issue 24 (a guard on the AST walk itself)."""
    assert sdk_renamed(SdkEstimator)["train_instance_type"] == "instance_type"
    assert sdk_renamed(SdkPyTorch)["image_name"] == "image_uri"
    assert sdk_renamed(SdkTensorFlow)["distributions"] == "distribution"
    assert len(sdk_renamed(SdkTensorFlow)) == 9


def _construct(cls: type, kwargs: dict[str, Any], session: Any) -> tuple[Any, list[str], list[str]]:
    """The estimator, the DeprecationWarning texts and the logged warnings its constructor gave."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING:
                records.append(record.getMessage())

    handler = Keep()
    logging.getLogger().addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            estimator = cls(role=ROLE, sagemaker_session=session, **kwargs)
    finally:
        logging.getLogger().removeHandler(handler)
    return estimator, [str(w.message) for w in caught if w.category is DeprecationWarning], records


def _kwargs(name: str, old: str, new: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        **BASE[name],
        "instance_type": "ml.m5.large",
        "instance_count": 1,
        "max_run": 3600,
        "use_spot_instances": True,
        "max_wait": 7200,
    }
    kwargs.pop(new, None)
    kwargs[old] = V2_VALUES[new]
    return kwargs


@pytest.mark.parametrize(
    ("name", "old"), [(name, old) for name, (sdk, _) in PAIRS.items() for old in sorted(sdk_renamed(sdk))]
)
def test_v1_name_maps_to_v2_name_with_the_sdk_warning(
    name: str, old: str, src: Path, sdk_capture: Any
) -> None:
    sdk_class, ours_class = PAIRS[name]
    new = sdk_renamed(sdk_class)[old]
    kwargs = {**_kwargs(name, old, new), **({"source_dir": str(src)} if name != "Estimator" else {})}
    sdk, sdk_warnings, _ = _construct(sdk_class, kwargs, sdk_capture.session)
    ours, our_warnings, our_logged = _construct(ours_class, kwargs, FakeSageMakerSession())
    assert getattr(ours, new) == getattr(sdk, new) == V2_VALUES[new]
    sdk_message = next(m for m in sdk_warnings if m.startswith(f"{old} "))
    assert our_warnings == [sdk_message]
    assert sdk_message in our_logged  # shown in a notebook, as the SDK's logged copy is


@pytest.mark.parametrize("positional", [False, True])
def test_old_and_new_name_together_the_old_one_wins_as_in_the_sdk(positional: bool, sdk_capture: Any) -> None:
    args: tuple[Any, ...] = (IMAGE, ROLE, 1, "ml.m5.large") if positional else ()
    kwargs: dict[str, Any] = (
        {} if positional else dict(image_uri=IMAGE, role=ROLE, instance_count=1, instance_type="ml.m5.large")
    )
    kwargs.update(train_instance_type="ml.c5.xlarge", train_instance_count=3)
    sdk = SdkEstimator(*args, sagemaker_session=sdk_capture.session, **kwargs)
    ours = Estimator(*args, sagemaker_session=FakeSageMakerSession(), **kwargs)
    assert (
        (ours.instance_type, ours.instance_count)
        == (sdk.instance_type, sdk.instance_count)
        == ("ml.c5.xlarge", 3)
    )


def test_v1_notebook_request_equals_the_sdk_request(src: Path, sdk_capture: Any) -> None:
    """An SDK-v1-era cell, every renamed argument at once: the request is the SDK's."""
    kwargs = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        train_instance_count=2,
        train_instance_type="ml.c5.xlarge",
        train_volume_size=50,
        train_volume_kms_key="vol-key",
        train_max_run=3600,
        train_use_spot_instances=True,
        train_max_wait=7200,
        image_name=IMAGE,
        hyperparameters={"epochs": 10},
    )
    sdk = sdk_capture(kwargs, INPUTS["default"], "v1-names")
    ours = PyTorch(role=ROLE, sagemaker_session=FakeSageMakerSession(), **kwargs)
    assert (
        _differences(
            _normalise(sdk), _normalise(ours.plan(INPUTS["default"], job_name="v1-names").to_request())
        )
        == []
    )


def test_tensorflow_v1_distributions_and_script_mode(src: Path, sdk_capture: Any) -> None:
    """``distributions=`` is renamed; ``script_mode=True`` (SDK v1 TensorFlow) does nothing, as in SDK v2,
    which swallows it silently: ours says so in a warning."""
    kwargs = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.16",
        py_version="py310",
        train_instance_count=2,
        train_instance_type="ml.c5.xlarge",
        distributions={"parameter_server": {"enabled": True}},
        script_mode=True,
    )
    sdk = sdk_capture(kwargs, INPUTS["default"], "v1-tf", sdk_class=SdkTensorFlow)
    ours, our_warnings, _ = _construct(TensorFlow, kwargs, FakeSageMakerSession())
    assert (
        _differences(_normalise(sdk), _normalise(ours.plan(INPUTS["default"], job_name="v1-tf").to_request()))
        == []
    )
    assert any(w.startswith("script_mode is a no-op in sagemaker>=2.") for w in our_warnings)


def test_a_pytorch_mnist_v1_cell_plans_locally(tmp_path: Path) -> None:
    """As the classic ``pytorch_mnist`` notebook wrote it before SDK v2."""
    (tmp_path / "mnist.py").write_text("print('training')\n")
    with pytest.warns(DeprecationWarning, match="train_instance_type has been renamed"):
        estimator = PyTorch(
            entry_point=str(tmp_path / "mnist.py"),
            role="SageMakerRole",
            framework_version="1.8.0",
            py_version="py3",
            train_instance_count=2,
            train_instance_type="local",
            hyperparameters={"epochs": 1, "backend": "gloo"},
            sagemaker_session=LocalSession(root=tmp_path / "store"),
        )
    resources = estimator.plan(job_name="mnist-v1").ResourceConfig
    assert (resources.InstanceType, resources.InstanceCount) == ("local", 2)


def test_an_unknown_keyword_is_still_a_type_error() -> None:
    with pytest.raises(TypeError, match="train_instance_typo"):
        Estimator(
            image_uri=IMAGE,
            role=ROLE,
            instance_count=1,
            instance_type="ml.m5.large",
            train_instance_typo="x",
            sagemaker_session=FakeSageMakerSession(),
        )


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_a_misspelt_keyword_is_named_first_with_the_argument_it_meant(name: str) -> None:
    # Without instance_type (misspelt) or framework_version (misspelt) the constructor would
    # otherwise complain about the missing argument, not about the typo that caused it.
    arguments = dict(BASE[name], role=ROLE, instance_count=1, instance_typ="ml.c5.xlarge")
    with pytest.raises(TypeError) as raised:
        PAIRS[name][1](sagemaker_session=FakeSageMakerSession(), **arguments)
    assert str(raised.value) == (
        f"{name}() got an unexpected keyword argument 'instance_typ'. Fix: did you mean 'instance_type'?"
    )
    if "framework_version" in arguments:
        arguments = dict(
            arguments, instance_type="ml.c5.xlarge", framework_verison=arguments["framework_version"]
        )
        del arguments["instance_typ"], arguments["framework_version"]
        with pytest.raises(
            TypeError, match=r"'framework_verison'\. Fix: did you mean 'framework_version'\?$"
        ):
            PAIRS[name][1](sagemaker_session=FakeSageMakerSession(), **arguments)
    with pytest.raises(TypeError, match=r"'rules'\. Fix: remove it \(docs/porting\.md"):
        PAIRS[name][1](sagemaker_session=FakeSageMakerSession(), **dict(BASE[name], rules=[], role=ROLE))


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_instance_groups_is_refused_by_name(name: str) -> None:
    from sagemaker.instance_group import InstanceGroup

    groups = [InstanceGroup("data", "ml.c5.xlarge", 1), InstanceGroup("dnn", "ml.p3.2xlarge", 1)]
    with pytest.raises(
        ConfigurationError, match=r"^instance_groups=.*heterogeneous clusters.*Fix: pass one instance_type"
    ):
        PAIRS[name][1](
            role=ROLE, instance_groups=groups, sagemaker_session=FakeSageMakerSession(), **BASE[name]
        )


def test_the_generic_estimator_takes_v1_image_name_where_the_sdk_raises(sdk_capture: Any) -> None:
    """SDK v1's generic ``Estimator(image_name, role, train_instance_count, ...)``: SDK v2 renames
    ``image_name`` only in ``Framework``, so its generic ``Estimator`` misses ``image_uri``."""
    kwargs: dict[str, Any] = dict(
        image_name=IMAGE, role=ROLE, train_instance_count=1, train_instance_type="ml.m5.large"
    )
    with pytest.raises(TypeError, match="image_uri"):
        SdkEstimator(sagemaker_session=sdk_capture.session, **kwargs)
    ours, our_warnings, _ = _construct(
        Estimator, {k: v for k, v in kwargs.items() if k != "role"}, FakeSageMakerSession()
    )
    assert ours.image_uri == IMAGE
    assert renamed_message("image_name") in our_warnings
