"""Each emulated host of a process job sees its own tree at ``/opt/ml`` (Linux mount namespaces).

Scripts that write ``/opt/ml/model/model.pth`` or read ``/opt/ml/input/data/train`` literally work
as processes: every host runtime (and so every rank it starts) runs in a private mount namespace in
which its host tree is bind-mounted at ``/opt/ml``. The namespace is entered in the forked child,
before the runtime is executed (:meth:`PrivateOptMl.hook`):

- as root, a new mount namespace; otherwise a new user namespace that maps only the user's own uid
  and gid, plus a mount namespace (what ``unshare -Urm`` does, except that the script keeps its own
  uid, and the capabilities the namespace grants end when the runtime is executed);
- every mount becomes a slave: nothing mounted in the namespace reaches the machine, while mounts the
  agent makes later on the machine still reach the host (where the kernel propagates them);
- where ``/opt/ml`` does not exist, a tmpfs covers ``/opt`` in the namespace, holding the original
  entries of ``/opt`` (bind-mounted back) and an empty ``ml``: nothing is created on the machine.

The ``SM_*`` variables keep naming the host tree's own path, which stays valid inside the
namespace. Where namespaces cannot be had (not Linux, user namespaces disabled, no ``/opt``),
:meth:`PrivateOptMl.unavailable` says why; the agent says it once in the job log and starts the
hosts as before (``SM_*`` paths work, literal ``/opt/ml`` paths do not). Limit: with ``mpirun`` one
launcher serves every emulated host, so all its ranks see the master host's tree at ``/opt/ml``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runtime import contract

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SLAVE = 0x80000


class PrivateOptMl:
    """Bind-mounts a host tree at ``target`` (``/opt/ml``) in a private mount namespace."""

    def __init__(self, target: str = contract.DEFAULT_BASE_DIR) -> None:
        self.target = target
        # Loaded here, in the parent: the hook runs between fork and exec and must not load libraries.
        self._libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None

    def hook(self, tree: Path) -> Callable[[], None]:
        """A pre-exec hook that puts the child in its own namespace with ``tree`` at the target."""
        source = str(tree)
        return lambda: self._enter(source)

    def unavailable(self, tree: Path) -> str | None:
        """None when a child can get ``tree`` at the target here (tried in a throwaway child), else why."""
        if self._libc is None:
            return f"mount namespaces need Linux, not {sys.platform}"
        true = shutil.which("true") or "/bin/true"
        read, write = os.pipe()

        def probe() -> None:
            try:
                self._enter(str(tree))
            except OSError as error:
                os.write(write, str(error).encode())
                os._exit(1)

        try:
            code = subprocess.run([true], preexec_fn=probe, pass_fds=(write,), check=False).returncode
        except (OSError, subprocess.SubprocessError) as error:
            code, why = 1, str(error)
        else:
            why = ""
        finally:
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                why = pipe.read().decode(errors="replace") or why
        return None if code == 0 else why or f"the probe exited with code {code}"

    # --- in the forked child ------------------------------------------------------------------

    def _check(self, what: str, result: int) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def _mount(self, source: str | None, target: str, fstype: str | None, flags: int, what: str,
               data: str | None = None) -> None:
        assert self._libc is not None
        fields = [None if s is None else os.fsencode(s) for s in (source, target, fstype)]
        self._check(what, self._libc.mount(*fields, flags, None if data is None else os.fsencode(data)))

    def _enter(self, tree: str) -> None:
        assert self._libc is not None
        uid, gid = os.getuid(), os.getgid()
        root = os.geteuid() == 0
        self._check("unshare", self._libc.unshare(_CLONE_NEWNS if root else _CLONE_NEWNS | _CLONE_NEWUSER))
        if not root:
            maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
            for name, text in maps:
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        # First, before anything is mounted: nothing done here may propagate to the machine.
        self._mount(None, "/", None, _MS_REC | _MS_SLAVE, "making every mount a slave")
        if not os.path.isdir(self.target):
            self._cover_parent()
        self._mount(tree, self.target, None, _MS_BIND | _MS_REC, f"bind-mounting {tree} at {self.target}")

    def _cover_parent(self) -> None:
        """A tmpfs over the target's parent, with the parent's entries bind-mounted back and the
        target created empty."""
        parent, name = os.path.split(self.target.rstrip("/"))
        if not os.path.isdir(parent):
            raise OSError(2, f"{parent} does not exist, so {self.target} cannot be mounted")
        original = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)  # still reaches what the tmpfs hides
        entries = os.listdir(original)
        self._mount("tmpfs", parent, "tmpfs", 0, f"mounting a tmpfs over {parent}", "mode=755")
        for entry in entries:
            source, placed = f"/proc/self/fd/{original}/{entry}", os.path.join(parent, entry)
            if os.path.islink(source):
                os.symlink(os.readlink(source), placed)
                continue
            if os.path.isdir(source):
                os.mkdir(placed)
            else:
                os.close(os.open(placed, os.O_CREAT | os.O_WRONLY, 0o644))
            self._mount(source, placed, None, _MS_BIND | _MS_REC, f"bind-mounting {parent}/{entry} back")
        os.mkdir(os.path.join(parent, name))
        os.close(original)
