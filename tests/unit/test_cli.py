"""``smlaunch plan``: the request printed equals ``plan()``; bad arguments exit 2 with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator import PyTorch
from estimator.cli import PlanSession, main


@pytest.fixture
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "src"


ARGS = [
    "plan",
    "--entry-point",
    "train.py",
    "--source-dir",
    "src",
    "--instance-type",
    "ml.p3.16xlarge",
    "--instance-count",
    "2",
    "--framework-version",
    "2.1.0",
    "--py-version",
    "py310",
    "--hyperparameters",
    '{"epochs": 10, "lr": 3e-5}',
    "--distribution",
    '{"smdistributed": {"dataparallel": {"enabled": true}}}',
    "--inputs",
    '{"train": "s3://b-1/t"}',
    "--region",
    "us-west-2",
    "--job-name",
    "cli-job",
]


def test_prints_the_request(src: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(ARGS) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = (
        PyTorch(
            entry_point="train.py",
            source_dir=str(src),
            instance_type="ml.p3.16xlarge",
            instance_count=2,
            framework_version="2.1.0",
            py_version="py310",
            role="SageMakerRole",
            hyperparameters={"epochs": 10, "lr": 3e-5},
            distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
            sagemaker_session=PlanSession("us-west-2", "123456789012"),
        )
        .plan({"train": "s3://b-1/t"}, job_name="cli-job")
        .to_request()
    )
    assert printed == json.loads(json.dumps(expected))
    assert printed["RoleArn"] == "arn:aws:iam::123456789012:role/SageMakerRole"
    assert printed["HyperParameters"]["sagemaker_distributed_dataparallel_enabled"] == "true"
    assert printed["AlgorithmSpecification"]["TrainingImage"].startswith("763104351884.dkr.ecr.us-west-2")


def test_account_bucket_and_local(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*ARGS, "--account", "111122223333", "--bucket", "my-bucket"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["OutputDataConfig"]["S3OutputPath"] == "s3://my-bucket/"
    assert printed["RoleArn"] == "arn:aws:iam::111122223333:role/SageMakerRole"
    assert (
        main(
            [
                "plan",
                "--entry-point",
                "train.py",
                "--source-dir",
                "src",
                "--instance-type",
                "local",
                "--framework-version",
                "2.1.0",
                "--py-version",
                "py310",
                "--root",
                str(tmp_path / "jobs"),
                "--job-name",
                "j",
                "--inputs",
                '"src"',
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert (
        json.loads(printed["HyperParameters"]["sagemaker_submit_directory"])
        == (tmp_path / "jobs").as_uri() + "/j/source/sourcedir.tar.gz"
    )
    assert printed["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == src.as_uri()
    assert not (tmp_path / "jobs").exists(), "a dry run writes nothing"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (["--instance-type", "ml.p3.16xlarg"], "did you mean 'ml.p3.16xlarge'"),
        (["--hyperparameters", "{epochs: 1}"], "--hyperparameters="),
        (
            ["--distribution", '{"mpi": {"enabled": true, "processes_per_host": 9}}'],
            "processes_per_host <= 8",
        ),
        (["--entry-point", "nope.py"], "entry_point='nope.py'"),
    ],
)
def test_bad_arguments_exit_2(
    src: Path, capsys: pytest.CaptureFixture, change: list[str], needle: str
) -> None:
    args = list(ARGS)
    index = args.index(change[0])
    args[index + 1] = change[1]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and needle in captured.err and "Fix:" in captured.err


@pytest.mark.parametrize(
    "command", ["run", "list", "describe", "logs", "stop", "metrics", "rm", "gc", "plan"]
)
def test_every_command_answers_help(command: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: smlaunch {command}")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["logs"])  # JOB missing
    assert exited.value.code == 2
    assert main(["run", "train.py", "--distribution", "horovod"]) == 2
    assert "--distribution='horovod': unknown distribution" in capsys.readouterr().err
    assert main(["gc", "--older-than", "7 days"]) == 2
    assert "pass a number and a unit: 7d" in capsys.readouterr().err
