"""The documentation stays true: the variable tables of ``docs/`` name exactly what the runtime sets,
the README's set-up commands are the ones CI runs (torch alone from PyTorch's CPU wheel index), and
nothing in the repository points at material outside it."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.runtime.env_vars import to_env_vars
from smlaunch.runtime.environment import Environment
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
    rendered = set(to_env_vars(Environment.from_files(base, {contract.SMLAUNCH_NUM_GPUS: "0"})))
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


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
README = ROOT / "README.md"


def _setup_commands() -> list[str]:
    """The fenced ``bash`` commands of the README's set-up section, in order."""
    section = README.read_text().split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def _pip_installs(command: str) -> list[list[str]]:
    """Each ``pip install`` of a ``&&`` chain, as its argument list (after ``install``)."""
    steps = [shlex.split(step) for step in command.split("&&")]
    return [step[2:] for step in steps if step[:2] == ["pip", "install"]]


def test_the_readme_set_up_installs_torch_alone_from_the_cpu_index() -> None:
    commands = _setup_commands()
    assert len(commands) == 2, commands  # the quickstart, then the tests
    for command, extra in zip(commands, ("examples", "test"), strict=True):
        assert "\n" not in command, command
        torch, package = _pip_installs(command)
        assert [a for a in torch if a != "-q"] == ["torch==2.13.0", "--extra-index-url", CPU_INDEX]
        # The project's own install never sees the extra index (pip would look every package up there).
        assert [a for a in package if a != "-q"] == ["-e", f".[{extra}]"]
        assert re.search(rf"^{extra} = \[", (ROOT / "pyproject.toml").read_text(), re.M), extra
    assert commands[0].endswith("&& python examples/quickstart/run.py")
    assert (ROOT / "examples" / "quickstart" / "run.py").is_file()
    assert commands[1].endswith("&& python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = next(
        i for i, line in enumerate(lines) if line.startswith("# The README's test command, verbatim")
    )
    command = next(line for line in lines[marker:] if not line.startswith("#"))
    assert command == _setup_commands()[1] + " || exit $?"  # a failed install must end the run
    # Every torch install in CI takes the CPU index, and for torch alone.
    for command in re.findall(r"^pip install .*torch==.*$", "\n".join(lines), re.M):
        torch = _pip_installs(command.removesuffix(" || exit $?").rstrip("\\ "))[0]
        assert torch == ["-q", "torch==2.13.0", "--extra-index-url", CPU_INDEX]


def test_the_readme_says_which_runs_are_local() -> None:
    intro = README.read_text().split("```python", 1)[0]
    assert "(the default" not in intro
    for needed in ('instance_type="local"', '"local_gpu"', "sagemaker_session=LocalSession()", "`smlaunch`"):
        assert needed in intro, needed


def test_the_porting_page_import_map_imports_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row of docs/porting.md's import map: the SDK's import works in the SDK oracle, and its
    smlaunch counterpart works here."""
    pytest.importorskip("sagemaker")
    rows = re.findall(
        r"^\| `(from sagemaker[\w.]* import [\w, ]+)`[^|]* \| `(from smlaunch[\w.]* import [\w, ]+)` \|",
        (ROOT / "docs" / "porting.md").read_text(),
        re.MULTILINE,
    )
    assert len(rows) >= 10
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    for sdk, ours in rows:
        exec(sdk, {})
        exec(ours, {})
        # "`estimator`, the import path of earlier releases, keeps working"
        exec(ours.replace("from smlaunch import", "from estimator import"), {})


def _message_text() -> str:
    """The source of smlaunch/, with string literals continued on the next line joined, so a
    message split over several literals reads as printed."""
    text = "\n".join(p.read_text() for p in (ROOT / "smlaunch").rglob("*.py"))
    return re.sub(r'"\s*\n\s*(?:rf|fr|f|r)?"', "", text)


def test_every_message_on_the_troubleshooting_page_is_one_smlaunch_prints() -> None:
    """Each message docs/troubleshooting.md quotes (a bold code span opening a paragraph) still
    exists: its longest literal part, between placeholders (``<why>``, ``...``, quoted values,
    numbers) and after the ``field=value:`` prefix, is in the code. Python's own TypeError is not
    ours."""
    code = _message_text()
    doc = (ROOT / "docs" / "troubleshooting.md").read_text()
    messages = re.findall(r"^\*\*`(.+?)`\*\*", doc, re.MULTILINE | re.DOTALL)
    assert len(messages) >= 20
    for message in messages:
        text = " ".join(message.split())
        if text.startswith("TypeError"):
            continue
        text = re.sub(r"^\w+(?:Error|Warning): ", "", text)
        text = re.sub(r"^[\w.\[\]'/-]+=(?:'[^']*'|\S*?): ", "", text)
        parts = re.split(r"<[^>]*>|\.\.\.|'[^']*'|\b\d+\b|\bN\b|\([^()]*\)", text)
        longest = max((part.strip(" .,:;()[]'") for part in parts), key=len)
        assert longest in code, f"{message!r}: {longest!r} is not in smlaunch/"


DOC_PAGES = ["README.md", "container/README.md", "docs/*.md", "benchmarks/*.md", "smlaunch/**/*.md"]
"""The pages whose paths must name files of this repository."""


def test_every_path_the_pages_name_exists() -> None:
    """A backticked path into the repository (`smlaunch/runtime/launchers/`, `docs/smp.md`) names a
    file or folder that exists: a page cannot outlive a move."""
    paths = r"`((?:smlaunch|estimator|tests|container|docs|tools|benchmarks|examples)/[\w./-]*)`"
    stale = [
        f"{page.relative_to(ROOT)}: {path}"
        for pattern in DOC_PAGES
        for page in sorted(ROOT.glob(pattern))
        for path in re.findall(paths, page.read_text())
        if not (ROOT / path).exists()
    ]
    assert stale == []
