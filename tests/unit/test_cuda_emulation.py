"""The CUDA emulation layer (``smlaunch/rank/cuda_emulation.py``), as a rank gets it from the rank bootstrap:
one real interpreter started with ``smlaunch/rank/_site`` on its path and ``SMLAUNCH_EMULATE_CUDA`` set."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.contract.processes import free_port
from smlaunch.rank.boot import BOOT_DIR
from smlaunch.sdk.backends.emulated import layout
from tests.unit._probe import run_probe

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, os
    import torch, torch.nn as nn, torch.distributed as dist

    facts = {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
             "name": torch.cuda.get_device_name(0), "bf16": torch.cuda.is_bf16_supported(),
             "memory": torch.cuda.get_device_properties(0).total_memory}
    device = torch.device("cuda", 2)
    torch.cuda.set_device(device)
    facts["device_object"] = [str(device), device.type, torch.cuda.current_device()]
    torch.cuda.set_device("cuda:3")
    facts["current"] = torch.cuda.current_device()
    with torch.cuda.device(1):
        facts["inside"] = torch.cuda.current_device()
    facts["after"] = torch.cuda.current_device()
    x = torch.randn(4, 3, device="cuda")
    devices = [x, torch.ones(2, device=torch.device("cuda", 1)), x.to("cuda:2"), x.cuda(),
               torch.zeros(1, device=0), x.to(torch.device("cuda"), non_blocking=True), x.pin_memory()]
    facts["devices"] = sorted({str(t.device) for t in devices})
    facts["same"] = x.cuda() is x and x.to("cuda") is x
    model = nn.Linear(3, 2).cuda().to("cuda:1")
    facts["model"] = str(next(model.parameters()).device)
    with torch.autocast("cuda", dtype=torch.float16):
        facts["autocast"] = str(model(x).dtype)
    with torch.cuda.amp.autocast():
        facts["cuda_amp"] = str(model(x).dtype)
    facts["scaler"] = [torch.cuda.amp.GradScaler().is_enabled(), torch.amp.GradScaler("cuda").is_enabled()]
    torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.manual_seed_all(1)
    torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("forward"):
        pass
    facts["allocated"] = [torch.cuda.memory_allocated(), torch.cuda.max_memory_reserved()]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); end.record(); torch.cuda.current_stream().synchronize()
    facts["elapsed"] = start.elapsed_time(end) >= 0
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PROBE_PORT"])
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 3))
    facts["backend"] = dist.get_backend()
    facts["ddp"] = type(nn.parallel.DistributedDataParallel(model, device_ids=[0])).__name__
    dist.destroy_process_group()
    errors = {}
    for name, call in {
        "ordinal": lambda: torch.cuda.set_device(8),
        "tensor_ordinal": lambda: torch.zeros(1, device="cuda:9"),
        "blas": torch.cuda.current_blas_handle,
        "graph": torch.cuda.CUDAGraph,
        "apex": lambda: __import__("apex"),
        "flash_attn": lambda: __import__("flash_attn"),
        "extension": lambda: __import__("torch.utils.cpp_extension", fromlist=["load"]).load(
            name="fused", sources=["fused.cpp", "kernel.cu"]),
    }.items():
        try:
            call()
        except (RuntimeError, ImportError) as error:
            errors[name] = f"{type(error).__name__}: {error}"
    facts["errors"] = errors
    print(json.dumps(facts))
""")


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_probe(
        tmp_path_factory.mktemp("probe"),
        PROBE,
        {
            contract.SMLAUNCH_EMULATE_CUDA: json.dumps({"gpus": 8, "model": "A100", "memory_gib": 40}),
            "PYTHONPATH": os.pathsep.join([BOOT_DIR, str(REPO)]),
            "PROBE_PORT": str(free_port()),
        },
    )


def test_cuda_queries_answer_as_the_emulated_instance(facts: dict) -> None:
    assert facts["available"] is True and facts["count"] == 8
    assert facts["name"] == "NVIDIA A100 (emulated on CPU by smlaunch)" and facts["bf16"] is True
    assert facts["memory"] == 40 * 1024**3
    assert facts["device_object"] == ["cuda:2", "cuda", 2]  # a CUDA device, as on a GPU
    assert (facts["current"], facts["inside"], facts["after"]) == (3, 1, 3)
    assert facts["allocated"] == [0, 0] and facts["elapsed"] is True


def test_tensors_and_modules_sent_to_cuda_stay_on_cpu(facts: dict) -> None:
    assert facts["devices"] == ["cpu"] and facts["model"] == "cpu" and facts["same"] is True


def test_amp_is_off_and_nccl_is_gloo_as_on_a_cpu_machine(facts: dict) -> None:
    assert facts["autocast"] == facts["cuda_amp"] == "torch.float32"
    assert facts["scaler"] == [False, False]
    assert facts["backend"] == "gloo" and facts["ddp"] == "DistributedDataParallel"


def test_what_needs_a_real_gpu_fails_naming_the_call(facts: dict) -> None:
    errors = facts["errors"]
    assert "invalid device ordinal 8 (this emulated host has 8 GPUs" in errors["ordinal"]
    assert "invalid device ordinal 9" in errors["tensor_ordinal"]
    assert errors["blas"].startswith(
        "CudaEmulationError: torch.cuda.current_blas_handle() needs a real CUDA GPU"
    )
    assert errors["graph"].startswith("CudaEmulationError: torch.cuda.CUDAGraph needs a real CUDA GPU")
    assert errors["apex"].startswith("ModuleNotFoundError: import apex: apex runs CUDA-only kernels")
    assert errors["flash_attn"].startswith("ModuleNotFoundError: import flash_attn:")
    assert errors["extension"].startswith(
        "CudaEmulationError: torch.utils.cpp_extension.load(name='fused') needs a real CUDA GPU"
    )
    assert all("LocalSession(emulate_cuda=False)" in e for e in errors.values() if "ordinal" not in e)


def test_emulated_gpus_follow_the_instance_type_and_the_session() -> None:
    from smlaunch.sdk.backends.emulated.job_settings import EmulatedGpus, JobSettings, ProcessSettings
    from smlaunch.sdk.sessions.settings import Settings

    def emulated(instance_type: str, emulate_cuda: bool | None, machine_gpus: int) -> EmulatedGpus | None:
        spec = _spec().model_copy(
            update={
                "ResourceConfig": _spec().ResourceConfig.model_copy(update={"InstanceType": instance_type})
            }
        )
        session = Settings(root=Path("/tmp/jobs"), emulate_cuda=emulate_cuda)
        executor = ProcessSettings(python="python")
        settings = JobSettings.resolve(spec, session, executor, machine_gpus=machine_gpus, host_gpus=None)
        return settings.emulate_cuda

    p3 = {"gpus": 8, "model": "V100", "memory_gib": 16.0}
    assert emulated("ml.p3.16xlarge", None, 0) == EmulatedGpus(**p3)
    assert emulated("ml.p3.16xlarge", False, 0) is None
    assert emulated("ml.c5.xlarge", None, 0) is None
    assert emulated("ml.p3.16xlarge", None, 8) is None
    assert emulated("ml.p3.16xlarge", True, 8) == EmulatedGpus(**p3)
    env = layout.host_environment(
        _spec(), Path("/tmp/h"), {"algo-1": "127.0.0.1"}, 1234, 2, 1.0, 8, EmulatedGpus(**p3)
    )
    assert env[contract.SMLAUNCH_NUM_GPUS] == "8"
    assert json.loads(env[contract.SMLAUNCH_EMULATE_CUDA]) == p3


def _spec():  # type: ignore[no-untyped-def]
    from smlaunch.sdk.request.spec import TrainingJobSpec

    return TrainingJobSpec(
        TrainingJobName="emulated",
        AlgorithmSpecification={"TrainingImage": "x", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::000000000000:role/test",
        OutputDataConfig={"S3OutputPath": "file:///tmp/out"},
        ResourceConfig={"InstanceType": "ml.p3.16xlarge", "InstanceCount": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
