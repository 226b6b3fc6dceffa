"""The ``horovod.torch`` shim against torch.distributed: two real ranks in a gloo group (subprocesses,
so the test process's torch.distributed state is untouched), each Horovod call compared with the
torch.distributed call that computes the same thing, and DistributedOptimizer against DDP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smlaunch.contract.processes import free_port
from smlaunch.runtime.env_vars import horovod_compat_dir

SCRIPT = r"""
import json, os, sys
import torch
import torch.distributed as dist
import horovod.torch as hvd

out = {"before": hvd.is_initialized()}
try:
    hvd.size()
except ValueError as error:
    out["uninitialized"] = str(error)
hvd.init()
hvd.init()  # idempotent
r, n = hvd.rank(), hvd.size()
out.update(rank=r, size=n, local_rank=hvd.local_rank(), local_size=hvd.local_size(),
           cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(), dist_rank=dist.get_rank(),
           mpi_threads=hvd.mpi_threads_supported(), nccl=hvd.nccl_built(), gloo=hvd.gloo_enabled())
checks = {}

def same(name, got, want):
    checks[name] = bool(torch.equal(got, want)) if isinstance(want, torch.Tensor) else got == want

x = torch.arange(6, dtype=torch.float32).reshape(2, 3) * (r + 1) + r
s = x.clone(); dist.all_reduce(s)
same("allreduce_average", hvd.allreduce(x), s / n)
same("allreduce_input_kept", x, torch.arange(6, dtype=torch.float32).reshape(2, 3) * (r + 1) + r)
same("allreduce_sum", hvd.allreduce(x, op=hvd.Sum), s)
same("allreduce_average_false", hvd.allreduce(x, average=False), s)
m = x.clone(); dist.all_reduce(m, op=dist.ReduceOp.MAX)
same("allreduce_max", hvd.allreduce(x, op=hvd.Max), m)
same("allreduce_scaled", hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), s)
y = x.clone(); hvd.allreduce_(y); same("allreduce_", y, s / n)
h = hvd.allreduce_async(x, op=hvd.Sum); same("allreduce_async", hvd.synchronize(h), s)
same("allreduce_fp16", hvd.allreduce(x, compression=hvd.Compression.fp16, op=hvd.Sum), s)
same("allreduce_fp16_dtype", hvd.allreduce(x, compression=hvd.Compression.fp16).dtype, torch.float32)
ints = torch.tensor([r + 1, 10 * (r + 1)])
same("allreduce_int_sum", hvd.allreduce(ints, op=hvd.Sum), torch.tensor([3, 30]))
try:
    hvd.allreduce(x, op=hvd.Adasum)
except NotImplementedError as error:
    out["adasum"] = str(error)
# gradient of an average is the average of the gradients
w = torch.full((2,), float(r + 1), requires_grad=True)
(hvd.allreduce(w) * torch.tensor([1.0, 2.0])).sum().backward()
same("allreduce_grad", w.grad, torch.tensor([1.0, 2.0]))

rows = torch.full((r + 1, 2), float(r))  # first dimensions differ between ranks
parts = [torch.empty(i + 1, 2) for i in range(n)]
for i, p in enumerate(parts):
    dist.broadcast(p.copy_(rows) if i == r else p, i)
same("allgather", hvd.allgather(rows), torch.cat(parts))
same("allgather_scalar", hvd.allgather(torch.tensor(float(r))), torch.arange(n, dtype=torch.float32))
b = x.clone(); dist.broadcast(b, 1)
same("broadcast", hvd.broadcast(x, root_rank=1), b)
z = x.clone(); hvd.broadcast_(z, 1); same("broadcast_", z, b)
same("broadcast_object", hvd.broadcast_object({"from": r, "l": [r]}, root_rank=1), {"from": 1, "l": [1]})
gathered = [None] * n; dist.all_gather_object(gathered, ("r", r))
same("allgather_object", hvd.allgather_object(("r", r)), gathered)

a2a_in = torch.arange(4, dtype=torch.float32) + 10 * r
a2a_out = torch.empty(4); dist.all_to_all_single(a2a_out, a2a_in)
same("alltoall", hvd.alltoall(a2a_in), a2a_out)
splits = [1, 3] if r == 0 else [2, 2]
got, received = hvd.alltoall(a2a_in, splits=splits)
want = torch.tensor([0.0, 10.0, 11.0]) if r == 0 else torch.tensor([1.0, 2.0, 3.0, 12.0, 13.0])
same("alltoall_splits", got, want)
same("alltoall_received", received.tolist(), [1, 2] if r == 0 else [3, 2])
hvd.barrier()
out["join"] = hvd.join()

# DistributedOptimizer (with an LR scheduler) against DDP, on different data per rank.
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
ddp_net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
with torch.no_grad():
    for p in net.parameters():
        p.add_(r)  # ranks start apart: broadcast_parameters must fix it
ddp_net.load_state_dict(net.state_dict())
hvd.broadcast_parameters(net.state_dict(), root_rank=0)
dist.broadcast(torch.tensor(0.0), 0)
ddp = torch.nn.parallel.DistributedDataParallel(ddp_net)  # DDP broadcasts rank 0's weights too
base = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
opt = hvd.DistributedOptimizer(base, named_parameters=net.named_parameters())
hvd.broadcast_optimizer_state(opt, root_rank=0)
ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
ddp_sched = torch.optim.lr_scheduler.StepLR(ddp_opt, step_size=2, gamma=0.5)
out["isinstance_sgd"] = isinstance(opt, torch.optim.SGD)
g = torch.Generator().manual_seed(100 + r)
for step in range(5):
    data, target = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(net(data), target).backward()
    if step == 3:  # Horovod's documented clipping pattern
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        with opt.skip_synchronize():
            opt.step()
    else:
        opt.step()
    sched.step()
    ddp_opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(data), target).backward()
    if step == 3:
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 0.5)
    ddp_opt.step()
    ddp_sched.step()
diffs = [(a - b).abs().max().item() for a, b in zip(net.parameters(), ddp.module.parameters())]
out["max_diff_vs_ddp"] = max(diffs)
out["lr"] = opt.param_groups[0]["lr"]
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
out["weights"] = flat.tolist()

# backward_passes_per_step=2 accumulates two passes locally, then averages the sum across ranks.
acc = torch.nn.Linear(2, 1, bias=False)
torch.nn.init.zeros_(acc.weight)
acc_opt = hvd.DistributedOptimizer(torch.optim.SGD(acc.parameters(), lr=1.0), backward_passes_per_step=2,
                                   gradient_predivide_factor=2.0)
for i in range(2):
    acc(torch.tensor([[float(r + 1), float(i)]])).sum().backward()
acc_opt.step()
out["accumulated"] = acc.weight.detach().reshape(-1).tolist()
try:
    hvd.DistributedOptimizer(torch.optim.SGD(acc.parameters(), lr=1.0),
                             named_parameters=[("w", torch.zeros(1))])
except ValueError as error:
    out["unnamed"] = str(error)
out["checks"] = checks
print("RESULT " + json.dumps(out), flush=True)
hvd.shutdown()
out_after = hvd.is_initialized()
print("AFTER " + json.dumps(out_after), flush=True)
# The DDP reducer above still holds its gloo group; freeing it during interpreter finalization
# aborts a finished process ("terminate called without an active exception",
# pytorch/pytorch#179291). smlaunch/rank/boot.py guards real ranks; this bare script just leaves.
os._exit(0)
"""


def _run_two_ranks(tmp_path: Path) -> list[dict[str, Any]]:
    root = horovod_compat_dir()
    assert root is not None  # this machine has no real Horovod
    script = tmp_path / "hvd_check.py"
    script.write_text(SCRIPT)
    port = str(free_port())
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SM_", "SMLAUNCH_", "OMPI_", "RANK", "LOCAL_", "WORLD_", "MASTER_"))
    }
    procs = []
    for rank in range(2):
        env = dict(
            base,
            PYTHONPATH=os.pathsep.join([str(root), base.get("PYTHONPATH", "")]),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            for other in procs:
                if other.poll() is None and proc.returncode not in (None, 0):
                    other.kill()
        assert proc.returncode == 0, stderr[-4000:]
        line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
        assert "AFTER false" in stdout
    return results


@pytest.fixture(scope="module")
def torchrun_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _run_two_ranks(tmp_path_factory.mktemp("hvd"))


@pytest.mark.slow
def test_every_collective_equals_torch_distributed(torchrun_results: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(torchrun_results):
        failed = [name for name, ok in out["checks"].items() if not ok]
        assert not failed, f"rank {rank}: {failed}"
        assert len(out["checks"]) == 21
        assert "use hvd.init()" in out["uninitialized"] and out["before"] is False
        assert "Adasum needs the real Horovod" in out["adasum"]


def test_topology_under_torchrun(torchrun_results: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(torchrun_results):
        assert (out["rank"], out["size"], out["dist_rank"]) == (rank, 2, rank)
        assert (out["local_rank"], out["local_size"], out["cross_rank"], out["cross_size"]) == (rank, 2, 0, 1)
        assert out["mpi_threads"] is False and out["nccl"] == 0 and out["gloo"] is True
        assert out["join"] in (0, 1)
    assert torchrun_results[0]["join"] == torchrun_results[1]["join"]


def test_distributed_optimizer_matches_ddp(torchrun_results: list[dict[str, Any]]) -> None:
    first, second = torchrun_results
    for out in torchrun_results:
        assert out["max_diff_vs_ddp"] < 1e-6 and out["isinstance_sgd"] is True
        assert out["lr"] == pytest.approx(0.1 * 0.5**2)  # the scheduler drove the wrapped optimizer
        assert "were not named" in out["unnamed"]
    assert first["weights"] == second["weights"]  # broadcast_parameters + averaged gradients
    # Rank r's two passes give gradient (r+1)*2 and 0+1 summed; averaged over ranks: [3, 1].
    assert first["accumulated"] == second["accumulated"] == pytest.approx([-3.0, -1.0])


def test_without_a_launcher_it_is_a_world_of_one_and_refusals_say_why() -> None:
    code = (
        "import os, horovod.torch as hvd, torch\n"
        "os.environ['HOROVOD_TIMELINE'] = '/tmp/timeline.json'\n"
        "try:\n    hvd.init()\nexcept NotImplementedError as e:\n    print('TIMELINE', e)\n"
        "del os.environ['HOROVOD_TIMELINE']\n"
        "os.environ.update(OMPI_COMM_WORLD_RANK='0', OMPI_COMM_WORLD_SIZE='2')\n"
        "try:\n    hvd.init()\nexcept RuntimeError as e:\n    print('RENDEZVOUS', e)\n"
        "del os.environ['OMPI_COMM_WORLD_RANK'], os.environ['OMPI_COMM_WORLD_SIZE']\n"
        "hvd.init(); print(hvd.size(), hvd.rank(), hvd.allreduce(torch.tensor([3.0])).item())\n"
        "try:\n    hvd.elastic.run\nexcept NotImplementedError as e:\n    print('ELASTIC', e)\n"
        "try:\n    import horovod.tensorflow.keras\nexcept ImportError as e:\n    print('TF', e)\n"
    )
    root = horovod_compat_dir()
    assert root is not None
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "RANK", "LOCAL_", "WORLD_", "MASTER_", "HOROVOD_"))
    }
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("TIMELINE") and "HOROVOD_TIMELINE" in lines[0] and "real Horovod" in lines[0]
    assert lines[1].startswith("RENDEZVOUS") and "MASTER_ADDR is not set" in lines[1] and "'mpi'" in lines[1]
    assert lines[2] == "1 0 3.0"
    assert lines[3].startswith("ELASTIC") and "elastic Horovod needs the real Horovod" in lines[3]
    assert "Horovod for TensorFlow needs the real Horovod, in a container image that has it" in lines[4]
