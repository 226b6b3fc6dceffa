"""Hostile code archives, built in the test, and the check that none of them got out.

Each :class:`Hostile` writes a ``sourcedir.tar.gz`` aimed at one directory outside the code
directory (``Targeoutside``, which holds ``victim.txt``): by relative ``..`` paths computed from
where the extractor will put the code, and by absolute paths, both as the *extractor* sees them
(a container sees ``/opt/ml``; the test sees the host path of the same tree). Every archive starts
with a harmless ``train.py`` that prints ``SHOULD NOT RUN``: a refused archive must never run.

:func:`snapshot` and :func:`assert_untouched` check the outcome on disk: every file that existed
before is unchanged, and no file named ``pwned*`` appeared anywhere but in a code directory.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

VICTIM = "victim.txt"
VICTIM_TEXT = "original victim content\n"
MARKER = "pwned"
TRAIN_PY = b"print('SHOULD NOT RUN')\n"


CLIMB = 32
"""``..`` components that reach ``/`` from any code directory (extra ones stay at ``/``)."""


def up(outside: PurePosixPath) -> str:
    """A relative path to ``outside`` from anywhere: ``../../…/tmp/…/outside``."""
    return "../" * CLIMB + str(outside).lstrip("/")


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"pwned\n") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def _dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def _special(tar: tarfile.TarFile, name: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.devmajor, info.devminor = (1, 3) if kind != tarfile.FIFOTYPE else (0, 0)
    tar.addfile(info)


def symlink_chain(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    """Links that look inside against the empty destination, outside once earlier ones exist:
    ``a/b/u -> ../..`` (the code directory), ``a/b/v -> u/../..`` (lexically ``a``, really two
    levels above the code directory), and so on up to ``/``; then a file written through the last."""
    last = _chain(tar)
    _file(tar, f"a/b/{last}/{str(outside).lstrip('/')}/{MARKER}-chain.txt")


def _chain(tar: tarfile.TarFile) -> str:
    _link(tar, "a/b/u", "../..")
    previous = "u"
    for step in ["v", *(f"w{i}" for i in range(CLIMB // 2 - 1))]:
        _link(tar, f"a/b/{step}", f"{previous}/../..")
        previous = step
    return previous


def symlink_chain_left_behind(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    """The same two links without a write: ``a/b/v`` still points outside once extracted."""
    _chain(tar)


STEPS = "abcdefghijklmnop"
LONG = "d" * 247


def path_max_escape(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    """CVE-2025-4517's proof of concept: a link whose resolution exceeds PATH_MAX, so
    ``os.path.realpath`` gives up; through it a hardlink to an outside file, then a write to it."""
    step_path = ""
    for step in STEPS:
        _dir(tar, posixpath.join(step_path, LONG))
        _link(tar, posixpath.join(step_path, step), LONG)
        step_path = posixpath.join(step_path, step)
    linkpath = posixpath.join(*STEPS, "l" * 254)
    _link(tar, linkpath, "../" * len(STEPS))
    _link(tar, "escape", f"{linkpath}/{up(outside)}")
    _link(tar, "flaglink", f"escape/{VICTIM}", tarfile.LNKTYPE)
    _file(tar, "flaglink", b"pwned through a hardlink\n")
    _file(tar, f"escape/{MARKER}-pathmax.txt")


DEEP_LEVELS = 15  # 15 x 251 characters: a plain extractor still opens it below PATH_MAX
DEEP = "/".join(["e" * 250] * DEEP_LEVELS)


def deep_link_many_dotdots(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    """Nested 250-character directories and, at the bottom, a link with too many ``..``."""
    _dir(tar, DEEP)
    _link(tar, f"{DEEP}/out", "../" * DEEP_LEVELS + up(outside))
    _file(tar, f"{DEEP}/out/{MARKER}-deep.txt")


def hardlink_absolute(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _link(tar, "h", str(outside / VICTIM), tarfile.LNKTYPE)
    _file(tar, "h", b"pwned through an absolute hardlink\n")


def hardlink_relative(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _link(tar, "h", f"{up(outside)}/{VICTIM}", tarfile.LNKTYPE)
    _file(tar, "h", b"pwned through a relative hardlink\n")


def absolute_name(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _file(tar, str(outside / f"{MARKER}-absolute.txt"))


def dotdot_name(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _file(tar, f"{up(outside)}/{MARKER}-dotdot.txt")


def absolute_symlink(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _link(tar, "s", str(outside))
    _file(tar, f"s/{MARKER}-abslink.txt")


def through_inside_link(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    """A link that points inside, then a member written through it (refused all the same)."""
    _dir(tar, "pkg")
    _link(tar, "lnk", "pkg")
    _file(tar, "lnk/x.py", b"x = 1\n")


def char_device(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _special(tar, "null", tarfile.CHRTYPE)


def block_device(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _special(tar, "disk", tarfile.BLKTYPE)


def fifo(tar: tarfile.TarFile, outside: PurePosixPath) -> None:
    _special(tar, "pipe", tarfile.FIFOTYPE)


@dataclass(frozen=True)
class Hostile:
    """One hostile archive: its builder, the member its refusal must name (a template with
    ``{outside}`` and ``{up}``), and whether a plain ``tarfile`` extraction without a filter (as
    Debian's Python 3.11.2 has it) really escapes with it."""

    name: str
    build: Callable[[tarfile.TarFile, PurePosixPath], None]
    refused: str
    escapes_naively: bool = False

    def refusal(self, outside: PurePosixPath | Path) -> str:
        """What the refusal must contain: the member's name quoted (the end of a very long one)."""
        member = repr(
            self.refused.format(
                outside=outside, up=up(PurePosixPath(outside)), rel=str(outside).lstrip("/"), pwned=MARKER
            )
        )
        return member if len(member) < 240 else member[-60:]


CASES = [
    Hostile(
        "symlink-chain",
        symlink_chain,
        f"a/b/w{CLIMB // 2 - 2}/{{rel}}/{{pwned}}-chain.txt",
        escapes_naively=True,
    ),
    Hostile("symlink-chain-left-behind", symlink_chain_left_behind, "a/b/v"),
    Hostile("path-max", path_max_escape, f"a/{LONG}", escapes_naively=True),
    Hostile("deep-link-many-dotdots", deep_link_many_dotdots, f"{DEEP}/out", escapes_naively=True),
    Hostile("hardlink-absolute", hardlink_absolute, "h", escapes_naively=True),
    Hostile("hardlink-relative", hardlink_relative, "h", escapes_naively=True),
    Hostile("absolute-name", absolute_name, "{outside}/{pwned}-absolute.txt"),
    Hostile("dotdot-name", dotdot_name, "{up}/{pwned}-dotdot.txt", escapes_naively=True),
    Hostile("absolute-symlink", absolute_symlink, "s", escapes_naively=True),
    Hostile("through-inside-link", through_inside_link, "lnk/x.py"),
    Hostile("char-device", char_device, "null"),
    Hostile("block-device", block_device, "disk"),
    Hostile("fifo", fifo, "pipe"),
]


def write_archive(case: Hostile, path: Path, outside: PurePosixPath) -> Path:
    """``path``: a gzipped tar holding ``train.py``, then the case's members."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        _file(tar, "train.py", TRAIN_PY)
        case.build(tar, outside)
    return path


def make_outside(outside: Path) -> None:
    """The directory the archives aim at, with the file they try to overwrite."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / VICTIM).write_text(VICTIM_TEXT)


Snapshot = dict[str, tuple[int, str]]


def snapshot(root: Path) -> Snapshot:
    """Every file under ``root`` (links not followed): its mode and content hash."""
    found: Snapshot = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            if path.is_symlink():
                found[str(path)] = (st.st_mode, os.readlink(path))
            elif path.is_file():
                found[str(path)] = (st.st_mode, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def assert_untouched(before: Snapshot, root: Path, code_dirs: Iterable[Path]) -> None:
    """Nothing that existed changed; no ``pwned*`` file appeared outside the code directories."""
    after = snapshot(root)
    changed = [p for p, v in before.items() if after.get(p) != v]
    assert not changed, f"changed or removed: {changed}"
    inside = [str(Path(c)) + os.sep for c in code_dirs]
    planted = [
        p
        for p in after
        if p not in before and MARKER in Path(p).name and not any(p.startswith(c) for c in inside)
    ]
    assert not planted, f"written outside the code directory: {planted}"
