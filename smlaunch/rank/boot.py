"""What every rank does at start so its supervisor can see inside it: the rank side of
:mod:`smlaunch.runtime.supervision.watchdog` and :mod:`smlaunch.runtime.supervision.fault_injector`.

Runs inside the user's process (imported by ``smlaunch/rank/_site/sitecustomize.py``, which the
supervisor puts first on each rank's ``PYTHONPATH``), so it must be cheap, import nothing heavy, never
raise, and change nothing the script can observe except two signal handlers and an exit handler:

- **Registration.** When ``SMLAUNCH_RANK_DIR`` is set, the rank writes ``<dir>/<pid>.json``
  (``{"pid", "rank", "host", "time"}``): that is how the supervisor finds ranks it did not spawn
  itself (``mpirun``'s children). :func:`register` runs again after the MPI rank wrapper has set
  the rank's host, overwriting the entry.
- **Stacks.** ``faulthandler`` is registered on SIGUSR1, writing every thread's Python stack to
  ``<dir>/<pid>.stack``: the dump used when ``py-spy`` is not installed. faulthandler works at the C
  level, so it answers even when the rank is stuck in a collective.
- **Process-group teardown.** An ``atexit`` handler (registered first, so it runs after the script's
  own) destroys a ``torch.distributed`` process group the script left open and collects garbage
  while the interpreter is still whole. Without it a gloo group is freed during interpreter
  finalization, typically when the final garbage collection frees a DDP model's reference cycle;
  a gloo worker thread then releasing a tensor owned by Python must take the GIL, which finalization
  refuses by ending the thread, and that unwind through a C++ destructor aborts the process
  (SIGABRT, "terminate called without an active exception", exit 134) after training succeeded.
  This happens on SageMaker too (it is torch's bug, pytorch/pytorch#179291); smlaunch fixes it
  because a finished job must not be reported as failed.
- **CUDA emulation.** Only when ``SMLAUNCH_EMULATE_CUDA`` is set (a local job emulating a GPU
  instance type on a machine without its GPUs): :mod:`smlaunch.rank.cuda_emulation` patches torch when
  the script imports it, so CUDA calls run on the CPU. Unlike the rest, it changes what the script
  observes (``torch.cuda.is_available()`` is True), which is its purpose.
- **First collective.** Once ``torch.distributed`` is imported, its ``init_process_group`` (the
  rendezvous every distributed rank starts with) is wrapped so that its first call creates
  ``<dir>/<pid>.live``: the stall watchdog counts a stall only from the moment every rank printed a
  line or reached that point, never while ranks are still importing torch on a busy machine. The
  wrapper (``functools.wraps``) calls the original unchanged; nothing is imported ahead of the script.
- **Faults.** Only when ``SMLAUNCH_FAULTS`` is set: a SIGUSR2 handler that performs the action the
  supervisor wrote to ``<dir>/<pid>.fault`` (``{"kind": "crash", "exit_code": 7}`` exits the rank
  with that code after printing where it was; ``{"kind": "hang"}`` blocks the main thread forever at
  the point the script had reached).
"""

from __future__ import annotations

import os
import sys
import time

from smlaunch.rank.after_import import AfterImport

# Every rank imports this module before the script's first line: typing (and importlib.abc, which
# loads importlib.resources and tempfile) would add ~10 ms to each rank's start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RANK_DIR_ENV = "SMLAUNCH_RANK_DIR"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
"""The directory holding the ``sitecustomize`` that calls :func:`boot`; first on every rank's path."""
FAULTS_ENV = "SMLAUNCH_FAULTS"
EMULATE_CUDA_ENV = "SMLAUNCH_EMULATE_CUDA"  # contract.SMLAUNCH_EMULATE_CUDA, without importing it
LIVE_SUFFIX = ".live"
"""``<dir>/<pid>.live``: the rank reached its first collective (:func:`mark_live`)."""

_stack_file: Any = None  # kept open for faulthandler (it writes to the file descriptor)


def _rank_from_env() -> int | None:
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def register(rank_dir: str | None = None) -> None:
    """Write (or rewrite) this rank's registration file from the current environment."""
    import json

    rank_dir = rank_dir or os.environ.get(RANK_DIR_ENV)
    if not rank_dir:
        return
    pid = os.getpid()
    info = {
        "pid": pid,
        "rank": _rank_from_env(),
        "host": os.environ.get("SM_CURRENT_HOST"),
        "time": time.time(),
    }
    path = os.path.join(rank_dir, f"{pid}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(info, handle)
    os.replace(tmp, path)


def mark_live(rank_dir: str | None = None) -> None:
    """Tell the supervisor this rank reached its first collective: create ``<dir>/<pid>.live``."""
    rank_dir = rank_dir or os.environ.get(RANK_DIR_ENV)
    if not rank_dir:
        return
    try:
        open(os.path.join(rank_dir, f"{os.getpid()}{LIVE_SUFFIX}"), "a").close()
    except OSError:
        pass


def _wrap_init_process_group(module: Any) -> None:
    import functools

    original = getattr(module, "init_process_group", None)
    if original is None or getattr(original, "_smlaunch_wrapped", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        mark_live()
        return original(*args, **kwargs)

    init_process_group._smlaunch_wrapped = True  # type: ignore[attr-defined]
    module.init_process_group = init_process_group
    c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is not None and getattr(c10d, "init_process_group", None) is original:
        c10d.init_process_group = init_process_group


def _on_fault(signum: int, frame: Any) -> None:
    import json
    import traceback

    rank_dir = os.environ.get(RANK_DIR_ENV, "")
    try:
        with open(os.path.join(rank_dir, f"{os.getpid()}.fault"), encoding="utf-8") as handle:
            action = json.load(handle)
    except (OSError, ValueError):
        return
    where = "".join(traceback.format_stack(frame)[-3:]) if frame is not None else ""
    kind = action.get("kind")
    if kind == "crash":
        code = int(action.get("exit_code", 1))
        sys.stderr.write(
            f"smlaunch fault injection: this rank crashes now with exit code {code}; it was at:\n{where}"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)
    if kind == "hang":
        sys.stderr.write(f"smlaunch fault injection: this rank hangs now; it was at:\n{where}")
        sys.stderr.flush()
        while True:
            time.sleep(3600)


def close_process_groups() -> None:
    """Destroy the default process group if the script left it open, then free unreachable objects
    (a DDP model's reference cycle holds its group), so each gloo group's worker threads are joined
    while they can still take the GIL. Never raises: it runs at exit, after the script's outcome."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    import gc

    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # a group that cannot be closed cleanly is left to the interpreter, as before
        pass
    gc.collect()


def boot() -> None:
    """Called once at interpreter start in every rank. A no-op outside smlaunch's supervisor."""
    global _stack_file
    if os.environ.get(EMULATE_CUDA_ENV):
        from smlaunch.rank import cuda_emulation

        gpus = cuda_emulation.EmulatedGpus.from_environ(os.environ)
        if gpus is not None and cuda_emulation.active() is None:
            cuda_emulation.install_on_import(gpus)
    rank_dir = os.environ.get(RANK_DIR_ENV)
    if not rank_dir or not os.path.isdir(rank_dir):
        return
    import atexit
    import faulthandler
    import signal

    if _stack_file is None:  # first call in this process
        atexit.register(close_process_groups)
        if "torch.distributed" in sys.modules:
            _wrap_init_process_group(sys.modules["torch.distributed"])
        else:
            mark = AfterImport("torch.distributed", _wrap_init_process_group, "the first-collective mark")
            sys.meta_path.insert(0, mark)
        _stack_file = open(os.path.join(rank_dir, f"{os.getpid()}.stack"), "w")
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)
    if os.environ.get(FAULTS_ENV):
        signal.signal(signal.SIGUSR2, _on_fault)
    register(rank_dir)
