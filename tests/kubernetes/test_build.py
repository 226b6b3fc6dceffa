"""``tools/k8s_dev_cluster.sh build --binaries DIR`` checks every binary against DIR's SHA256SUMS and
refuses, naming the file, what does not match or is missing; the cache then stays empty."""

from __future__ import annotations

import hashlib
import lzma
import os
import subprocess
from pathlib import Path

import pytest

from tests.kubernetes.conftest import SCRIPT

pytestmark = pytest.mark.kubernetes

NAMES = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "pause"]


def binaries_dir(directory: Path, wrong_sum: str = "", absent: str = "") -> Path:
    """Fake binaries as ``<name>.xz`` with a SHA256SUMS of the uncompressed files; ``wrong_sum``'s
    line names another content's sum, ``absent`` has its line but no file."""
    directory.mkdir()
    lines = []
    for name in NAMES:
        content = f"not really {name}\n".encode()
        digest = hashlib.sha256(b"something else" if name == wrong_sum else content).hexdigest()
        lines.append(f"{digest}  {name}\n")
        if name != absent:
            (directory / f"{name}.xz").write_bytes(lzma.compress(content))
    (directory / "SHA256SUMS").write_text("".join(lines))
    return directory


def build(binaries: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(SCRIPT), "build", "--binaries", str(binaries)],
        env={**os.environ, "SMLAUNCH_K8S_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode == 2 and "--binaries" not in result.stderr:
        pytest.skip(f"cannot run the build here: {result.stderr.strip()}")
    return result


def test_a_sum_mismatch_is_refused_naming_the_file(tmp_path: Path) -> None:
    result = build(binaries_dir(tmp_path / "bin", wrong_sum="kubelet"), tmp_path / "cache")

    assert result.returncode == 1, result.stderr
    assert f"refusing {tmp_path / 'bin' / 'kubelet.xz'}: its sha256 is" in result.stderr
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_missing_binary_is_refused_naming_it(tmp_path: Path) -> None:
    result = build(binaries_dir(tmp_path / "bin", absent="pause"), tmp_path / "cache")

    assert result.returncode == 2, result.stderr
    assert "pause.xz is missing" in result.stderr
    assert list((tmp_path / "cache").iterdir()) == []
