"""``smlaunch plan``: the request printed equals ``plan()``; bad arguments exit 2 with the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smlaunch import PyTorch
from smlaunch.sdk.cli.main import main
from smlaunch.sdk.cli.run import PlanSession
from smlaunch.sdk.errors import ConfigurationError


@pytest.fixture
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "src"


ARGS = [
    "plan",
    "train.py",
    "--source-dir",
    "src",
    "--sagemaker",
    "--instance-type",
    "ml.p3.16xlarge",
    "--instance-count",
    "2",
    "--hp",
    "epochs=10",
    "--hp",
    "lr=3e-5",
    "--distribution",
    '{"smdistributed": {"dataparallel": {"enabled": true}}}',
    "--input",
    "train=s3://b-1/t",
    "--region",
    "us-west-2",
    "--job-name",
    "cli-job",
]
OLD_SPELLINGS = [  # the flags of earlier versions, still accepted
    "plan",
    "--entry-point",
    "train.py",
    "--source-dir",
    "src",
    "--sagemaker",
    "--instance-type",
    "ml.p3.16xlarge",
    "--instance-count",
    "2",
    "--hyperparameters",
    '{"epochs": 10, "lr": "3e-5"}',
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
            hyperparameters={"epochs": 10, "lr": "3e-5"},  # as typed: 3e-5 is not how JSON writes it
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
    assert printed["HyperParameters"]["lr"] == '"3e-5"'

    assert main(OLD_SPELLINGS) == 0
    assert json.loads(capsys.readouterr().out) == printed
    assert main(["run", "--dry-run", *ARGS[1:]]) == 0  # run --dry-run prints what plan prints
    assert json.loads(capsys.readouterr().out) == printed


def test_account_bucket_and_local(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*ARGS, "--account", "111122223333", "--bucket", "my-bucket"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["OutputDataConfig"]["S3OutputPath"] == "s3://my-bucket/"
    assert printed["RoleArn"] == "arn:aws:iam::111122223333:role/SageMakerRole"
    assert (
        main(
            [
                "plan",
                "train.py",
                "--source-dir",
                "src",
                "--store",
                str(tmp_path / "jobs"),
                "--job-name",
                "j",
                "--input",
                "training=src",
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
    ("flag", "bad"),
    [
        ("--hp", "epochs"),
        ("--input", "train"),
        ("--metric", "loss"),
        ("--environment", "{bad"),
        ("--inputs", "["),
    ],
)
def test_a_malformed_flag_value_is_shown_fixed_with_a_value_of_its_kind(flag: str, bad: str) -> None:
    import shlex

    from smlaunch.sdk.cli.run import json_arg, pairs

    parse = (
        (lambda text: pairs([text], flag))
        if flag in ("--hp", "--input", "--metric")
        else (lambda text: json_arg(text, flag))
    )
    with pytest.raises(ConfigurationError) as raised:
        parse(bad)
    fix = (raised.value.fix or "").partition("e.g. ")[2]
    written_flag, example = shlex.split(fix)  # the example as a shell passes it
    assert written_flag == flag
    parsed = parse(example)  # and it is a good value of that flag
    if flag == "--input":
        assert list(parsed.values()) == ["s3://my-bucket/train"]  # never --input epochs=10
    if flag == "--metric":
        assert list(parsed) == ["train:loss"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (["--instance-type", "ml.p3.16xlarg"], "did you mean 'ml.p3.16xlarge'"),
        (["--hp", "epochs"], "--hp='epochs': expected KEY=VALUE"),
        (
            ["--distribution", '{"mpi": {"enabled": true, "processes_per_host": 9}}'],
            "processes_per_host <= 8",
        ),
        (["plan", "nope.py"], "ENTRY_POINT='nope.py'"),
        (["--sagemaker", "--local"], "--region='us-west-2': applies to SageMaker only"),
    ],
)
def test_bad_arguments_exit_2(
    src: Path, capsys: pytest.CaptureFixture, change: list[str], needle: str
) -> None:
    args = list(ARGS)
    index = args.index(change[0])
    if change[0].startswith("--") and change[1].startswith("--"):
        args[index] = change[1]
    else:
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


def test_version_prints_the_distributions(capsys: pytest.CaptureFixture) -> None:
    from importlib import metadata

    try:
        installed = metadata.version("smlaunch")
    except metadata.PackageNotFoundError:
        pytest.skip("smlaunch is not installed (pip install -e .)")
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"smlaunch {installed}\n"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert main(["logs"]) == 2  # JOB missing
    assert (
        "give a job or --last, not both or neither. Fix: e.g. smlaunch logs --last" in capsys.readouterr().err
    )
    assert main(["describe", "bad_name"]) == 2
    assert main(["describe", "ftp:x"]) == 2
    assert "unknown place 'ftp'. Fix: write the job as NAME, local:NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["list", "--output", "yaml"])
    assert exited.value.code == 2
    assert main(["run", "train.py", "--distribution", "horovod"]) == 2
    assert "--distribution='horovod': unknown distribution" in capsys.readouterr().err
    assert main(["gc", "--older-than", "7 days"]) == 2
    assert "pass a number and a unit: 7d" in capsys.readouterr().err
    for flag in (["--output", "json"], ["--query", "TrainingJobName"]):  # would be ignored: refused
        assert main(["run", "train.py", *flag]) == 2
        assert capsys.readouterr().err.startswith(
            f"error: {flag[0]}='{flag[1]}': shapes the request --dry-run prints; run prints the job's name."
        )
    for command in (["list"], ["gc"], ["rm", "x"], ["describe", "x"]):  # a misspelt store: not empty
        assert main([*command, "--store", "/no/such/store"]) == 2
        assert capsys.readouterr().err == (
            "error: --store='/no/such/store': no such directory."
            " Fix: pass an existing job store, or leave --store out for the root setting's\n"
        )
    with pytest.raises(SystemExit) as exited:  # the command's usage, with its flags
        main(["describe", "--bogus", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: smlaunch describe ") and "--query JMESPATH" in err
    assert err.endswith("smlaunch describe: error: unrecognized arguments: --bogus\n")


@pytest.mark.parametrize(
    ("typed", "sent"),
    [
        ("10", 10),
        ("0.5", 0.5),
        ("true", True),
        ("[1, 2]", [1, 2]),
        ('"x"', "x"),
        ("1.10", "1.10"),  # JSON would print 1.1
        ("3e-5", "3e-5"),
        ("007", "007"),
        ("-0", "-0"),
        ("NaN", "NaN"),  # Python's JSON extension, not JSON
        ("[1,2]", "[1,2]"),
        ("resnet", "resnet"),
        ("", ""),
    ],
)
def test_hp_values_arrive_as_typed(typed: str, sent: object) -> None:
    from smlaunch.sdk.cli.run import hp_value

    assert hp_value(typed) == sent and type(hp_value(typed)) is type(sent)


def test_every_help_states_the_exit_statuses(capsys: pytest.CaptureFixture) -> None:
    from smlaunch.sdk.cli.main import EXIT_STATUS

    for command in ([], ["run"], ["list"], ["describe"], ["metrics"], ["rm"], ["gc"], ["plan"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert " ".join(EXIT_STATUS.split()) in out, command
    for code in ("0 ", "1 ", "2 ", "130 "):
        assert f"\n  {code}" in EXIT_STATUS


def test_text_output_is_the_aws_clis() -> None:
    """The AWS CLI's text format (awscli/text.py): scalars of an object sorted by key on one line, a
    list of objects as one line each under the union of their scalar keys, nested lists under their
    key in capitals."""
    import io

    from smlaunch.sdk.cli.output import write_text

    data = {
        "TrainingJobSummaries": [
            {"TrainingJobName": "b", "TrainingJobStatus": "Failed"},
            {"TrainingJobName": "a", "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed"},
        ],
        "NextToken": "t",
        "Tags": ["x", "y"],
    }
    out = io.StringIO()
    write_text(data, out)
    assert out.getvalue().splitlines() == [
        "t",
        "TAGS\tx",
        "TAGS\ty",
        "TRAININGJOBSUMMARIES\t\tb\tFailed",
        "TRAININGJOBSUMMARIES\tCompleted\ta\tCompleted",
    ]
    out = io.StringIO()
    write_text(["a", "b", 3, None, True], out)
    assert out.getvalue() == "a\tb\t3\tNone\tTrue\n"


def test_query_and_table(capsys: pytest.CaptureFixture) -> None:
    import argparse
    import io

    from smlaunch.sdk.cli.output import emit

    data = {"Jobs": [{"Name": "a", "Value": 1}, {"Name": "bb", "Value": None}]}
    out = io.StringIO()
    emit(data, argparse.Namespace(output="table", query="Jobs"), out)
    assert out.getvalue().splitlines() == ["Name  Value", "a     1", "bb    -"]
    out = io.StringIO()
    emit(data, argparse.Namespace(output="json", query="Jobs[?Value].Name"), out)
    assert json.loads(out.getvalue()) == ["a"]
    with pytest.raises(ConfigurationError, match="--query='Jobs\\[': not a usable JMESPath"):
        emit(data, argparse.Namespace(output="json", query="Jobs["), out)


def test_warnings_print_as_a_command_line_tool_prints_them(src: Path, capsys: pytest.CaptureFixture) -> None:
    environment = '{"SMLAUNCH_FAULTS": "[]", "A": "1"}'
    sagemaker = ["--sagemaker", "--instance-type", "ml.c5.xlarge", "--role", "R"]
    assert main(["plan", "train.py", "--source-dir", "src", *sagemaker, "--environment", environment]) == 0
    err = capsys.readouterr().err
    # One line, no Python file, line number or source line of the interpreter's default format.
    assert err == (
        "warning: environment=['SMLAUNCH_FAULTS'] dropped: SMLAUNCH_* variables configure local runs"
        " and are not sent to SageMaker (set them in LocalSession(...) or ~/.config/smlaunch/config.yaml;"
        " docs/configuration.md)\n"
    )


def test_a_job_that_did_not_complete_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from smlaunch.sdk.cli import jobs as cli_jobs
    from smlaunch.sdk.errors import JobFailedError

    reason = (
        "AlgorithmError: rank 0 on host algo-1 exited with code 1\nErrorMessage: ValueError: boom\n"
        "Last stderr lines of [algo-1/rank 0]:\nTraceback (most recent call last):\nValueError: boom"
    )

    def fails(args: Any, out: Any) -> int:
        raise JobFailedError("job-1", "Failed", reason)

    monkeypatch.setattr(cli_jobs, "cmd_run", fails)
    assert main(["run", "train.py"]) == 1
    # The streamed lines showed the traceback already; `describe` keeps the whole reason.
    assert capsys.readouterr().err == (
        "error: Error for Training job job-1: Failed."
        " Reason: ValueError: boom (AlgorithmError: rank 0 on host algo-1 exited with code 1).\n"
    )


def test_errors_give_cli_advice(
    src: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The estimator's and the Session's errors name the command's flags, not Python keywords."""
    from tests.functional._sagemaker_moto import aws_test_env

    assert main(["run", "train.py", "--source-dir", "src", "--instance-count", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --instance-count=0: ") and "Fix: pass --instance-count 1 or more" in err
    assert main(["plan", "nope.py", "--source-dir", "src"]) == 2
    assert "no file named 'nope.py' in --source-dir 'src'" in capsys.readouterr().err
    assert main(["run", "train.py", "--source-dir", "src", "--input", "train=nowhere"]) == 2
    assert capsys.readouterr().err.startswith("error: --input['train']='nowhere': ")

    aws_test_env(monkeypatch, credentials=False)
    run = ["run", "train.py", "--source-dir", "src", "--sagemaker", "--instance-type", "ml.c5.xlarge"]
    assert main([*run, "--region", "us-west-2"]) == 2
    err = capsys.readouterr().err
    assert "no usable AWS credentials" in err and "drop --sagemaker to run on this machine" in err
    # A read command runs nothing, and `sagemaker:x` has no --sagemaker to drop.
    for command in (["describe", "--sagemaker", "x"], ["describe", "sagemaker:x"], ["list", "--sagemaker"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "no usable AWS credentials" in err, err
        assert err.rstrip().endswith(
            "or look in the local job store instead (no --sagemaker, no sagemaker: prefix)"
        )
        assert "LocalSession" not in err and "sagemaker_session" not in err, err


@pytest.mark.parametrize(
    "jobs",
    [
        ["local:a", "kubernetes:ns:b"],
        ["kubernetes:ns:b", "a"],
        ["kubernetes:ns:b", "kubernetes:other:c"],
        ["slurm:/shared:a"],
    ],
)
def test_rm_takes_jobs_of_one_store_or_one_namespace(
    jobs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rm", *jobs]) == 2
    err = capsys.readouterr().err
    assert "rm removes jobs of one local store, or of one Kubernetes namespace" in err, err
    assert "kubernetes:NAMESPACE:NAME" in err


def test_list_kubernetes_names_one_place_and_no_store_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--kubernetes", "ns", "--sagemaker"]) == 2
    assert "give one place" in capsys.readouterr().err
    assert main(["list", "--kubernetes", "ns", "--status", "Abandoned"]) == 2
    assert "drop --kubernetes" in capsys.readouterr().err
    assert main(["list", "--kubernetes", "ns", "--tuning", "--sagemaker"]) == 2
    assert "give one place" in capsys.readouterr().err
