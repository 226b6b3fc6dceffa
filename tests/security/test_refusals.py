"""Bad or hostile arguments are refused before anything is staged: a ConfigurationError naming the
argument, the value and the fix, and no job directory (or anything else) created under the store.

Covers issue 11's refusals: names that escape their directory (channels ``.``/``..``, entry points
outside ``source_dir``), wrong argument types (which used to surface as ``TypeError``), hyperparameter
keys that collide or set launcher flags, model-parallel partitions against the real process count,
and instance counts above SageMaker's per-job quota.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, PyTorch, Session, contract
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.runtime.environment import Environment, HostConfigurationError
from smlaunch.sdk.errors import ConfigurationError
from tests.functional._local_helpers import moto_s3_in_process
from tests.functional._runtime_tree import write_host_tree

MP_FIELD = "distribution.smdistributed.modelparallel.parameters"


def _smp(**parameters: Any) -> dict[str, Any]:
    """A model-parallel distribution on ml.p3.16xlarge with ``parameters`` added."""
    modelparallel = {"enabled": True, "parameters": {"partitions": 2, **parameters}}
    return {
        "instance_type": "ml.p3.16xlarge",
        "distribution": {"smdistributed": {"modelparallel": modelparallel}, "mpi": {"enabled": True}},
    }


@pytest.fixture
def src(tmp_path: Path) -> Path:
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text("print('training')\n")
    (tmp_path / "outside.py").write_text("print('not shipped')\n")
    return code


def _estimator(src: Path, root: Path, session: Any = None, **overrides: Any) -> PyTorch:
    kwargs: dict[str, Any] = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="local",
        instance_count=1,
        sagemaker_session=session if session is not None else LocalSession(root=root),
    )
    kwargs.update(overrides)
    return PyTorch(**kwargs)


def _assert_names(error: ConfigurationError, field: str, value: Any) -> None:
    message = str(error)
    assert error.field == field and message.startswith(f"{field}=")
    assert repr(value) in message
    assert error.fix and "Fix: " in message


# (id, estimator overrides, field named, value named)
CONSTRUCTION_REFUSALS: list[tuple[str, dict[str, Any], str, Any]] = [
    ("entry point above source_dir", {"entry_point": "../outside.py"}, "entry_point", "../outside.py"),
    ("absolute entry point", {"entry_point": "/etc/passwd"}, "entry_point", "/etc/passwd"),
    ("hyperparameter keys colliding", {"hyperparameters": {1: "a", "1": "b"}}, "hyperparameters key", "1"),
    (
        "launcher flag contradicting distribution",
        {
            "hyperparameters": {"sagemaker_mpi_enabled": True},
            "distribution": {"torch_distributed": {"enabled": True}},
        },
        "hyperparameters['sagemaker_mpi_enabled']",
        True,
    ),
    (
        "mp_parameters contradicting distribution",
        {**_smp(), "hyperparameters": {"mp_parameters": {"partitions": 4}}},
        "hyperparameters['mp_parameters']",
        {"partitions": 4},
    ),
    ("default_partition not an index", _smp(default_partition="x"), f"{MP_FIELD}.default_partition", "x"),
    ("memory_weight not a number", _smp(memory_weight="heavy"), f"{MP_FIELD}.memory_weight", "heavy"),
    (
        "instance_count above the per-job quota",
        {"instance_type": "ml.p4d.24xlarge", "instance_count": 21},
        "instance_count",
        21,
    ),
    ("use_spot_instances as text", {"use_spot_instances": "no"}, "use_spot_instances", "no"),
    ("dependencies as one string", {"dependencies": "lib"}, "dependencies", "lib"),
    ("role as a number", {"role": 5}, "role", 5),
    ("image_uri as a number", {"image_uri": 5}, "image_uri", 5),
    ("volume_kms_key as a number", {"volume_kms_key": 7}, "volume_kms_key", 7),
    ("hyperparameters as a list", {"hyperparameters": ["epochs", 3]}, "hyperparameters", ["epochs", 3]),
    ("framework_version as a float", {"framework_version": 2.1}, "framework_version", 2.1),
    (
        "metric name as a number",
        {"metric_definitions": [{"Name": 1, "Regex": "x"}]},
        "metric_definitions[0].Name",
        1,
    ),
    ("network isolation as text", {"enable_network_isolation": "false"}, "enable_network_isolation", "false"),
]


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [c[1:] for c in CONSTRUCTION_REFUSALS],
    ids=[c[0] for c in CONSTRUCTION_REFUSALS],
)
def test_construction_refuses_naming_argument_value_and_fix(
    src: Path, tmp_path: Path, overrides: dict[str, Any], field: str, value: Any
) -> None:
    root = tmp_path / "jobs"
    with pytest.raises(ConfigurationError) as caught:
        _estimator(src, root, **overrides)
    _assert_names(caught.value, field, value)
    assert not root.exists() or not any(root.iterdir())


def test_partitions_are_checked_against_the_emulated_process_count(src: Path, tmp_path: Path) -> None:
    """8 partitions divide ml.p3.16xlarge's 8 GPUs, but LocalSession(processes_per_host=3) runs 3."""
    root = tmp_path / "jobs"
    distribution = {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 8}}},
        "mpi": {"enabled": True},
    }
    session = LocalSession(root=root, processes_per_host=3)
    with pytest.raises(ConfigurationError) as caught:
        _estimator(src, root, session, instance_type="ml.p3.16xlarge", distribution=distribution)
    _assert_names(caught.value, f"{MP_FIELD}.partitions", 8)
    assert "3 processes" in str(caught.value) and "processes_per_host=3" in str(caught.value)
    # The same partitions with the instance's own GPU count are fine.
    _estimator(src, root, LocalSession(root=root), instance_type="ml.p3.16xlarge", distribution=distribution)
    assert not root.exists() or not any(root.iterdir())


def test_raised_instance_quota_is_honoured(src: Path, tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    estimator = _estimator(
        src,
        root,
        LocalSession(root=root, instance_count_quota=40),
        instance_type="ml.p4d.24xlarge",
        instance_count=32,
    )
    assert estimator.instance_count == 32
    with pytest.raises(ConfigurationError) as caught:
        Session(instance_count_quota=0)
    _assert_names(caught.value, "instance_count_quota", 0)


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"stop_grace_seconds": "x"}, "stop_grace_seconds", "x"),
        ({"stop_grace_seconds": float("nan")}, "stop_grace_seconds", float("nan")),
        ({"processes_per_host": True}, "processes_per_host", True),
        ({"root": 5}, "root", 5),
        ({"executor": ["docker"]}, "executor", ["docker"]),
    ],
    ids=["grace-text", "grace-nan", "ppn-bool", "root-int", "executor-list"],
)
def test_local_session_arguments_are_type_checked(kwargs: dict[str, Any], field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        LocalSession(**kwargs)
    assert caught.value.field == field and caught.value.fix
    assert str(caught.value).startswith(f"{field}={value!r}")


def test_session_arguments_are_type_checked() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Session(default_bucket=123)
    _assert_names(caught.value, "default_bucket", 123)


@pytest.mark.parametrize("channel", [".", "..", "a/b", "../x"])
def test_channel_names_that_are_not_one_directory_are_refused(
    src: Path, tmp_path: Path, channel: str
) -> None:
    root = tmp_path / "jobs"
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.py").write_text("print('I replace your script')\n")
    estimator = _estimator(src, root)
    for call in (estimator.plan, estimator.fit):
        with pytest.raises(ConfigurationError) as caught:
            call({channel: data.as_uri()})
        assert caught.value.field == "inputs channel name" and repr(channel) in str(caught.value)
        assert "Fix: " in str(caught.value)
    assert not root.exists() or not any(root.iterdir())
    assert (src / "train.py").read_text() == "print('training')\n"


def test_fit_arguments_are_type_checked(src: Path, tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    with pytest.raises(ConfigurationError) as caught:
        _estimator(src, root).fit(wait="yes")
    _assert_names(caught.value, "wait", "yes")
    assert not root.exists() or not any(root.iterdir())


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "/etc", "../../x"])
def test_one_component_names_stay_under_their_parent(tmp_path: Path, name: str) -> None:
    with pytest.raises(contract.PathEscapeError, match="does not name a path inside"):
        contract.child_path(tmp_path, name, "host name", single=True)
    with pytest.raises(contract.PathEscapeError):
        contract.Paths(tmp_path).channel_dir(name)


def test_local_backend_refuses_job_names_that_are_paths(tmp_path: Path) -> None:
    backend = LocalSession(root=tmp_path / "jobs").backend()
    for name in ("..", "../other", "a/b"):
        with pytest.raises(ConfigurationError) as caught:
            backend.describe(name)
        assert caught.value.field == "job_name"


@pytest.mark.parametrize("key", ["data/../../escape.txt", "data/x/../../../escape.txt"])
def test_downloaded_object_keys_stay_under_the_directory(tmp_path: Path, key: str, monkeypatch: Any) -> None:
    """An object whose key climbs out of its prefix (S3 allows ``..`` in keys) is refused, and no
    file appears outside the download directory."""
    dest = tmp_path / "a" / "b" / "channel"
    dest.mkdir(parents=True)
    with moto_s3_in_process(monkeypatch, "bucket") as client:
        client.put_object(Bucket="bucket", Key=key, Body=b"escaped")
        client.put_object(Bucket="bucket", Key="data/ok.txt", Body=b"fine")
        with TransferEngine(s3_client=client, progress=False) as engine:
            with pytest.raises(contract.PathEscapeError, match=r"escape\.txt"):
                engine.download_prefix("s3://bucket/data/", dest)
    assert [p.name for p in tmp_path.rglob("escape.txt")] == []


@pytest.mark.parametrize("channel", ["..", "a/../..", "/etc"])
def test_runtime_refuses_a_request_channel_that_is_not_one_directory(tmp_path: Path, channel: str) -> None:
    """A request written by another tool (or by hand) reaches the host runtime unchecked: there too,
    a channel name never makes a path outside input/data."""
    paths = write_host_tree(tmp_path / "algo-1", "algo-1", ["algo-1"], {})
    paths.input_data_config_file.write_text(json.dumps({channel: {"TrainingInputMode": "File"}}))
    with pytest.raises(HostConfigurationError) as caught:
        Environment.from_files(paths.base, {})
    assert repr(channel) in str(caught.value) and "Fix: " in str(caught.value)


def test_runtime_refuses_host_names_that_are_paths(tmp_path: Path) -> None:
    paths = write_host_tree(tmp_path / "algo-1", "algo-1", ["algo-1"], {})
    config = json.loads(paths.resource_config_file.read_text())
    config["hosts"] = ["algo-1", "../../etc"]
    paths.resource_config_file.write_text(json.dumps(config))
    with pytest.raises(HostConfigurationError) as caught:
        Environment.from_files(paths.base, {})
    assert "'../../etc'" in str(caught.value) and "Fix: " in str(caught.value)
