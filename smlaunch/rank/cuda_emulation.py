"""CUDA emulated on CPU, so a GPU training script runs unchanged on a machine without GPUs.

A local job that emulates a GPU instance type (``ml.p3.16xlarge``) on a machine without its GPUs
sets ``SMLAUNCH_EMULATE_CUDA`` (``{"gpus": 8, "model": "V100", "memory_gib": 16}``) for every
rank; :mod:`smlaunch.rank.boot` then calls :func:`install_on_import`, which patches torch right after
the script imports it (nothing is imported before: a rank that never imports torch pays nothing).
What the script then sees, per emulated host:

- ``torch.cuda.is_available()`` is True and ``device_count()`` the instance type's GPUs;
  ``set_device``/``current_device``/``torch.cuda.device(i)`` track an index (an index outside the
  host's GPUs fails as on a GPU); ``synchronize``, ``empty_cache``, the memory and RNG queries,
  ``get_device_name``/``get_device_properties`` (the instance's GPU model and memory),
  ``torch.cuda.Event`` (wall-clock timing), ``torch.cuda.Stream`` and NVTX ranges are harmless;
- tensors and modules sent to ``"cuda"``, ``"cuda:N"``, ``torch.device("cuda", N)`` or ``N`` stay on
  the CPU: ``Tensor.cuda``/``Module.cuda`` return them as they are, ``Tensor.to``/``Module.to`` and
  every ``device=`` argument of a torch function (a ``TorchFunctionMode``, entered in the thread
  that imported torch) and ``torch.load(map_location=...)`` map CUDA devices to the CPU;
  ``pin_memory`` returns the tensor;
- ``init_process_group("nccl")`` and ``new_group(backend="nccl")`` use gloo (a CUDA ``device_id``
  is dropped); DDP drops ``device_ids``/``output_device`` for a module on the CPU;
- ``torch.autocast("cuda")``/``torch.cuda.amp.autocast()`` and ``GradScaler("cuda")`` are disabled,
  exactly as torch disables them on a CPU-only machine.

The emulation never changes what is computed: every tensor is the CPU tensor a CPU run of the
script would have, so a script that falls back to the CPU when CUDA is absent produces the same
numbers with and without it. What needs a real GPU fails at once with a :class:`CudaEmulationError`
(or, for imports, ``ModuleNotFoundError``) naming the call: any other ``torch.cuda`` function that
would initialise CUDA, CUDA graphs, CUDA extensions built with
``torch.utils.cpp_extension`` (``.cu`` sources, ``CUDAExtension``), and CUDA-only libraries
(apex, flash-attn, Transformer Engine). ``torch.device("cuda", N)`` stays a CUDA device object (the
script's ``device.type == "cuda"`` holds); what lands on the CPU is the tensors. Limits:
``Tensor.is_cuda`` and ``Tensor.device`` say ``cpu``, and
factory calls with ``device="cuda"`` in threads other than the one that imported torch fail as
without emulation.

One module, though longer than most: the patches are one concept, installed together at the one
moment torch is imported and judged together (a call is either emulated here or refused here), so
the list above is the whole contract and this file is the whole implementation.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import json
import re
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from smlaunch.contract import SMLAUNCH_EMULATE_CUDA
from smlaunch.rank.after_import import AfterImport

CUDA_ONLY_MODULES = (
    "apex",
    "amp_C",
    "fused_layer_norm_cuda",
    "flash_attn",
    "flash_attn_2_cuda",
    "transformer_engine",
)
"""Top-level modules whose kernels exist only for CUDA: importing one under emulation fails."""

_OFF_HINT = (
    "run it where the instance type's GPUs exist (SageMaker, or a machine with GPUs), or guard the "
    "call with a CPU fallback; LocalSession(emulate_cuda=False) turns the emulation off"
)
_CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")


class CudaEmulationError(RuntimeError):
    """A call that needs a real CUDA GPU, made in a rank whose GPUs are emulated on the CPU."""

    def __init__(self, call: str, why: str = "has no CPU equivalent") -> None:
        super().__init__(
            f"{call} needs a real CUDA GPU: this job emulates its instance type's GPUs on the CPU "
            f"(smlaunch local mode) and {call} {why}; {_OFF_HINT}."
        )
        self.call = call


@dataclass(frozen=True)
class EmulatedGpus:
    """What the rank pretends to have: ``gpus`` devices of ``model`` with ``memory_gib`` each."""

    gpus: int
    model: str = "GPU"
    memory_gib: float = 16.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EmulatedGpus | None:
        """The emulated devices ``environ`` asks for, or None (absent, unreadable or 0 GPUs)."""
        raw = environ.get(SMLAUNCH_EMULATE_CUDA)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            found = cls(
                int(data["gpus"]), str(data.get("model") or "GPU"), float(data.get("memory_gib") or 16.0)
            )
        except (ValueError, TypeError, KeyError):
            return None
        return found if found.gpus > 0 else None


_active: EmulatedGpus | None = None
_current = 0
_device_types: tuple[type, ...] = ()  # (torch.device,) once torch is patched


def active() -> EmulatedGpus | None:
    """The emulated devices when this process runs under the emulation, else None."""
    return _active


def install_on_import(gpus: EmulatedGpus) -> None:
    """Install the emulation when torch is imported (at once if it already is). Cheap: it imports
    nothing; the patches of ``torch.utils.cpp_extension`` wait for its own import the same way."""
    global _active
    _active = gpus
    hooks: dict[str, Callable[[types.ModuleType], None]] = {
        "torch": _patch_torch,
        "torch.utils.cpp_extension": _patch_cpp_extension,
    }
    for name, patch in hooks.items():
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            sys.meta_path.insert(0, AfterImport(name, patch, "CUDA emulation"))
    sys.meta_path.insert(0, _CudaOnlyModules())


# --- import hooks ----------------------------------------------------------------------------------


class _CudaOnlyModules(importlib.abc.MetaPathFinder):
    """Refuses CUDA-only libraries with a message (an ImportError, so guarded imports fall back)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in CUDA_ONLY_MODULES:
            return None
        raise ModuleNotFoundError(
            f"import {fullname}: {fullname} runs CUDA-only kernels, and this job emulates its instance "
            f"type's GPUs on the CPU (smlaunch local mode); {_OFF_HINT}.",
            name=fullname,
        )


# --- devices ---------------------------------------------------------------------------------------


def _index(device: Any, call: str) -> int:
    """The device index ``device`` names (None and ``"cuda"`` are the current device); raises as
    CUDA does for an index this host does not have."""
    if device is None:
        return _current
    if isinstance(device, str):
        if not _CUDA_DEVICE.match(device):
            raise ValueError(f"{call}: expected a CUDA device, got {device!r}")
        index = int(device[5:]) if ":" in device else _current
    elif isinstance(device, int):
        index = device
    else:
        kind, number = getattr(device, "type", None), getattr(device, "index", None)
        if kind != "cuda":
            raise ValueError(f"{call}: expected a CUDA device, got {device!r}")
        index = _current if number is None else int(number)
    gpus = _active.gpus if _active is not None else 0
    if index >= gpus:
        raise RuntimeError(
            f"{call}: CUDA error: invalid device ordinal {index} (this emulated host has {gpus} GPUs, "
            f"indices 0..{gpus - 1})"
        )
    return index


def _is_cuda(device: Any) -> bool:
    if isinstance(device, str):
        return bool(_CUDA_DEVICE.match(device))
    return isinstance(device, _device_types) and getattr(device, "type", None) == "cuda"


def _cpu(device: Any, call: str) -> Any:
    """``device`` with a CUDA device (checked like CUDA checks it) replaced by ``"cpu"``."""
    if _is_cuda(device):
        _index(device, call)
        return "cpu"
    return device


Args = tuple[Any, ...]


def _map_args(args: Args, kwargs: dict[str, Any], call: str) -> tuple[Args, dict[str, Any]]:
    if "device" in kwargs:
        device = kwargs["device"]
        if isinstance(device, int) and not isinstance(device, bool):
            _index(device, call)
            kwargs = {**kwargs, "device": "cpu"}
        elif _is_cuda(device):
            kwargs = {**kwargs, "device": _cpu(device, call)}
    if any(_is_cuda(a) for a in args):
        args = tuple(_cpu(a, call) for a in args)
    return args, kwargs


def _set_device(device: Any) -> None:
    global _current
    if isinstance(device, int) and device < 0:
        return
    _current = _index(device, "torch.cuda.set_device")


def _exchange_device(device: int) -> int:
    global _current
    previous = _current
    if device >= 0:
        _current = _index(device, "torch.cuda.device")
    return previous


def _properties(index: Any = None) -> Any:
    _index(index, "torch.cuda.get_device_properties")
    assert _active is not None
    major, minor = _capability(_active.model)
    return types.SimpleNamespace(
        name=_device_name(),
        total_memory=int(_active.memory_gib * 1024**3),
        major=major,
        minor=minor,
        multi_processor_count=80,
        is_integrated=False,
        is_multi_gpu_board=False,
        L2_cache_size=0,
        uuid="emulated",
        warp_size=32,
        gcnArchName="",
    )


def _device_name(index: Any = None) -> str:
    assert _active is not None
    return f"NVIDIA {_active.model} (emulated on CPU by smlaunch)"


def _capability(model: str) -> tuple[int, int]:
    known = {
        "V100": (7, 0),
        "T4": (7, 5),
        "A100": (8, 0),
        "A10G": (8, 6),
        "L4": (8, 9),
        "H100": (9, 0),
        "H200": (9, 0),
    }
    return known.get(model, (7, 0))


class _Event:
    """``torch.cuda.Event`` measuring wall-clock time (everything ran synchronously on the CPU)."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **_: Any
    ) -> None:
        self.at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: _Event) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("torch.cuda.Event.elapsed_time: both events must be recorded first")
        return (end.at - self.at) * 1000.0

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass


class _Stream:
    """``torch.cuda.Stream``: work is synchronous on the CPU, so every wait is already satisfied."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device_index = _index(device, "torch.cuda.Stream")

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> _Event:
        event = event or _Event()
        event.record()
        return event

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _lazy_init_refused() -> None:
    """Replaces ``torch.cuda._lazy_init``: what reaches it needs a real CUDA context."""
    caller = sys._getframe(1).f_code.co_name
    raise CudaEmulationError(f"torch.cuda.{caller}()")


def _refused(call: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise CudaEmulationError(call, "captures CUDA kernels")

    return refuse


# --- the patches -------------------------------------------------------------------------------------


def _returns(value: Any) -> Callable[..., Any]:
    def constant(*args: Any, **kwargs: Any) -> Any:
        return value

    return constant


def _patch_torch(torch: Any) -> None:  # a module whose attributes are replaced
    global _device_types
    _device_types = (torch.device,)
    cuda = torch.cuda
    assert _active is not None
    memory = int(_active.memory_gib * 1024**3)
    replacements: dict[str, Any] = {
        "is_available": _returns(True),
        "device_count": _returns(_active.gpus),
        "current_device": lambda: _current,
        "set_device": _set_device,
        "_exchange_device": _exchange_device,
        "_maybe_exchange_device": _exchange_device,
        "get_device_name": _device_name,
        "get_device_properties": _properties,
        "get_device_capability": lambda device=None: _capability(_active.model if _active else ""),
        "is_bf16_supported": lambda including_emulation=True: cuda.get_device_capability()[0] >= 8,
        "mem_get_info": _returns((memory, memory)),
        "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8) for _ in range(_active.gpus)],
        "memory_stats": _returns({}),
        "memory_summary": _returns("CUDA emulated on CPU by smlaunch: no device memory is used.\n"),
        "Event": _Event,
        "Stream": _Stream,
        "current_stream": lambda device=None: _Stream(device),
        "default_stream": lambda device=None: _Stream(device),
        "stream": lambda stream=None: contextlib.nullcontext(stream),
        "_lazy_init": _lazy_init_refused,
    }
    for name in (
        "synchronize",
        "empty_cache",
        "ipc_collect",
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "reset_max_memory_cached",
        "reset_accumulated_memory_stats",
        "set_rng_state",
        "set_rng_state_all",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "seed_all",
        "set_per_process_memory_fraction",
        "init",
    ):
        replacements[name] = _returns(None)
    for name in (
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_cached",
        "max_memory_cached",
        "utilization",
    ):
        replacements[name] = _returns(0)
    for name in ("CUDAGraph", "graph", "make_graphed_callables"):
        replacements[name] = _refused(f"torch.cuda.{name}")
    for name, value in replacements.items():
        setattr(cuda, name, value)
    for name in ("range_push", "range_pop", "range_start", "range_end", "mark"):  # profiler annotations
        setattr(cuda.nvtx, name, _returns(None))
    cuda.nvtx.range = lambda *args, **kwargs: contextlib.nullcontext()
    for module_name in ("torch.cuda.memory", "torch.cuda.random"):
        module = sys.modules.get(module_name)
        if module is not None:
            for name, value in replacements.items():
                if hasattr(module, name):
                    setattr(module, name, value)

    tensor, module_cls = torch.Tensor, torch.nn.Module

    def tensor_cuda(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        _index(device, "Tensor.cuda")
        return self

    def module_cuda(self: Any, device: Any = None) -> Any:
        _index(device, "Module.cuda")
        return self

    original_tensor_to, original_module_to = tensor.to, module_cls.to

    @functools.wraps(original_tensor_to)
    def tensor_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_args(args, kwargs, "Tensor.to")
        return original_tensor_to(self, *args, **kwargs)

    @functools.wraps(original_module_to)
    def module_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_args(args, kwargs, "Module.to")
        return original_module_to(self, *args, **kwargs)

    tensor.cuda, module_cls.cuda = tensor_cuda, module_cuda  # type: ignore[method-assign]
    tensor.to, module_cls.to = tensor_to, module_to  # type: ignore[method-assign]
    tensor.pin_memory = lambda self, device=None: self  # type: ignore[method-assign]

    original_load = torch.load

    @functools.wraps(original_load)
    def load(*args: Any, **kwargs: Any) -> Any:
        location = kwargs.get("map_location")
        targets = location.values() if isinstance(location, Mapping) else [location]
        if any(_is_cuda(v) for v in targets):
            kwargs["map_location"] = "cpu"
        return original_load(*args, **kwargs)

    torch.load = load
    original_default_device = torch.set_default_device
    torch.set_default_device = lambda device: original_default_device(_cpu(device, "set_default_device"))

    _patch_amp(torch)
    _patch_distributed(torch)
    _DeviceMode(torch).enter()


def _patch_amp(torch: Any) -> None:  # a module whose attributes are replaced
    """CUDA autocast and GradScaler off, as torch itself turns them off without CUDA."""
    autocast, scaler = torch.amp.autocast_mode.autocast, torch.amp.grad_scaler.GradScaler
    autocast_init, scaler_init = autocast.__init__, scaler.__init__

    @functools.wraps(autocast_init)
    def init_autocast(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == "cuda":
            if len(args) > 1:  # (dtype, enabled, cache_enabled)
                args = (args[0], False, *args[2:])
            else:
                kwargs["enabled"] = False
        autocast_init(self, device_type, *args, **kwargs)

    @functools.wraps(scaler_init)
    def init_scaler(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        if device == "cuda":
            kwargs["enabled"] = False
            args = args[:4]
        scaler_init(self, device, *args, **kwargs)

    autocast.__init__, scaler.__init__ = init_autocast, init_scaler


def _patch_distributed(torch: Any) -> None:  # a module whose attributes are replaced
    """NCCL requested -> gloo; DDP without device ids for a module on the CPU."""
    dist = torch.distributed
    if not dist.is_available():
        return

    def gloo(backend: Any) -> Any:
        return "gloo" if isinstance(backend, str) and "nccl" in backend.lower() else backend

    init, new_group = dist.init_process_group, dist.new_group

    @functools.wraps(init)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        device_id = kwargs.get("device_id")
        if device_id is not None and (_is_cuda(device_id) or isinstance(device_id, int)):
            _index(device_id, "init_process_group(device_id=...)")
            kwargs["device_id"] = None  # gloo binds no device
        return init(gloo(backend), *args, **kwargs)

    @functools.wraps(new_group)
    def new_group_gloo(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = gloo(kwargs["backend"])
        return new_group(*args, **kwargs)

    dist.init_process_group, dist.new_group = init_process_group, new_group_gloo
    c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is not None:
        c10d.init_process_group, c10d.new_group = init_process_group, new_group_gloo

    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__

    @functools.wraps(ddp_init)
    def init_ddp(
        self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        if all(p.device.type == "cpu" for p in module.parameters()):
            for device in device_ids or []:
                _index(device, "DistributedDataParallel(device_ids=...)")
            device_ids, output_device = None, None
        ddp_init(self, module, device_ids, output_device, *args, **kwargs)

    ddp.__init__ = init_ddp


def _patch_cpp_extension(extension: Any) -> None:  # a module whose attributes are replaced
    """CUDA extensions cannot be built or loaded: refuse them by name; C++ ones work as usual."""

    Call = Callable[..., Any]

    def refuse(name: str, original: Call, cuda_sources: Callable[..., bool]) -> Call:
        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if cuda_sources(*args, **kwargs):
                label = kwargs.get("name", args[0] if args else "?")
                raise CudaEmulationError(
                    f"torch.utils.cpp_extension.{name}(name={label!r})", "compiles CUDA kernels"
                )
            return original(*args, **kwargs)

        return guarded

    def load_has_cuda(name: Any = None, sources: Any = (), *args: Any, **kwargs: Any) -> bool:
        sources = kwargs.get("sources", sources)
        sources = [sources] if isinstance(sources, str) else list(sources or [])
        return bool(kwargs.get("with_cuda")) or any(str(s).endswith((".cu", ".cuh")) for s in sources)

    def inline_has_cuda(*args: Any, **kwargs: Any) -> bool:
        return bool(kwargs.get("cuda_sources") or (len(args) > 2 and args[2]) or kwargs.get("with_cuda"))

    extension.load = refuse("load", extension.load, load_has_cuda)
    extension.load_inline = refuse("load_inline", extension.load_inline, inline_has_cuda)
    extension.CUDAExtension = refuse("CUDAExtension", extension.CUDAExtension, _returns(True))


class _DeviceMode:
    """The ``TorchFunctionMode`` that maps CUDA ``device`` arguments of torch functions to the CPU."""

    def __init__(self, torch: types.ModuleType) -> None:
        from torch.overrides import TorchFunctionMode

        device_type = torch.device

        class DeviceMode(TorchFunctionMode):
            def __torch_function__(
                self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
            ) -> Any:
                kwargs = kwargs or {}
                if func is device_type:  # torch.device("cuda", 1) stays a CUDA device, as on a GPU
                    return func(*args, **kwargs)
                if "device" in kwargs or args:
                    args, kwargs = _map_args(args, kwargs, getattr(func, "__name__", "torch"))
                return func(*args, **kwargs)

        self.mode = DeviceMode()

    def enter(self) -> None:
        self.mode.__enter__()
