"""Entry points follow SageMaker's training toolkit (``sagemaker-training`` 5.1.4,
``process.validate_entry_point``, the oracle): a name it refuses is refused at construction, naming
``entry_point`` with the fix, and by the host runtime; a name it accepts runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.runtime.code import resolve_entry_point
from tests.unit.test_estimator import config_error, local

toolkit_process = pytest.importorskip("sagemaker_training.process")
toolkit_errors = pytest.importorskip("sagemaker_training.errors")

NAMES = [
    "train.py",
    "bin/train.sh",
    "a+b.py",
    "_x.py",
    ".hidden.py",
    "v1.2-run.py",
    "my train.py",
    "train's.py",
    'tr"ain.py',
    "tréin.py",
    "日本.py",
    "train\n.py",
    "\ntrain.py",
    "train.py ",
    "\ttrain.py",
    "-c.py",
    "--help",
    "+x.py",
    "/abs.py",
    "./train.py",
    "../train.py",
    "a/./b.py",
    "a/../b.py",
    "a//b.py",
    "a/b/",
    "train;rm.py",
    "$(id).py",
    "a\\b.py",
    "a*b.py",
    "",
]
TRAILING_NEWLINE = "train.py\n"
"""The toolkit's ``^...$`` lets one trailing newline through (no file of that name reaches it from
the SDK); ours matches whole and refuses it, as the issue asks of every name check."""


def _toolkit_accepts(name: str) -> bool:
    try:
        toolkit_process.validate_entry_point(name)
    except toolkit_errors.ClientError:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_ours_refuses_exactly_what_the_toolkit_refuses(name: str) -> None:
    assert (contract.entry_point_problem(name) is None) is _toolkit_accepts(name)


def test_a_trailing_newline_is_refused_though_the_toolkit_lets_it_through() -> None:
    assert _toolkit_accepts(TRAILING_NEWLINE)
    assert contract.entry_point_problem(TRAILING_NEWLINE) is not None


@pytest.mark.parametrize("name", [n for n in NAMES if n and not _toolkit_accepts(n)] + [TRAILING_NEWLINE])
def test_refused_at_construction_naming_the_field_and_the_fix(src: Path, tmp_path: Path, name: str) -> None:
    error = config_error(lambda: local(src, tmp_path, entry_point=name))
    assert (error.field, error.value) == ("entry_point", name)
    assert error.fix == contract.ENTRY_POINT_FIX or "NUL" in error.problem or "source_dir" in error.problem


@pytest.mark.parametrize("name", [n for n in NAMES if _toolkit_accepts(n)])
def test_accepted_names_construct_and_resolve_on_the_host(src: Path, tmp_path: Path, name: str) -> None:
    (src / name).parent.mkdir(parents=True, exist_ok=True)
    (src / name).write_text("print('hi')\n")
    assert local(src, tmp_path, entry_point=name).entry_point == name
    assert resolve_entry_point(src, name) == (src / name).resolve()


def test_without_source_dir_the_file_name_is_what_is_checked(tmp_path: Path) -> None:
    script = tmp_path / "my dir" / "my train.py"
    script.parent.mkdir()
    script.write_text("")
    error = config_error(lambda: local(tmp_path, tmp_path, entry_point=str(script), source_dir=None))
    assert error.field == "entry_point" and "'my train.py'" in error.problem
    fine = script.with_name("train.py")
    fine.write_text("")
    assert local(tmp_path, tmp_path, entry_point=str(fine), source_dir=None).entry_point == str(fine)


def test_the_host_refuses_what_the_toolkit_refuses(tmp_path: Path) -> None:
    (tmp_path / "-c.py").write_text("")
    with pytest.raises(HostConfigurationError) as error:
        resolve_entry_point(tmp_path, "-c.py")
    assert error.value.field == contract.HP_PROGRAM and "leading '-'" in error.value.problem
