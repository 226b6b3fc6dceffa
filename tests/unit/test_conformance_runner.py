"""``tools/conformance.py``, the corpus runner, on a tiny corpus written here: a case that passes, one
that fails, one refused as documented, one this machine cannot run; plus its pure helpers."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from smlaunch import LocalSession

ROOT = Path(__file__).resolve().parents[2]


def _runner() -> ModuleType:  # tools/ is not a package: load the script by path
    spec = importlib.util.spec_from_file_location("conformance", ROOT / "tools" / "conformance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


conformance = _runner()

MAKE_DATA = """\
import sys
from pathlib import Path

out = Path(sys.argv[1]) / "train"
out.mkdir(parents=True)
(out / "rows.csv").write_text("1,2\\n3,4\\n")
"""


def _case(corpus: Path, name: str, spec: dict[str, Any], files: dict[str, str]) -> Path:
    case = corpus / name
    for relative, text in files.items():
        (case / relative).parent.mkdir(parents=True, exist_ok=True)
        (case / relative).write_text(textwrap.dedent(text))
    (case / "make_data.py").write_text(MAKE_DATA)
    spec = {"source": {"repo": "example/repo", "path": f"{name}/train.py"}, **spec}
    (case / "case.json").write_text(json.dumps(spec))
    return case


def _estimator(**extra: Any) -> dict[str, Any]:
    return {
        "entry_point": "train.py",
        "source_dir": "src",
        "role": "SageMakerRole",
        "instance_count": 1,
        "instance_type": "local",
        **extra,
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    _case(
        root,
        "passes",
        {
            "framework": "generic",
            "estimator": _estimator(hyperparameters={"greeting": "hello"}),
            "inputs": {"train": "data/train"},
            "expect": {"outcome": "Completed", "model_files": ["model.txt"], "log_contains": ["rows: 2"]},
        },
        {
            "src/train.py": """\
                import os
                from pathlib import Path

                rows = Path(os.environ["SM_CHANNEL_TRAIN"], "rows.csv").read_text().splitlines()
                print("rows:", len(rows))
                Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text(os.environ["SM_HP_GREETING"])
                """
        },
    )
    _case(
        root,
        "fails",
        {
            "framework": "generic",
            "estimator": _estimator(),
            "inputs": {},
            "expect": {"outcome": "Completed", "model_files": []},
        },
        {"src/train.py": "raise RuntimeError('the script broke')\n"},
    )
    _case(
        root,
        "refused",
        {
            "framework": "generic",
            "estimator": _estimator(instance_count=0),
            "inputs": {},
            "expect": {"outcome": "Refused", "model_files": []},
        },
        {"src/train.py": "print('never runs')\n"},
    )
    _case(
        root,
        "needs-a-module",
        {
            "framework": "generic",
            "estimator": _estimator(),
            "inputs": {},
            "expect": {"outcome": "Completed", "model_files": []},
        },
        {"src/train.py": "import helper\n", "src/helper.py": "import no_such_module_for_conformance\n"},
    )
    return root


@pytest.fixture(scope="module")
def run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The runner's command line over the tiny corpus, with a baseline that says every case passed."""
    work = tmp_path_factory.mktemp("work")
    baseline = work / "baseline.json"
    baseline.write_text(json.dumps({name: {"result": "ok"} for name in ("passes", "fails", "refused")}))
    out = work / "stdout.txt"
    with open(out, "w") as stream:
        original, sys.stdout = sys.stdout, stream
        try:
            # relative, as CI passes its corpus: the cases run with another working directory
            args = [os.path.relpath(corpus), "--work", str(work / "cases"), "--baseline", str(baseline)]
            status = conformance.main(args)
        finally:
            sys.stdout = original
    return {"status": status, "lines": out.read_text().splitlines(), "work": work / "cases"}


@pytest.mark.slow
def test_one_line_per_case_and_the_total(run: dict[str, Any]) -> None:
    lines = run["lines"]
    assert lines[0] == "fails: FAILS - ended Failed, expected Completed (" + lines[0].split("(", 1)[1]
    assert "RuntimeError: the script broke" in lines[0]
    assert lines[1] == (
        "needs-a-module: SKIPPED - needs Python module(s) not installed here: no_such_module_for_conformance"
    )
    assert lines[2] == "passes: ok"
    assert lines[3] == "refused: ok"
    assert lines[4] == "conformance: 2/4 pass"


@pytest.mark.slow
def test_a_skipped_case_is_decided_before_anything_runs(run: dict[str, Any]) -> None:
    assert not (run["work"] / "needs-a-module").exists()
    assert not list((run["work"] / "refused" / "jobs").glob("*/state.json"))


@pytest.mark.slow
def test_a_case_that_passed_before_and_fails_now_fails_the_run(run: dict[str, Any]) -> None:
    assert run["status"] == 1
    assert run["lines"][-1] == "conformance: passed before, FAIL now: fails"


def test_the_baseline_only_counts_cases_that_passed_before() -> None:
    results = [conformance.Result("a", "FAILS", "x"), conformance.Result("b", "FAILS", "y")]
    baseline = {"a": {"result": "FAILS"}, "b": {"result": "ok"}}
    assert conformance.regressions(results, baseline) == ["b"]
    assert conformance.regressions([conformance.Result("b", "SKIPPED", "no index")], baseline) == []


def test_update_writes_the_baseline_and_the_docs_table(corpus: Path, tmp_path: Path) -> None:
    cases = conformance.load_cases(corpus, ["passes", "fails"])
    doc = tmp_path / "conformance.md"
    doc.write_text(f"intro\n\n{conformance.TABLE_START}\nold table\n{conformance.TABLE_END}\n\nafter\n")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"other": {"source": "s", "result": "SKIPPED", "reason": "r"}}))
    results = [conformance.Result("passes", "ok"), conformance.Result("fails", "FAILS", "a | b")]
    conformance.write_baseline(results, cases, baseline, doc)
    recorded = json.loads(baseline.read_text())
    assert list(recorded) == ["fails", "other", "passes"]
    assert recorded["passes"] == {"source": "example/repo: passes/train.py", "result": "ok", "reason": ""}
    text = doc.read_text()
    assert "old table" not in text and text.startswith("intro") and text.endswith("after\n")
    assert "| `fails` | example/repo: fails/train.py | FAILS | a \\| b |" in text


def test_optional_imports_are_not_requirements(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """\
            import os, numpy.linalg
            from tensorflow import keras
            from . import sibling
            try:
                import horovod.torch as hvd
            except ImportError:
                hvd = None
            def main():
                import pandas
            """
        )
    )
    assert conformance.unguarded_imports(script) == {"os", "numpy", "tensorflow", "pandas"}


def test_required_modules_follow_the_jobs_own_modules(corpus: Path) -> None:
    case = conformance.load_cases(corpus, ["needs-a-module"])[0]
    assert conformance.required_modules(case, case.estimator_kwargs()) == {"no_such_module_for_conformance"}


def test_a_requirements_file_needs_an_index_that_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\npytest\n")
    assert conformance.requirements_problem(requirements) is None  # installed already: no index needed
    requirements.write_text("no-such-project-for-conformance==1.0\n")
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path}/simple")
    assert conformance.requirements_problem(requirements) == (
        "requirements.txt needs no-such-project-for-conformance==1.0 from a package index, and "
        f"file://{tmp_path}/simple does not serve no-such-project-for-conformance"
    )
    (tmp_path / "simple" / "no-such-project-for-conformance").mkdir(parents=True)
    (tmp_path / "simple" / "no-such-project-for-conformance" / "index.html").write_text("<html></html>")
    assert conformance.requirements_problem(requirements) is None


def test_paths_and_placeholders(corpus: Path, tmp_path: Path) -> None:
    case = conformance.Case(
        corpus / "passes",
        {
            "estimator": {
                "image_uri": "<account>.dkr.ecr.<region>.amazonaws.com/x:latest",
                "checkpoint_s3_uri": "file://{work}/checkpoints",
                "hyperparameters": {"sagemaker_submit_directory": '"{sourcedir_tar_gz}"'},
                "dependencies": ["src/train.py"],
            },
            "local_adaptation": {"estimator": {"entry_point": "train.py", "source_dir": "src"}},
        },
    )
    kwargs = conformance.build_kwargs(case, tmp_path)
    assert "image_uri" not in kwargs  # the process executor runs the image's program without it
    assert kwargs["source_dir"] == str(corpus / "passes" / "src") and kwargs["entry_point"] == "train.py"
    assert kwargs["dependencies"] == [str(corpus / "passes" / "src" / "train.py")]
    assert kwargs["checkpoint_s3_uri"] == f"file://{tmp_path}/checkpoints"
    assert kwargs["output_path"] == f"file://{tmp_path}/out"
    assert kwargs["hyperparameters"]["sagemaker_submit_directory"] == f'"file://{tmp_path}/sourcedir.tar.gz"'
    assert (tmp_path / "sourcedir.tar.gz").is_file()


def test_a_refusal_must_name_an_argument_the_case_passes() -> None:
    from smlaunch.sdk.errors import ConfigurationError, UnsupportedFeatureError

    kwargs = {"train_instance_type": "ml.c4.xlarge", "instance_groups": []}
    assert conformance.refused_argument(ConfigurationError("instance_type", None, "missing"), kwargs) is None
    named = ConfigurationError("instance_groups[0].instance_type", "x", "no")
    assert conformance.refused_argument(named, kwargs) == "instance_groups"
    feature = UnsupportedFeatureError("instance_groups (heterogeneous clusters)", "one instance type")
    assert conformance.refused_argument(feature, kwargs) == "instance_groups"
    keyed = ConfigurationError("hyperparameters key='sagemaker_program'", "x", "reserved")
    assert conformance.refused_argument(keyed, {"hyperparameters": {}}) == "hyperparameters"


def test_mpi_cases_are_recognised() -> None:
    assert conformance.uses_mpi({"distribution": {"mpi": {"enabled": True}}})
    assert conformance.uses_mpi({"distributions": {"mpi": {"enabled": True}}})
    assert conformance.uses_mpi({"hyperparameters": {"sagemaker_mpi_enabled": True}})
    assert not conformance.uses_mpi({"distribution": {"parameter_server": {"enabled": True}}})


def test_a_keras_2_image_needs_tf_keras(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "module_available", lambda module: module != "tf_keras")
    estimator = _estimator(framework_version="2.14.1", py_version="py310")
    spec = {"framework": "tensorflow", "estimator": estimator, "expect": {"outcome": "Completed"}}
    uses_keras = {"src/train.py": "import tensorflow as tf\n"}
    keras = conformance.Case(_case(tmp_path, "keras", spec, uses_keras), spec)
    assert conformance.environment_problem(keras) == (
        "needs tf-keras: the TensorFlow 2.14.1 image ships Keras 2 as tf.keras "
        "(pip install --no-deps 'tf-keras==<TensorFlow major.minor>.*')"
    )
    no_tf = conformance.Case(_case(tmp_path, "mpi", spec, {"src/train.py": "import json\n"}), spec)
    assert conformance.environment_problem(no_tf) is None  # a TF-image job that never imports Keras
    spec["estimator"] = {**estimator, "framework_version": "2.16"}
    assert conformance.environment_problem(conformance.Case(keras.path, spec)) is None


@pytest.mark.slow
def test_a_case_past_its_time_is_stopped_and_fails(tmp_path: Path) -> None:
    spec = {
        "framework": "generic",
        "estimator": _estimator(),
        "inputs": {},
        "expect": {"outcome": "Completed"},
    }
    path = _case(tmp_path / "corpus", "sleeps", spec, {"src/train.py": "import time\ntime.sleep(600)\n"})
    case = conformance.load_cases(path.parent, ["sleeps"])[0]
    result = conformance.run_isolated(case, tmp_path / "work", 3.0)
    assert result.status == "FAILS"
    assert result.reason.startswith("timed out after 3 s (job ") and result.reason.endswith(" stopped)")
    job_name = result.reason.split("(job ")[1].split()[0]
    description = LocalSession(root=tmp_path / "work" / "jobs").backend().describe(job_name)
    assert description["TrainingJobStatus"] in {"Stopped", "Failed"}
