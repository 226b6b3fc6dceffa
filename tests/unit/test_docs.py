"""The documentation in ``docs/`` stays true: its variable tables name exactly what the runtime sets,
and nothing in the repository points at material outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from runtime import contract
from runtime.environment import Environment
from tests.functional._runtime_tree import write_host_tree

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_DOC = ROOT / "docs" / "runtime-contract.md"
# Names that stand for one variable per channel or hyperparameter, or that only some jobs have.
PATTERNS = {"SM_CHANNEL_<NAME>", "SM_HP_<NAME>"}
CONDITIONAL = {"SM_TOPOLOGY"}


def _documented(prefix: str) -> set[str]:
    rows = [line for line in CONTRACT_DOC.read_text().splitlines() if line.startswith("| `")]
    names: set[str] = set()
    for row in rows:
        first_cell = row.split("|")[1]
        names.update(re.findall(rf"`({prefix}[A-Z_<>]*)`", first_cell))
    return names


def test_the_contract_page_names_every_sm_variable_the_runtime_sets(tmp_path: Path) -> None:
    base = tmp_path / "ml"
    write_host_tree(base, "algo-1", ["algo-1", "algo-2"], {"epochs": "3"})
    rendered = set(Environment.from_files(base, {contract.SMLAUNCH_NUM_GPUS: "0"}).to_env_vars())
    fixed = {name for name in rendered if not name.startswith(("SM_CHANNEL_", "SM_HP_"))}
    documented = _documented("SM_")
    assert fixed - documented == set(), "set by the runtime but missing from docs/runtime-contract.md"
    assert documented - PATTERNS - CONDITIONAL - fixed == set(), "documented but never set"
    assert "SM_HP_EPOCHS" in rendered


def test_the_contract_page_names_every_smlaunch_variable() -> None:
    declared = {
        value
        for name, value in vars(contract).items()
        if name.startswith("SMLAUNCH_") and isinstance(value, str) and value == name
    }
    assert declared - _documented("SMLAUNCH_") == set()


def test_nothing_in_the_repository_points_outside_it() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    offenders = []
    for name in tracked.stdout.split():
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".toml", ".sh", ".txt", ".cfg"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"(?<![\w/])(\.\./)?shared/(reference|DESIGN|STYLE|hooks)", line) or re.search(
                r"\b(DESIGN|STYLE)\.md", line
            ):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []
