"""smlaunch's settings (``smlaunch.sdk.sessions.settings``): one model, resolved once per session with the
stated
precedence (argument > environment variable > config file > default), errors naming where a bad
value came from, the table of ``docs/configuration.md`` equal to the model, the host knobs reaching
the hosts from the session, and none of them ever reaching a SageMaker request."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from smlaunch import PyTorch, contract
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import sdk_config
from smlaunch.sdk.sessions import settings as knobs
from smlaunch.sdk.sessions.local import LocalSession
from smlaunch.sdk.sessions.sagemaker import Session
from tests.functional._local_helpers import job_request, make_spec
from tests.functional._sagemaker_moto import ROLE_ARN, fake_aws

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DOC = ROOT / "docs" / "configuration.md"

# A value, other than the default, for every setting: as the config file's YAML, as the variable's
# text, and as what the model holds.
NON_DEFAULT: dict[str, tuple[str, str, Any]] = {
    "executor": ("docker", "docker", "docker"),
    "docker_image": ("img:1", "img:1", "img:1"),
    "processes_per_host": ("3", "3", 3),
    "emulate_cuda": ("false", "false", False),
    "instance_count_quota": ("40", "40", 40),
    "install_requirements": ("false", "0", False),
    "artifact_conflicts": ("error", "error", "error"),
    "stop_grace_seconds": ("7", "7", 7.0),
    "stall_timeout_seconds": ("600", "600", 600.0),
    "stack_dumper": ("faulthandler", "faulthandler", "faulthandler"),
    "faults": (
        "[{kind: hang, rank: 0, after_seconds: 2}]",
        '[{"kind": "hang", "rank": 0, "after_seconds": 2}]',
        [{"kind": "hang", "rank": 0, "after_seconds": 2}],
    ),
    "archive_max_bytes": ("1000", "1000", 1000),
    "archive_max_members": ("10", "10", 10),
    "mpi_wait_seconds": ("30", "30", 30.0),
    "log_prefix": ("false", "0", False),
    "verbose": ("true", "1", True),
    "unsafe_checkpoint_load": ("true", "1", True),
    "retention": ("7d", "7d", "7d"),
}


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty environment of settings, the config file at ``$SMLAUNCH_CONFIG``."""
    for name in [*knobs.ENVIRONMENT_VARIABLES.values(), knobs.CONFIG_ENV, "XDG_CONFIG_HOME"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "config.yaml"
    path.write_text("")
    monkeypatch.setenv(knobs.CONFIG_ENV, str(path))
    yield path


def test_every_setting_of_the_config_file_is_read(config: Path) -> None:
    assert set(NON_DEFAULT) | {"root", "mlflow"} == set(knobs.Settings.model_fields)
    config.write_text("".join(f"{name}: {text}\n" for name, (text, _, _) in NON_DEFAULT.items()))
    resolved = knobs.resolve({})
    for name, (_, _, value) in NON_DEFAULT.items():
        assert getattr(resolved, name) == value, name


def test_every_variable_is_read(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, variable in knobs.ENVIRONMENT_VARIABLES.items():
        if name != "root":
            monkeypatch.setenv(variable, NON_DEFAULT[name][1])
    resolved = knobs.resolve({})
    for name in knobs.ENVIRONMENT_VARIABLES:
        if name != "root":
            assert getattr(resolved, name) == NON_DEFAULT[name][2], name


def test_argument_beats_variable_beats_file_beats_default(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LocalSession().settings.stall_timeout_seconds == 0
    assert LocalSession().root == tmp_path / "home" / ".smlaunch" / "jobs"
    config.write_text(f"stall_timeout_seconds: 30\nroot: {tmp_path / 'from-file'}\nexecutor: docker\n")
    assert LocalSession().settings.stall_timeout_seconds == 30
    assert LocalSession().root == tmp_path / "from-file"
    assert LocalSession().executor == "docker"
    monkeypatch.setenv(contract.SMLAUNCH_STALL_TIMEOUT_SECONDS, "45")
    monkeypatch.setenv(knobs.HOME_ENV, str(tmp_path / "from-env"))
    monkeypatch.setenv("SMLAUNCH_EXECUTOR", "")  # empty: unset
    assert LocalSession().settings.stall_timeout_seconds == 45
    assert LocalSession().root == tmp_path / "from-env" / "jobs"
    assert LocalSession().executor == "docker"
    session = LocalSession(root=tmp_path / "arg", stall_timeout_seconds=5, executor="process")
    assert (session.settings.stall_timeout_seconds, session.root, session.executor) == (
        5,
        tmp_path / "arg",
        "process",
    )


def test_the_default_file_is_optional_and_xdg_is_honoured(config: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(knobs.CONFIG_ENV)
    assert knobs.config_path() == (tmp_path / "home" / ".config" / "smlaunch" / "config.yaml", False)
    assert LocalSession().settings.retention == knobs.DEFAULT_RETENTION  # no file: defaults
    xdg = tmp_path / "xdg"
    (xdg / "smlaunch").mkdir(parents=True)
    (xdg / "smlaunch" / "config.yaml").write_text("retention: 2w\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert LocalSession().settings.retention == "2w"


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "stal_timeout_seconds: 30\n",
            "config.yaml: stal_timeout_seconds",
            ["did you mean 'stall_timeout_seconds'"],
        ),
        (
            "archive_max_bytes: -3\n",
            "config.yaml: archive_max_bytes",
            ["greater than or equal to 1", "archive_max_bytes: "],
        ),
        ("executor: podman\n", "config.yaml: executor", ["'process' or 'docker'"]),
        ("faults: [{kind: nope}]\n", "config.yaml: faults", ["kind='nope'"]),
        ("retention: 3 days\n", "config.yaml: retention", ["not an age"]),
        ("- executor\n", "config file", ["must be a mapping"]),
        ("executor: [\n", "config file", ["not valid YAML at line 2"]),
    ],
)
def test_a_bad_config_file_names_the_key_the_value_and_the_fix(
    config: Path, text: str, field: str, words: list[str]
) -> None:
    config.write_text(text)
    with pytest.raises(ConfigurationError) as err:
        LocalSession()
    assert err.value.field.endswith(field) and err.value.fix
    for word in words:
        assert word in str(err.value)


def test_bad_variables_and_a_missing_named_file_are_named(config: Path, monkeypatch) -> None:
    monkeypatch.setenv(contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS, "lots")
    with pytest.raises(ConfigurationError) as err:
        LocalSession()
    assert err.value.field == contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS and err.value.value == "lots"
    monkeypatch.setenv(contract.SMLAUNCH_ARCHIVE_MAX_MEMBERS, "10")
    monkeypatch.setenv(contract.SMLAUNCH_FAULTS, "[{")
    with pytest.raises(ConfigurationError, match="is not JSON"):
        LocalSession()
    monkeypatch.delenv(contract.SMLAUNCH_FAULTS)
    monkeypatch.setenv(knobs.CONFIG_ENV, str(config.parent / "nope.yaml"))
    with pytest.raises(ConfigurationError) as err:
        LocalSession()
    assert err.value.field == knobs.CONFIG_ENV and "no such file" in str(err.value)


def test_host_knobs_reach_the_hosts_and_environment_wins_per_job(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.write_text("stall_timeout_seconds: 30\nunsafe_checkpoint_load: true\n")
    monkeypatch.setenv(contract.SMLAUNCH_LOG_PREFIX, "0")  # inherited by hosts, outranked below
    session = LocalSession(tmp_path / "jobs", log_prefix=True)
    spec = make_spec(tmp_path, "knobs", "print('hi')")
    spec = spec.model_copy(update={"Environment": {contract.SMLAUNCH_STALL_TIMEOUT_SECONDS: "60"}})
    env = layout.settings_environment(LocalBackend(session).settings(spec))
    assert env[contract.SMLAUNCH_LOG_PREFIX] == "1"
    assert env[contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD] == "1"
    assert contract.SMLAUNCH_STALL_TIMEOUT_SECONDS not in env  # the job's environment= sets it
    assert set(env) >= set(knobs.HOST_VARIABLES.values()) - {contract.SMLAUNCH_STALL_TIMEOUT_SECONDS}


def test_a_session_spot_fault_needs_managed_spot(config: Path, tmp_path: Path) -> None:
    session = LocalSession(tmp_path / "jobs", faults=[{"kind": "spot", "after_seconds": 1}])
    with pytest.raises(ConfigurationError) as err:
        LocalBackend(session).check(job_request(make_spec(tmp_path, "spot", "print('hi')")))
    assert err.value.field == "faults"


def _documented_rows() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    section = CONFIG_DOC.read_text().split("## The settings", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[0])
        if match:
            rows[match.group(1)] = (cells[1], cells[2])
    return rows


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def test_the_configuration_page_lists_every_setting_its_default_and_variable() -> None:
    rows = _documented_rows()
    assert list(rows) == list(knobs.Settings.model_fields)
    for name, field in knobs.Settings.model_fields.items():
        default, variable = rows[name]
        expected = "`~/.smlaunch/jobs`" if name == "root" else _shown(field.default)
        assert default == expected, name
        env = knobs.ENVIRONMENT_VARIABLES.get(name)
        assert variable == (f"`{env}`" if env else ""), name


def test_no_smlaunch_knob_reaches_a_sagemaker_request(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every knob set every way it can be (smlaunch's config file, variable, ``environment=``, the
    SDK's config.yaml): the CreateTrainingJob requests a SageMaker session sends carry none of them."""
    config.write_text("".join(f"{name}: {text}\n" for name, (text, _, _) in NON_DEFAULT.items()))
    variables = {
        var: NON_DEFAULT[name][1] for name, var in knobs.ENVIRONMENT_VARIABLES.items() if name != "root"
    }
    monkeypatch.setenv(knobs.HOME_ENV, str(tmp_path / "home"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    sent: list[dict[str, Any]] = []
    with fake_aws(monkeypatch) as aws:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        session = Session(boto_session=aws.boto_session)
        session.sagemaker_client().meta.events.register(
            "provide-client-params.sagemaker.CreateTrainingJob", lambda params, **_: sent.append(params)
        )
        arguments: dict[str, Any] = dict(
            entry_point="train.py",
            source_dir=str(src),
            role=ROLE_ARN,
            instance_type="ml.m5.xlarge",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            sagemaker_session=session,
        )
        given = {**variables, knobs.HOME_ENV: "/x", "SMLAUNCH_ANYTHING": "1", "NCCL_DEBUG": "INFO"}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            PyTorch(**arguments, environment=given).fit(wait=False, job_name="no-knobs")
            # The SDK's config.yaml fills environment= when the notebook leaves it unset.
            sdk_file = tmp_path / "sagemaker-config.yaml"
            sdk_file.write_text(
                yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": {"Environment": given}}})
            )
            monkeypatch.setenv(sdk_config.USER_OVERRIDE_ENV, str(sdk_file))
            arguments["sagemaker_session"] = session = Session(boto_session=aws.boto_session)  # reads it
            session.sagemaker_client().meta.events.register(
                "provide-client-params.sagemaker.CreateTrainingJob", lambda params, **_: sent.append(params)
            )
            PyTorch(**arguments).fit(wait=False, job_name="no-knobs-sdk-config")
    assert [request["Environment"] for request in sent] == [{"NCCL_DEBUG": "INFO"}] * 2
    warned = " ".join(str(w.message) for w in caught)
    for name in [*variables, knobs.HOME_ENV, "SMLAUNCH_ANYTHING"]:
        assert name in warned
