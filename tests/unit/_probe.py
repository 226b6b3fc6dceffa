"""Run a probe script in a fresh interpreter and return the JSON object it prints last.

For behaviour that only exists in a rank's own interpreter (a patched torch, an ``smp.init``
that would leave a process group behind in the test process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_probe(directory: Path, script: str, env: Mapping[str, str], drop: tuple[str, ...] = ()) -> Any:
    """Write ``script`` under ``directory``, run it with ``os.environ`` updated by ``env`` (minus
    ``drop``), and return the JSON of its last stdout line; fails the test on a non-zero exit."""
    path = directory / "probe.py"
    path.write_text(script)
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, str(path)], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])
