"""One error shape for "this field, this value, this fix", in the notebook and on the hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch import PyTorch
from smlaunch.contract.errors import FieldError, HostConfigurationError
from smlaunch.contract.faults import parse_faults
from smlaunch.sdk.errors import ConfigurationError


def test_notebook_and_host_errors_share_one_base_and_one_message() -> None:
    notebook = ConfigurationError("instance_count", 0, "must be >= 1", "pass instance_count=1 or more")
    host = HostConfigurationError("instance_count", 0, "must be >= 1", "pass instance_count=1 or more")
    assert isinstance(notebook, FieldError) and isinstance(host, FieldError)
    assert isinstance(notebook, ValueError) and isinstance(host, ValueError)
    assert str(notebook) == str(host) == "instance_count=0: must be >= 1. Fix: pass instance_count=1 or more"
    assert (notebook.field, notebook.value, notebook.problem, notebook.fix) == (
        host.field,
        host.value,
        host.problem,
        host.fix,
    )


def test_a_bad_fault_spec_names_the_variable_in_the_notebook_and_on_the_host(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(HostConfigurationError) as on_host:
        parse_faults('[{"kind": "melt"}]')
    assert on_host.value.field == "SMLAUNCH_FAULTS" and "kind='melt'" in on_host.value.problem
    with pytest.raises(ConfigurationError) as in_notebook:
        PyTorch(
            entry_point="train.py",
            source_dir=str(tmp_path),
            role="arn:aws:iam::123456789012:role/R",
            instance_type="local",
            instance_count=1,
            framework_version="2.1.0",
            py_version="py310",
            environment={"SMLAUNCH_FAULTS": '[{"kind": "melt"}]'},
        )
    assert in_notebook.value.field == "environment['SMLAUNCH_FAULTS']"
    assert in_notebook.value.problem == on_host.value.problem
