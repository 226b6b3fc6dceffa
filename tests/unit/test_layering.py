"""Architecture rules, written as tests: which folder may import which, no import circles, and the
notebook side stays light (planning a job loads no torch, no host runtime, nothing of the ranks).

The folders are the processes (``docs/architecture.md``): ``smlaunch/contract`` is shared by all and
imports nothing else of ours; ``smlaunch/sdk`` runs in the notebook (and its agent), ``smlaunch/runtime``
on every host, ``smlaunch/rank`` inside the user's processes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "smlaunch.contract": ("smlaunch.contract",),
    "smlaunch.sdk": ("smlaunch.contract", "smlaunch.sdk"),
    "smlaunch.runtime": ("smlaunch.contract", "smlaunch.runtime", "smlaunch.rank"),
    "smlaunch.rank": ("smlaunch.contract", "smlaunch.rank"),
    "smlaunch.serve": ("smlaunch.contract", "smlaunch.sdk", "smlaunch.serve"),  # `smlaunch serve`
    "smlaunch": ("smlaunch.sdk",),  # the public names, re-exported (lazily)
    "estimator": ("smlaunch",),  # the import path of earlier releases
}
"""Folder (package prefix) -> what its modules may import of ours. The longest matching key rules."""

CROSSINGS = {
    (
        "smlaunch.sdk.backends.emulated.executors.process.forked",
        "smlaunch.runtime.__main__",
    ): "the forked child becomes the host runtime (in the child only)",
    (
        "smlaunch.sdk.backends.emulated.executors.slurm.host",
        "smlaunch.runtime.requirements_cache",
    ): "the Slurm step seals the requirements cache as the host runtime does, then becomes it",
    (
        "smlaunch.sdk.backends.emulated.agent",
        "smlaunch.runtime.requirements_cache",
    ): "the agent removes a job's environment from the hosts' requirements cache once every host ended",
    (
        "smlaunch.sdk.cli.main",
        "smlaunch.serve.cli",
    ): "the `smlaunch` command's `serve` becomes the training service (its flags are the service's)",
}
"""The few imports across a process boundary, each where one process becomes or tends another."""

KNOWN_CIRCLES: list[list[str]] = []
"""Import circles that exist today, to be broken one by one (the list only shrinks): a new circle, or
one broken but still listed, fails :func:`test_no_import_circles`."""


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("smlaunch", "estimator"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module of ours that ``name`` imports, anywhere in the file (top level, inside functions,
    under ``TYPE_CHECKING``): the graph a reader sees, not only what loads first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in MODULES else base)
    return {t for t in targets if t in MODULES and t != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _rule(module: str) -> tuple[str, tuple[str, ...]]:
    folder = max((k for k in MAY_IMPORT if module == k or module.startswith(k + ".")), key=len)
    return folder, MAY_IMPORT[folder]


def _allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def test_each_folder_imports_only_what_its_process_may() -> None:
    wrong = [
        f"{module} ({_rule(module)[0]}) imports {target}"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if not _allowed(target, _rule(module)[1]) and (module, target) not in CROSSINGS
    ]
    assert wrong == []
    assert all(target in GRAPH[module] for module, target in CROSSINGS), "a crossing no longer exists"


def test_the_rule_table_catches_an_import_across_folders() -> None:
    """The rule itself can fail: the host runtime importing the SDK is refused."""
    assert not _allowed("smlaunch.sdk.estimator", _rule("smlaunch.runtime.environment")[1])
    assert not _allowed("smlaunch.runtime.environment", _rule("smlaunch.contract.archive")[1])
    assert _allowed("smlaunch.contract.archive", _rule("smlaunch.rank.boot")[1])


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circles() -> None:
    assert _circles(GRAPH) == sorted(KNOWN_CIRCLES)


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


PLAN = """
import importlib, json, pkgutil, sys
import smlaunch.sdk
from smlaunch import PyTorch, LocalSession
est = PyTorch(entry_point="train.py", source_dir={src!r}, role="arn:aws:iam::123456789012:role/R",
              instance_type="ml.p3.16xlarge", instance_count=2, framework_version="2.1.0",
              py_version="py310", hyperparameters={{"epochs": 1}},
              distribution={{"torch_distributed": {{"enabled": True}}}},
              environment={{"SMLAUNCH_FAULTS": '[{{"kind": "crash", "rank": 1, "after_seconds": 3}}]'}},
              sagemaker_session=LocalSession(root={root!r}))
est.plan({{"train": "file://{src}"}})
if {every_module!r}:
    for found in pkgutil.walk_packages(smlaunch.sdk.__path__, "smlaunch.sdk."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "smlaunch"))))
"""


def _loaded(tmp_path: Path, every_module: bool) -> list[str]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    code = PLAN.format(src=str(src), root=str(tmp_path / "jobs"), every_module=every_module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_planning_a_job_loads_no_torch_and_nothing_of_the_hosts_or_ranks(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, every_module=False)
    assert [m for m in loaded if m.startswith(("torch", "smlaunch.runtime", "smlaunch.rank"))] == []
    assert "smlaunch.contract.faults" in loaded  # the fault spec was parsed in the notebook


def test_every_sdk_module_loads_nothing_of_the_hosts_or_ranks(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, every_module=True)
    assert [m for m in loaded if m.startswith(("torch", "smlaunch.runtime", "smlaunch.rank"))] == []


def test_the_folders_are_the_architecture_page_table() -> None:
    """docs/architecture.md's table names every folder of the rule table, with its process."""
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for folder in MAY_IMPORT:
        assert f"`{folder.replace('.', '/')}/`" in architecture, folder


def test_the_hosts_and_ranks_load_nothing_of_the_sdk() -> None:
    """Importing the host runtime's entry and the rank bootstrap loads no module of ``smlaunch.sdk``:
    the ``smlaunch`` package they pass through is lazy, so a rank pays nothing for the SDK."""
    code = (
        "import json, sys, smlaunch.runtime.__main__, smlaunch.rank.boot; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('smlaunch.sdk'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
