"""Run a patch on a module right after the script imports it, importing nothing ahead of the script.

:class:`AfterImport` is the one mechanism behind both patches the ranks get: the first-collective
mark of :mod:`smlaunch.rank.boot` (on ``torch.distributed``) and the CUDA emulation of
:mod:`smlaunch.rank.cuda_emulation` (on ``torch``). Its own module, below both: the bootstrap loads
the emulation only when it is asked for, and the emulation needs the hook without the bootstrap.

Loaded into every rank before the script's first line, so, like the bootstrap, it imports nothing
heavy: not even ``typing`` or ``importlib.abc`` (which would add ~10 ms to each rank's start).
"""

from __future__ import annotations

import contextlib
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class AfterImport:
    """A ``sys.meta_path`` entry that runs ``patch(module)`` once, right after ``name`` has been
    imported by the finders after it (before the import statement that loaded it returns). It
    imports nothing itself; a patch that fails is reported on stderr as ``what`` and the script
    goes on."""

    def __init__(self, name: str, patch: Callable[[Any], None], what: str) -> None:
        self.name = name
        self.patch = patch
        self.what = what

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        patch, what = self.patch, self.what

        class _Loader:  # an importlib.abc.Loader by its two methods (see the imports above)
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                try:
                    patch(module)
                except Exception as error:  # the script must still start; say what is missing
                    print(f"smlaunch: {what} could not be installed: {error!r}", file=sys.stderr)

        spec.loader = _Loader()
        return spec
