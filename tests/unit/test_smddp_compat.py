"""The smdistributed.dataparallel compat API, in a real one-rank process group (a subprocess, so the
test process's torch.distributed state is untouched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from smlaunch.contract.processes import free_port
from smlaunch.runtime.env_vars import compat_dir

SCRIPT = r"""
import json
import torch
import smdistributed.dataparallel.torch.distributed as dist
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
import smdistributed.dataparallel.torch.torch_smddp as torch_smddp
import importlib

out = {"available": dist.is_available(), "before": dist.is_initialized()}
dist.init_process_group()
dist.init_process_group()  # idempotent, as smddp's
importlib.reload(torch_smddp)  # registering twice is harmless
t = torch.tensor([2.0])
dist.all_reduce(t, op=dist.ReduceOp.SUM)
dist.broadcast(t, 0)
dist.barrier()
model = DDP(torch.nn.Linear(2, 1), device_ids=[dist.get_local_rank()])  # GPU-style call on a CPU module
model(torch.ones(3, 2)).sum().backward()
out.update(after=dist.is_initialized(), rank=dist.get_rank(), world=dist.get_world_size(),
           local_rank=dist.get_local_rank(), local_size=dist.get_local_size(), backend=dist.get_backend(),
           sum=t.item(), grad=model.module.weight.grad is not None, new_group=callable(dist.new_group))
try:
    dist.no_such_function
except AttributeError as error:
    out["missing"] = str(error)
print(json.dumps(out))
dist.destroy_process_group()
"""


def test_smddp_api_on_a_one_rank_world() -> None:
    path = str(compat_dir())
    assert path is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_"))}
    env.update(
        PYTHONPATH=path,
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["available"] is True and out["before"] is False and out["after"] is True
    assert (out["rank"], out["world"], out["local_rank"], out["local_size"]) == (0, 1, 0, 1)
    assert out["backend"] == "smddp" and out["sum"] == 2.0 and out["grad"] is True and out["new_group"]
    assert "no_such_function" in out["missing"]


def test_local_rank_without_a_launcher_says_how_to_get_one() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")}
    env["PYTHONPATH"] = str(compat_dir())
    code = "import smdistributed.dataparallel.torch.distributed as d; d.get_local_rank()"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "LOCAL_RANK is not set" in done.stderr and "distribution=" in done.stderr


def test_tensorflow_flavour_is_refused_naming_the_alternative() -> None:
    env = dict(os.environ, PYTHONPATH=str(compat_dir()))
    code = "import smdistributed.dataparallel.tensorflow"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "needs the real library" in done.stderr
    assert "multi_worker_mirrored_strategy" in done.stderr
