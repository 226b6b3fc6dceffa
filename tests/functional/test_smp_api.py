"""The smp API in one process (world size 1, a real gloo process group on 127.0.0.1): the shim's
import and auto-init rule, repeated init, step rules, save/load naming, hooks, activation
checkpointing. Multi-rank behaviour is in test_smp_engine.py."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from smlaunch.rank.smp import api as smp
from smlaunch.rank.smp.state import shutdown
from smlaunch.runtime.env_vars import compat_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SM_HP_MP_PARAMETERS",
        "OMPI_COMM_WORLD_RANK",
        "SMP_TORCH_VIRTUAL_STAGES",
    ):
        monkeypatch.delenv(name, raising=False)
    try:
        yield
    finally:
        shutdown()


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_step_rules_and_outputs(one_rank: None) -> None:
    smp.init({"microbatches": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        smp.init({"microbatches": 4})
    assert any("already called" in str(w.message) for w in caught) and smp.num_microbatches() == 2
    assert (smp.rank(), smp.size(), smp.pp_size(), smp.dp_size(), smp.get_dp_group()) == (0, 1, 1, 1, [0])
    model = smp.DistributedModel(_mlp())
    with pytest.raises(smp.SMPValidationError, match="Only one"):
        smp.DistributedModel(_mlp())
    opt = smp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ref = _mlp()

    @smp.step
    def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(x)
        loss = F.cross_entropy(out, y)
        model.backward(loss)
        return loss, out

    x, y = torch.randn(6, 4), torch.tensor([0, 1, 1, 0, 1, 0])
    opt.zero_grad()
    loss, out = train_step(model, x, y)
    opt.step()
    F.cross_entropy(ref(x), y).backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad
    for a, b in zip(model.module.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert len(loss) == 2 and out.concat().shape == (6, 2) and not out.concat().requires_grad
    with pytest.raises(smp.TensorSplitError, match="divisible"):
        train_step(model, torch.randn(5, 4), torch.zeros(5, dtype=torch.long))
    with pytest.raises(smp.SMPValidationError, match=r"inside an @smp\.step"):
        model.backward(torch.ones(()))


def test_save_load_naming_hooks_and_checkpointing(one_rank: None, tmp_path: Path) -> None:
    smp.init({})
    net = _mlp()
    smp.set_activation_checkpointing(net, strategy="each")
    model = smp.DistributedModel(net)
    seen: list[object] = []
    model.register_post_partition_hook(lambda m, o: seen.append(m))
    assert seen == [model]  # pp=1 partitions at construction
    smp.save(model.local_state_dict(), tmp_path / "ck", partial=True)
    assert (tmp_path / "ck_0_0.pt").exists()
    loaded = smp.load(tmp_path / "ck", partial=True)
    assert loaded["_smp_is_partial"] is True
    model.load_state_dict(loaded)
    smp.save(model.state_dict(), tmp_path / "full.pt", partial=False)
    plain = _mlp()
    plain.load_state_dict(torch.load(tmp_path / "full.pt", weights_only=True))

    @smp.step
    def grads(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).pow(2).mean()
        model.backward(loss)
        return loss

    x = torch.randn(4, 4)
    grads(model, x)
    plain(x).pow(2).mean().backward()
    for a, b in zip(model.module.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)  # checkpointing recomputes, same gradients


def test_shim_imports_and_auto_inits_under_the_smp_launcher_variables(tmp_path: Path) -> None:
    compat = compat_dir()
    assert compat is not None
    script = (
        "import smdistributed.modelparallel.torch as smp\n"
        "print(smp.is_initialized(), smp.pp_size(), smp.num_microbatches())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "OMPI_", "SMP_"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(compat), str(REPO)]),
            "SM_HP_MP_PARAMETERS": '{"partitions": 1, "microbatches": 3}',
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "1",
        }
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1", "3"]
    env["SMP_MANUAL_INIT"] = "1"
    check = "import smdistributed.modelparallel.torch as smp; print(smp.is_initialized())"
    manual = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60
    )
    assert manual.stdout.strip() == "False", manual.stderr
