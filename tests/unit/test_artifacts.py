"""Merging every host's model and output directories into the job's tarballs."""

from __future__ import annotations

import tarfile
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from smlaunch import contract
from smlaunch.sdk.backends.base import output_prefix
from smlaunch.sdk.backends.emulated.artifacts import ArtifactConflictError, merge_entries, package_artifacts
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.sessions.sagemaker import LocalSession


def _host(tmp_path: Path, host: str, model: dict[str, str], data: dict[str, str] | None = None) -> Path:
    paths = contract.Paths(tmp_path / host)
    for rel, text in model.items():
        (paths.model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (paths.model_dir / rel).write_text(text)
    paths.output_data_dir.mkdir(parents=True, exist_ok=True)
    for rel, text in (data or {}).items():
        (paths.output_data_dir / rel).write_text(text)
    return paths.base


def _read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_merge_unions_hosts_and_reports_conflicts_naming_both_hosts(tmp_path: Path) -> None:
    bases = {
        "algo-1": _host(tmp_path, "algo-1", {"model.pt": "A", "same.json": "{}", "sub/one.txt": "1"}),
        "algo-2": _host(tmp_path, "algo-2", {"model.pt": "B", "same.json": "{}", "sub/two.txt": "2"}),
    }
    merge = merge_entries({h: contract.Paths(b).model_dir for h, b in bases.items()})
    assert [item.name for item in merge.files] == ["model.pt", "same.json", "sub/one.txt", "sub/two.txt"]
    assert len(merge.conflicts) == 1  # identical bytes are not a conflict
    assert merge.skipped == {}
    message = merge.conflicts[0].message("model")
    assert "'model.pt'" in message and "algo-1" in message and "algo-2" in message


def test_package_to_file_uri(tmp_path: Path) -> None:
    bases = {
        "algo-1": _host(tmp_path, "algo-1", {"m1.pt": "1", "clash": "x"}, {"d1.txt": "d"}),
        "algo-2": _host(tmp_path, "algo-2", {"m2.pt": "2", "clash": "y"}),
    }
    logged: list[str] = []
    out = tmp_path / "out"
    uris = package_artifacts(
        bases,
        "job-1",
        out.as_uri() + "/",
        tmp_path / "staging",
        s3_client=lambda: pytest.fail("no S3 for file://"),
        log=logged.append,
    )
    assert uris == {
        "model": f"{out.as_uri()}/job-1/output/model.tar.gz",
        "output": f"{out.as_uri()}/job-1/output/output.tar.gz",
    }
    assert _read(out / "job-1" / "output" / "model.tar.gz") == {"clash": b"x", "m1.pt": b"1", "m2.pt": b"2"}
    assert _read(out / "job-1" / "output" / "output.tar.gz") == {"d1.txt": b"d"}
    assert len(logged) == 1 and "'clash'" in logged[0] and "keeping algo-1's" in logged[0]


def test_conflicts_error_policy_raises_before_delivering(tmp_path: Path) -> None:
    bases = {
        "algo-1": _host(tmp_path, "algo-1", {"clash": "x"}),
        "algo-2": _host(tmp_path, "algo-2", {"clash": "y"}),
    }
    out = tmp_path / "out"
    with pytest.raises(ArtifactConflictError, match=r"'clash' differs between algo-1 and algo-2"):
        package_artifacts(
            bases,
            "job-1",
            out.as_uri() + "/",
            tmp_path / "staging",
            s3_client=lambda: pytest.fail("no S3"),
            log=lambda _: None,
            conflicts="error",
        )
    assert not out.exists()  # nothing delivered


def test_local_session_refuses_unknown_conflict_policy(tmp_path: Path) -> None:
    expected = r"artifact_conflicts='ignore'.*Fix: use artifact_conflicts='warn'"
    with pytest.raises(ConfigurationError, match=expected):
        LocalSession(root=tmp_path, artifact_conflicts="ignore")  # type: ignore[arg-type]


def test_package_to_s3(tmp_path: Path) -> None:
    bases = {"algo-1": _host(tmp_path, "algo-1", {"m.pt": "1"})}
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bucket")
        uris = package_artifacts(
            bases,
            "job-2",
            "s3://bucket/prefix",
            tmp_path / "staging",
            s3_client=lambda: client,
            log=lambda _: None,
        )
        assert uris["model"] == "s3://bucket/prefix/job-2/output/model.tar.gz"
        body = client.get_object(Bucket="bucket", Key="prefix/job-2/output/model.tar.gz")["Body"].read()
    (tmp_path / "m.tar.gz").write_bytes(body)
    assert _read(tmp_path / "m.tar.gz") == {"m.pt": b"1"}


def test_output_prefix_joins_with_one_slash() -> None:
    assert output_prefix("s3://b/p/", "j") == output_prefix("s3://b/p", "j") == "s3://b/p/j/output"
