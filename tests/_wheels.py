"""Tiny pure-Python wheels built by hand, so pip installs offline (``--no-index``) and in a second."""

from __future__ import annotations

import zipfile
from pathlib import Path


def make_wheel(
    directory: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` holding ``files`` (path -> text) into ``directory``."""
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
        whl.writestr(f"{dist}/METADATA", metadata)
        whl.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{dist}/RECORD", "")
    return path
