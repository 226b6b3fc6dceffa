"""Fixtures shared by the unit tests (a test module's own fixture of the same name wins)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A ``source_dir`` holding a one-line ``train.py``."""
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    return root
