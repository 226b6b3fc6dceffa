"""The CPU training image the Docker and Kubernetes tests run, built here or reused from Docker's cache."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT = 2400


def cpu_test_image() -> str:
    """Our CPU image (with scikit-learn for the examples, and the kubernetes client that a job's
    agent pod uses): ``SMLAUNCH_TEST_IMAGE`` when set, else ``container/build.sh cpu`` builds it
    or reuses the one with the same hash (no registry needed). Skips the calling test, with the
    build's reason, when a prerequisite is missing."""
    prebuilt = os.environ.get("SMLAUNCH_TEST_IMAGE")
    if prebuilt:
        return prebuilt
    started = time.monotonic()
    result = subprocess.run(
        [str(REPO / "container" / "build.sh"), "cpu", "--extra", "scikit-learn kubernetes<37"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if result.returncode == 2:  # a prerequisite is missing (debootstrap, root, mirror, index)
        pytest.skip(f"cannot build the test image: {result.stderr.strip()[-500:]}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    tag = result.stdout.strip().splitlines()[-1]
    print(f"test image {tag} ready in {time.monotonic() - started:.0f} s")
    return tag
