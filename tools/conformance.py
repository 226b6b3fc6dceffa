"""Run a conformance corpus of public SageMaker training examples on ``LocalSession()``.

``python tools/conformance.py CORPUS [CASE ...]`` runs every case of the corpus directory (or the
ones named), one at a time, and prints one line per case, ``name: ok``, ``name: FAILS - reason`` or
``name: SKIPPED - reason``, then ``conformance: P/T pass``. See ``docs/conformance.md``.

A case is a directory holding ``case.json`` (the estimator's arguments as the example passes them,
and what must come out), ``make_data.py`` (``python make_data.py OUT`` writes synthetic input, one
subdirectory per channel) and ``src/`` (the example's code, unchanged). For each case the runner:

1. decides, before running anything, whether this machine can run it at all: every module the
   entry point (and the local modules it imports) or ``make_data.py`` imports outside a
   ``try``/``except ImportError`` must be importable (or shimmed by smlaunch), MPI cases need
   ``mpirun``, and a ``requirements.txt`` that is not already satisfied needs a reachable package
   index. If not, the case is SKIPPED with that reason;
2. in a child process (its own session, so a stuck case can be killed whole): writes the data,
   builds the estimator (``framework`` -> ``PyTorch``/``TensorFlow``/``Estimator``, from ``smlaunch``)
   from case.json's ``estimator`` with paths made absolute and placeholders filled,
   ``local_adaptation`` merged in (the process executor never runs the example's image),
   ``sagemaker_session=LocalSession(root=<work>/jobs, **local_session)`` and
   ``output_path=file://<work>/out``; calls
   ``fit({channel: file://<work>/<dir> or TrainingInput(...)})`` without waiting and polls until the
   job ends or the case's time runs out (then the job is stopped and the case FAILS);
3. checks the status against ``expect.outcome`` (``Refused``: construction or ``fit()`` raised
   smlaunch's configuration/unsupported-feature error and no job was created), the members of
   ``model.tar.gz`` against ``expect.model_files``, the TensorFlow ``model_dir`` against
   ``expect.model_dir_files`` and the job log against ``expect.log_contains``.

``--baseline FILE`` compares with a committed table of results: the exit status is 1 only when a
case the baseline records as ``ok`` now FAILS (a regression); ``--update`` rewrites that table and
the result table of ``docs/conformance.md``. Without ``--baseline`` any FAILS gives exit status 1.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).resolve().parent / "conformance_baseline.json"
DOC = ROOT / "docs" / "conformance.md"
TABLE_START = "<!-- conformance-table: start (written by tools/conformance.py --update) -->"
TABLE_END = "<!-- conformance-table: end -->"

OK, FAILS, SKIPPED = "ok", "FAILS", "SKIPPED"
DEFAULT_TIMEOUT = 900.0
# After the case's own deadline the child stops the job and reports; this is how long the parent
# then waits for it before killing the child's whole session.
KILL_GRACE = 120.0
FRAMEWORKS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "generic": "Estimator"}
# Keys of ``estimator`` that name files relative to the case directory.
PATH_KEYS = ("source_dir", "dependencies")
IMAGE_KEYS = ("image_uri", "image_name")
INDEX_TIMEOUT = 10.0


@dataclass(frozen=True)
class Result:
    """One case's outcome: ``ok``, ``FAILS`` or ``SKIPPED``, and why (empty for ``ok``)."""

    name: str
    status: str
    reason: str = ""

    def line(self) -> str:
        """``name: ok``, ``name: FAILS - reason`` or ``name: SKIPPED - reason``."""
        return f"{self.name}: {self.status}" + (f" - {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Case:
    """A case directory and its parsed ``case.json``."""

    path: Path
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def expect(self) -> Mapping[str, Any]:
        return self.spec.get("expect") or {}

    @property
    def source(self) -> str:
        """``repo: path`` of the example, for the result table."""
        source = self.spec.get("source") or {}
        return f"{source.get('repo', '?')}: {source.get('path', '?')}"

    def estimator_kwargs(self) -> dict[str, Any]:
        """``estimator`` with ``local_adaptation`` and ``sdk_v2_adaptation`` merged in, as written
        (paths relative, placeholders unfilled)."""
        kwargs = dict(self.spec.get("estimator") or {})
        adaptation = (self.spec.get("local_adaptation") or {}).get("estimator")
        if adaptation:
            for key in IMAGE_KEYS:  # the process executor runs the image's program without the image
                kwargs.pop(key, None)
            kwargs.update(adaptation)
        kwargs.update((self.spec.get("sdk_v2_adaptation") or {}).get("estimator") or {})
        return kwargs


def load_cases(corpus: Path, names: Iterable[str] = ()) -> list[Case]:
    """The cases of ``corpus`` (every subdirectory with a ``case.json``), or only ``names``."""
    wanted = list(names)
    # absolute: each case runs in a child whose working directory is the case's work directory
    found = {p.parent.name: p.parent for p in sorted(corpus.resolve().glob("*/case.json"))}
    unknown = [name for name in wanted if name not in found]
    if unknown:
        raise SystemExit(f"conformance: no case {', '.join(unknown)} in {corpus} (cases: {', '.join(found)})")
    return [Case(found[n], json.loads((found[n] / "case.json").read_text())) for n in wanted or found]


# --- Environment checks (decided before anything runs) --------------------------------------------


def environment_problem(case: Case) -> str | None:
    """Why this machine cannot run ``case`` (a missing module, MPI, package index), or None."""
    if case.expect.get("outcome") == "Refused":
        return None  # refused before anything runs: the script's needs do not matter
    kwargs = case.estimator_kwargs()
    modules = required_modules(case, kwargs)
    missing = sorted(m for m in modules if not module_available(m))
    if missing:
        return f"needs Python module(s) not installed here: {', '.join(missing)}"
    if modules & {"tensorflow", "keras"} and keras_2_image(case, kwargs) and not module_available("tf_keras"):
        return (
            f"needs tf-keras: the TensorFlow {kwargs['framework_version']} image ships Keras 2 as tf.keras "
            "(pip install --no-deps 'tf-keras==<TensorFlow major.minor>.*')"
        )
    if uses_mpi(kwargs) and shutil.which("mpirun") is None:
        return "needs OpenMPI's mpirun (distribution uses MPI), which is not on PATH"
    requirements = code_root(case, kwargs) / "requirements.txt"
    if requirements.is_file():
        return requirements_problem(requirements)
    return None


def keras_2_image(case: Case, kwargs: Mapping[str, Any]) -> bool:
    """Whether the case runs on a SageMaker TensorFlow image whose ``tf.keras`` is Keras 2, which
    smlaunch emulates with ``tf-keras`` (``smlaunch/sdk/backends/emulated/image_env.py``)."""
    from smlaunch.sdk.backends.emulated.image_env import KERAS_3_SINCE

    if case.spec.get("framework") != "tensorflow" or kwargs.get("image_uri"):
        return False
    parts = str(kwargs.get("framework_version") or "").split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) < KERAS_3_SINCE
    except ValueError:
        return False


def code_root(case: Case, kwargs: Mapping[str, Any]) -> Path:
    """The directory the job's code comes from: ``source_dir``, else the entry point's directory,
    else ``src/`` (code that reaches the job through a ``sagemaker_submit_directory`` archive)."""
    if kwargs.get("source_dir"):
        return case.path / str(kwargs["source_dir"])
    if kwargs.get("entry_point"):
        return (case.path / str(kwargs["entry_point"])).parent
    return case.path / "src"


def entry_script(case: Case, kwargs: Mapping[str, Any]) -> Path | None:
    """The entry point's file, or None when the code comes from elsewhere (a sourcedir URI)."""
    entry = kwargs.get("entry_point")
    if entry:
        return (
            code_root(case, kwargs) / Path(str(entry)).name if kwargs.get("source_dir") else case.path / entry
        )
    program = (kwargs.get("hyperparameters") or {}).get("sagemaker_program")
    if program:  # the generic Estimator + framework image pattern: the code is src/ packed
        return code_root(case, kwargs) / str(program).strip('"')
    return None


def required_modules(case: Case, kwargs: Mapping[str, Any]) -> set[str]:
    """Top-level modules the job's code and ``make_data.py`` import unconditionally, other than the
    standard library and the modules the job's own code (source dir, dependencies) provides."""
    roots = [code_root(case, kwargs), *(case.path / str(d) for d in kwargs.get("dependencies") or [])]
    local = {p.stem for r in roots if r.is_dir() for p in r.glob("*.py")} | {
        p.name for r in roots if r.is_dir() for p in r.iterdir() if (p / "__init__.py").is_file()
    }
    local |= {Path(r).stem for r in roots if r.is_file()}
    entry = entry_script(case, kwargs)
    if entry is None or entry.suffix != ".py":  # a shell entry point runs any of its directory's scripts
        scripts = [p for r in roots if r.is_dir() for p in r.glob("*.py")]
    else:
        scripts = [entry]
    needed: set[str] = set()
    seen: set[Path] = set()
    while scripts:
        script = scripts.pop()
        if script in seen or not script.is_file():
            continue
        seen.add(script)
        for module in unguarded_imports(script):
            if module in local:  # follow the job's own modules: what they import is needed too
                scripts.extend(r / f"{module}.py" for r in roots if r.is_dir())
                scripts.extend(r / module / "__init__.py" for r in roots if r.is_dir())
            else:
                needed.add(module)
    make_data = case.path / "make_data.py"
    if make_data.is_file():
        needed |= unguarded_imports(make_data)
    return {m for m in needed if m not in sys.stdlib_module_names and m != "__future__"}


def unguarded_imports(script: Path) -> set[str]:
    """Top-level names of the modules ``script`` imports outside ``try`` blocks that catch
    ``ImportError`` (an optional import is not a requirement). A file that does not parse needs
    nothing here: the job reports its syntax error itself."""
    try:
        tree = ast.parse(script.read_bytes(), filename=str(script))
    except (SyntaxError, ValueError):
        return set()
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            guarded.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(k, ast.Name) and k.id in {"ImportError", "ModuleNotFoundError", "Exception"} for k in kinds
    )


def module_available(name: str) -> bool:
    """Whether the ranks can import ``name``: this interpreter has it, or smlaunch shims it (the
    ranks run this interpreter, with ``smlaunch/rank/compat`` on their path when the real library is
    absent)."""
    try:
        if importlib.util.find_spec(name) is not None:
            return True
    except (ImportError, ValueError):
        pass
    from smlaunch.runtime.env_vars import compat_dir, horovod_compat_dir

    return any(root is not None and (root / name).is_dir() for root in (compat_dir(), horovod_compat_dir()))


def uses_mpi(kwargs: Mapping[str, Any]) -> bool:
    """Whether the job starts its ranks with ``mpirun``: ``distribution={'mpi': ...}`` or the raw
    ``sagemaker_mpi_enabled`` hyperparameter."""
    mpi = (kwargs.get("distribution") or kwargs.get("distributions") or {}).get("mpi") or {}
    raw = (kwargs.get("hyperparameters") or {}).get("sagemaker_mpi_enabled")
    return bool(mpi.get("enabled")) or str(raw).strip('"').lower() == "true"


def requirements_problem(requirements: Path) -> str | None:
    """Why ``requirements.txt`` cannot be installed here, or None: nothing when every requirement
    is already satisfied by this interpreter, else the package index must serve the first one that
    is not."""
    from packaging.requirements import InvalidRequirement, Requirement

    unmet: list[str] = []
    for line in requirements.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):  # pip options (-r, -e, --index-url): pip's business
            continue
        try:
            requirement = Requirement(text)
            version = importlib.metadata.version(requirement.name)
        except (InvalidRequirement, importlib.metadata.PackageNotFoundError):
            unmet.append(text)
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            unmet.append(text)
    if not unmet:
        return None
    index = package_index()
    project = unmet[0].split(";")[0]
    for mark in "[<>=!~ @":
        project = project.split(mark)[0]
    if index_serves(index, project):
        return None
    needs = ", ".join(unmet)
    return f"requirements.txt needs {needs} from a package index, and {index} does not serve {project}"


def package_index() -> str:
    """The index pip would use: ``PIP_INDEX_URL``, else pip's configured ``index-url``, else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        configured = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        configured = None
    if configured is not None and configured.returncode == 0 and configured.stdout.strip():
        return configured.stdout.strip()
    return "https://pypi.org/simple"


def index_serves(index: str, project: str) -> bool:
    """Whether the simple index at ``index`` has a page for ``project`` (a short HTTP request)."""
    url = f"{index.rstrip('/')}/{project.lower().replace('_', '-')}/"
    if url.startswith("file://"):  # a local mirror: urllib cannot open a directory
        return Path(url.removeprefix("file://")).is_dir()
    try:
        with urllib.request.urlopen(url, timeout=INDEX_TIMEOUT) as response:
            return bool(response.status < 400)
    except (urllib.error.URLError, OSError, ValueError):
        return False


# --- Running one case (in a child process) ---------------------------------------------------------


def fill(value: Any, placeholders: Mapping[str, str]) -> Any:
    """``value`` with every ``{name}`` placeholder in its strings replaced."""
    if isinstance(value, str):
        for key, text in placeholders.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, list):
        return [fill(v, placeholders) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, placeholders) for k, v in value.items()}
    return value


def build_kwargs(case: Case, work: Path) -> dict[str, Any]:
    """The estimator's keyword arguments for ``case``: paths absolute, placeholders filled, the
    runner's ``output_path``; ``sourcedir.tar.gz`` packed from ``src/`` when the case asks for it."""
    kwargs = case.estimator_kwargs()
    output_path = f"file://{work / 'out'}"
    placeholders = {"work": str(work), "output_path": output_path}
    if "{sourcedir_tar_gz}" in json.dumps(kwargs):
        tarball = work / "sourcedir.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            for item in sorted((case.path / "src").iterdir()):
                tar.add(item, arcname=item.name)
        placeholders["sourcedir_tar_gz"] = f"file://{tarball}"
    kwargs = fill(kwargs, placeholders)
    if kwargs.get("source_dir"):
        kwargs["source_dir"] = str(case.path / kwargs["source_dir"])
    elif kwargs.get("entry_point"):
        kwargs["entry_point"] = str(case.path / kwargs["entry_point"])
    if kwargs.get("dependencies"):
        kwargs["dependencies"] = [str(case.path / d) for d in kwargs["dependencies"]]
    kwargs["output_path"] = output_path
    return kwargs


def build_inputs(case: Case, work: Path) -> dict[str, Any] | None:
    """``fit()``'s argument: channel -> ``file://`` URI or ``TrainingInput``; None when empty."""
    from smlaunch import TrainingInput

    inputs: dict[str, Any] = {}
    for channel, value in (case.spec.get("inputs") or {}).items():
        if isinstance(value, str):
            inputs[channel] = f"file://{work / value}"
        else:
            fields = dict(value)
            fields["s3_data"] = f"file://{work / fields['s3_data']}"
            inputs[channel] = TrainingInput(**fields)
    return inputs or None


def run_case(case: Case, work: Path, timeout: float) -> Result:
    """Run ``case`` in this process (the child's half of :func:`run_isolated`)."""
    deadline = time.monotonic() + timeout
    data = subprocess.run(
        [sys.executable, str(case.path / "make_data.py"), str(work / "data")],
        capture_output=True,
        text=True,
        timeout=max(timeout, 1),
    )
    if data.returncode != 0:
        return Result(case.name, FAILS, f"make_data.py exited {data.returncode}: {last_line(data.stderr)}")

    import smlaunch
    from smlaunch import LocalSession

    outcome = case.expect.get("outcome", "Completed")
    refusals = (smlaunch.ConfigurationError, smlaunch.UnsupportedFeatureError)
    session = LocalSession(root=work / "jobs", **(case.spec.get("local_session") or {}))
    framework = FRAMEWORKS.get(str(case.spec.get("framework")))
    if framework is None:
        return Result(
            case.name,
            FAILS,
            f"case.json: framework {case.spec.get('framework')!r} is not one of {sorted(FRAMEWORKS)}",
        )
    est: Any = None
    try:
        est = getattr(smlaunch, framework)(sagemaker_session=session, **build_kwargs(case, work))
        est.fit(build_inputs(case, work), wait=False)
    except refusals as error:
        if outcome != "Refused":
            return Result(case.name, FAILS, f"refused: {type(error).__name__}: {one_line(error)}")
        print(f"refused: {type(error).__name__}: {error}", flush=True)
        named = refused_argument(error, case.estimator_kwargs())
        if named is None:
            return Result(
                case.name, FAILS, f"refused without naming an argument the case passes: {one_line(error)}"
            )
        if est is not None and est.latest_training_job is not None:
            return Result(
                case.name, FAILS, f"refused only after job {est.latest_training_job.name} was created"
            )
        return Result(case.name, OK)
    except Exception as error:  # the case's outcome, whatever the exception: report it
        return Result(
            case.name,
            FAILS,
            f"{'fit()' if est else 'constructor'} raised {type(error).__name__}: {one_line(error)}",
        )
    job = est.latest_training_job
    if outcome == "Refused":
        status = wait_for(job, deadline)
        return Result(
            case.name, FAILS, f"expected a refusal before anything runs; the job ran and ended {status}"
        )
    status = wait_for(job, deadline)
    if status is None:
        return Result(case.name, FAILS, f"timed out after {timeout:.0f} s (job {job.name} stopped)")
    description = job.describe()
    log = "\n".join(job.backend.log_lines(job.name))
    (work / "job.log").write_text(log)
    problems = check_outcome(case, status, description, log)
    return Result(case.name, FAILS, "; ".join(problems)) if problems else Result(case.name, OK)


def refused_argument(error: Exception, kwargs: Mapping[str, Any]) -> str | None:
    """The argument of ``kwargs`` that a refusal names (its ``field``, else its message), or None:
    a refusal that names an argument the user never wrote is the launcher's confusion, not a
    documented limit."""
    field = getattr(error, "field", None)
    if isinstance(field, str):  # "instance_groups[0].instance_type", "hyperparameters key='x'"
        root = re.match(r"\w*", field)
        return root.group(0) if root and root.group(0) in kwargs else None
    return next((key for key in kwargs if key in str(error)), None)


def wait_for(job: Any, deadline: float) -> str | None:
    """The job's final status; None when ``deadline`` passed first (the job is then stopped)."""
    while time.monotonic() < deadline:
        status = str(job.describe()["TrainingJobStatus"])
        if status in {"Completed", "Failed", "Stopped"}:
            return status
        time.sleep(1.0)
    job.stop()
    for _ in range(120):
        if job.describe()["TrainingJobStatus"] in {"Completed", "Failed", "Stopped"}:
            break
        time.sleep(1.0)
    return None


def check_outcome(case: Case, status: str, description: Mapping[str, Any], log: str) -> list[str]:
    """What ``case`` expects and the finished job does not have (empty: the case passes)."""
    expect = case.expect
    problems = []
    outcome = expect.get("outcome", "Completed")
    if status != outcome:
        why = description.get("FailureReason")
        problems.append(f"ended {status}, expected {outcome}" + (f" ({one_line(why)})" if why else ""))
    patterns = expect.get("model_files") or []
    if patterns:
        members = archive_members(description)
        if members is None:
            problems.append("no model.tar.gz")
        else:
            missing = [p for p in patterns if not any(fnmatch.fnmatch(m, p) for m in members)]
            if missing:
                has = ", ".join(sorted(members)[:8]) or "nothing"
                problems.append(f"model.tar.gz lacks {', '.join(missing)} (has {has})")
    model_dir_patterns = expect.get("model_dir_files") or []
    if model_dir_patterns:
        problems.extend(model_dir_problems(description, model_dir_patterns))
    absent = [text for text in expect.get("log_contains") or [] if text not in log]
    if absent:
        problems.append(f"job log lacks {', '.join(repr(t) for t in absent)}")
    return problems


def archive_members(description: Mapping[str, Any]) -> list[str] | None:
    """Member names of the job's ``model.tar.gz`` (``./`` stripped), or None when there is none."""
    uri = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts") or ""
    path = Path(uri.removeprefix("file://"))
    if not uri.startswith("file://") or not path.is_file():
        return None
    with tarfile.open(path) as tar:
        return [name.removeprefix("./") for name in tar.getnames()]


def model_dir_problems(description: Mapping[str, Any], patterns: list[str]) -> list[str]:
    """What the TensorFlow ``model_dir`` (the ``model_dir`` hyperparameter) lacks of ``patterns``."""
    raw = (description.get("HyperParameters") or {}).get("model_dir")
    if raw is None:
        return ["no model_dir hyperparameter"]
    try:
        model_dir = str(json.loads(raw))
    except ValueError:
        model_dir = raw
    if not model_dir.startswith("file://"):
        return [f"model_dir {model_dir} is not a file:// path"]
    root = Path(model_dir.removeprefix("file://"))
    found = [str(p.relative_to(root)) for p in root.rglob("*")] if root.is_dir() else []
    missing = [p for p in patterns if not any(fnmatch.fnmatch(f, p) for f in found)]
    return [f"model_dir {root} lacks {', '.join(missing)}"] if missing else []


def one_line(value: object) -> str:
    """``value`` as one line, at most 300 characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= 300 else text[:297] + "..."


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return one_line(lines[-1]) if lines else "(no output)"


# --- Driving the cases -----------------------------------------------------------------------------


def run_isolated(case: Case, work: Path, timeout: float) -> Result:
    """Run ``case`` in a child process of its own session; its output goes to ``work/run.log``."""
    work.mkdir(parents=True, exist_ok=True)
    result_file = work / "result.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(case.path),
        str(work),
        str(timeout),
    ]
    with open(work / "run.log", "wb") as log:
        child = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work
        )
        try:
            child.wait(timeout=timeout + KILL_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return Result(
                case.name, FAILS, f"runner killed after {timeout + KILL_GRACE:.0f} s (see {work}/run.log)"
            )
    if result_file.is_file():
        return Result(**json.loads(result_file.read_text()))
    tail = last_line((work / "run.log").read_text(errors="replace"))
    return Result(case.name, FAILS, f"runner exited {child.returncode} without a result: {tail}")


def child_main(case_dir: str, work: str, timeout: str) -> int:
    """The child's entry: run one case and write its :class:`Result` to ``work/result.json``."""
    case = load_cases(Path(case_dir).parent, [Path(case_dir).name])[0]
    try:
        result = run_case(case, Path(work), float(timeout))
    except Exception as error:  # the runner's own failure still reports as this case's line
        result = Result(case.name, FAILS, f"runner error {type(error).__name__}: {one_line(error)}")
    Path(work, "result.json").write_text(json.dumps(result.__dict__))
    return 0


def run_all(cases: list[Case], work_root: Path, timeout: float) -> Iterator[Result]:
    """Each case's result, one case at a time."""
    for case in cases:
        problem = environment_problem(case)
        if problem:
            yield Result(case.name, SKIPPED, problem)
        else:
            yield run_isolated(case, work_root / case.name, timeout)


def regressions(results: list[Result], baseline: Mapping[str, Any]) -> list[str]:
    """The cases the baseline records as ``ok`` that now FAIL."""
    return [r.name for r in results if r.status == FAILS and (baseline.get(r.name) or {}).get("result") == OK]


def write_baseline(results: list[Result], cases: list[Case], path: Path, doc: Path) -> None:
    """Record ``results`` in ``path`` (merged over what it held) and in ``doc``'s result table."""
    recorded: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    sources = {case.name: case.source for case in cases}
    for result in results:
        recorded[result.name] = {
            "source": sources[result.name],
            "result": result.status,
            "reason": result.reason,
        }
    path.write_text(json.dumps(dict(sorted(recorded.items())), indent=2) + "\n")
    if doc.is_file():
        text = doc.read_text()
        head, found_start, rest = text.partition(TABLE_START)
        _, found_end, tail = rest.partition(TABLE_END)
        if not (found_start and found_end):
            raise SystemExit(f"conformance: {doc} has no {TABLE_START} ... {TABLE_END} block to update")
        doc.write_text(head + TABLE_START + "\n" + result_table(recorded) + TABLE_END + tail)


def result_table(recorded: Mapping[str, Any]) -> str:
    """The Markdown table of recorded results: case, source, result, reason."""
    rows = ["| case | source | result | reason |", "|---|---|---|---|"]
    for name, entry in recorded.items():
        reason = entry.get("reason", "").replace("|", "\\|")
        rows.append(f"| `{name}` | {entry.get('source', '')} | {entry.get('result', '')} | {reason} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring and ``--help``."""
    sys.path.insert(0, str(ROOT))  # jobs must run this checkout's smlaunch, not an installed copy
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["--child"]:
        return child_main(*args[1:4])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="the corpus directory (one subdirectory per case)")
    parser.add_argument("cases", nargs="*", help="run only these cases (default: all)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case (default %(default)s)"
    )
    parser.add_argument(
        "--work", type=Path, help="keep each case's data, jobs and logs here (default: a temporary directory)"
    )
    parser.add_argument(
        "--baseline", type=Path, help="fail only when a case this file records as ok now FAILS"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help=f"record the results in --baseline (default {BASELINE.name}) and docs/{DOC.name}",
    )
    options = parser.parse_args(args)
    if not (options.corpus / "").is_dir():
        parser.error(f"corpus {options.corpus} is not a directory")
    cases = load_cases(options.corpus, options.cases)
    work_root = options.work or Path(tempfile.mkdtemp(prefix="conformance-"))
    results = []
    for result in run_all(cases, work_root.resolve(), options.timeout):
        print(result.line(), flush=True)
        results.append(result)
    passed = sum(r.status == OK for r in results)
    print(f"conformance: {passed}/{len(results)} pass", flush=True)
    if options.work is None:
        shutil.rmtree(work_root, ignore_errors=True)
    baseline_path = options.baseline or BASELINE
    if options.update:
        write_baseline(results, cases, baseline_path, DOC)
    if options.baseline is not None:
        recorded = json.loads(options.baseline.read_text()) if options.baseline.is_file() else {}
        lost = regressions(results, recorded)
        if lost:
            print(f"conformance: passed before, FAIL now: {', '.join(lost)}", flush=True)
        return 1 if lost else 0
    return 1 if any(r.status == FAILS for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
