"""Packaging a large ``source_dir`` keeps the notebook's memory flat, and warns about the size.

A subprocess packages and stages (``file://``) 200 MiB of real, distinct files, after a warm-up
that loads every lazy import; the growth of its peak RSS must stay far below the code's size (the
archive used to be built in memory: 1.2 GB of growth for 400 MB of code). The same run must warn
that code above 100 MiB belongs in a channel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FILES = 200
FILE_BYTES = 1 << 20
MAX_GROWTH_KIB = 64 * 1024

SCRIPT = r"""
import json, resource, sys, warnings
from pathlib import Path
from smlaunch.sdk.request.packaging import build_and_stage

src, small, out = (Path(p) for p in sys.argv[1:4])
build_and_stage("train.py", small, None, (out / "warmup" / "sourcedir.tar.gz").as_uri())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    archive, _ = build_and_stage("train.py", src, None, (out / "big" / "sourcedir.tar.gz").as_uri())
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth_kib": after - before, "members": len(archive.members),
                  "warnings": [str(w.message) for w in caught]}))
"""


def _write_tree(root: Path) -> None:
    """200 files of 1 MiB, each distinct (its own header line), compressible so gzip stays fast."""
    block = bytes(range(256)) * (FILE_BYTES // 256)
    for index in range(FILES):
        directory = root / f"shard{index // 50}"
        directory.mkdir(parents=True, exist_ok=True)
        header = f"file {index}\n".encode()
        (directory / f"part{index:03d}.bin").write_bytes(header + block[len(header) :])
    (root / "train.py").write_text("print('train')\n")


@pytest.mark.slow
def test_packaging_200_mib_keeps_memory_flat_and_warns(tmp_path: Path) -> None:
    _write_tree(tmp_path / "big")
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "train.py").write_text("print('train')\n")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "big"), str(tmp_path / "small"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["members"] == FILES + 1
    assert result["growth_kib"] < MAX_GROWTH_KIB, f"peak RSS grew by {result['growth_kib'] // 1024} MiB"
    assert any("MiB of files" in w and "channel" in w for w in result["warnings"]), result["warnings"]
    assert (tmp_path / "out" / "big" / "sourcedir.tar.gz").stat().st_size < FILES * FILE_BYTES // 10
