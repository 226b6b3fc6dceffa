"""smp v1 API completeness (``smdistributed.modelparallel.torch`` shim): ``DistributedOptimizer`` is a
real ``torch.optim.Optimizer`` every LR scheduler drives, ``smp.amp.GradScaler``, ``smp.nn``,
``smp.state``, ``smp.checkpoint``, and unsupported names that say what to use. One real interpreter
with the shim on its path runs a one-rank ``smp.init`` and reports what it saw."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.unit._probe import run_probe

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json
    import torch
    import smdistributed.modelparallel.torch as smp
    from smdistributed.modelparallel.torch.amp import GradScaler
    from torch.optim import lr_scheduler as S

    smp.init({"partitions": 1, "microbatches": 2})
    facts = {"cfg": [smp.state.cfg.microbatches, smp.state.cfg.pipeline_parallel_degree],
             "ranks": [smp.rank(), smp.dp_rank(), smp.local_rank(), smp.dp_size()],
             "amp_module": GradScaler is smp.amp.GradScaler}
    layers = [smp.nn.DistributedLinear(4, 8), smp.nn.FusedLayerNorm(8), smp.nn.DistributedEmbedding(5, 3)]
    facts["nn"] = [type(m).__mro__[1].__name__ for m in layers]
    model = smp.DistributedModel(torch.nn.Sequential(layers[0], layers[1], torch.nn.Linear(8, 1)))
    schedulers = {
        "StepLR": lambda o: S.StepLR(o, 1, 0.5), "MultiStepLR": lambda o: S.MultiStepLR(o, [1]),
        "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, 5),
        "LambdaLR": lambda o: S.LambdaLR(o, lambda e: 0.9**e),
        "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=10),
        "CyclicLR": lambda o: S.CyclicLR(o, 0.01, 0.1),
        "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, patience=0),
        "CosineAnnealingWarmRestarts": lambda o: S.CosineAnnealingWarmRestarts(o, 2),
        "SequentialLR": lambda o: S.SequentialLR(o, [S.LinearLR(o), S.ExponentialLR(o, 0.9)], milestones=[2]),
    }
    torch.manual_seed(0)
    batches = [torch.randn(4, 4) for _ in range(3)]
    facts["lr"], facts["isinstance"] = {}, []
    for name, make in schedulers.items():
        for wrapped in (True, False):
            torch.manual_seed(1)
            net = torch.nn.Linear(4, 1)
            inner = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
            optimizer = smp.DistributedOptimizer(inner) if wrapped else inner
            facts["isinstance"].append(isinstance(optimizer, torch.optim.Optimizer))
            scheduler = make(optimizer)
            for x in batches:
                optimizer.zero_grad()
                net(x).pow(2).mean().backward()
                optimizer.step()
                scheduler.step(1.0) if name == "ReduceLROnPlateau" else scheduler.step()
            facts["lr"].setdefault(name, []).append([inner.param_groups[0]["lr"], net.weight.sum().item()])
    inner = torch.optim.Adam(model.parameters(), lr=0.01)
    optimizer = smp.DistributedOptimizer(inner)
    scaler = smp.amp.GradScaler()

    @smp.step
    def train_step(model, x):
        loss = model(x).pow(2).mean()
        model.backward(scaler.scale(loss))
        return loss

    calls = []
    optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append(1))
    optimizer.zero_grad()
    train_step(model, batches[0])
    scaler.step(optimizer)
    scaler.update()
    facts["scaler"] = [scaler.is_enabled(), scaler.get_scale()]
    facts["hook_calls"] = len(calls)
    facts["shared"] = [optimizer.param_groups is inner.param_groups, optimizer.state is inner.state,
                       optimizer.defaults is inner.defaults]
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)
    facts["after_load_shared"] = optimizer.param_groups is inner.param_groups
    facts["state_keys"] = sorted(state)
    optimizer.zero_grad()
    facts["zeroed"] = all(p.grad is None for p in model.parameters())
    x = torch.randn(2, 4, requires_grad=True)
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    facts["checkpoint"] = [torch.allclose(smp.checkpoint(seq, x), seq(x)),
                           torch.allclose(smp.checkpoint_sequential(seq, x, "group_2"), seq(x))]
    errors = {}
    for name, call in {
        "tp_register": lambda: smp.tp_register(object),
        "set_tensor_parallelism": lambda: smp.set_tensor_parallelism(seq, True),
        "DistributedTransformer": lambda: smp.nn.DistributedTransformer(num_layers=2),
        "FlashAttentionLayer": lambda: smp.nn.FlashAttentionLayer(),
        "optimizers": lambda: smp.optimizers,
        "unknown": lambda: smp.no_such_name,
    }.items():
        try:
            call()
        except (ValueError, AttributeError) as error:
            errors[name] = f"{type(error).__name__}: {error}"
    smp.set_tensor_parallelism(seq, False)
    facts["errors"] = errors
    print(json.dumps(facts))
""")


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_probe(
        tmp_path_factory.mktemp("smp"),
        PROBE,
        {"PYTHONPATH": os.pathsep.join([str(REPO / "smlaunch" / "rank" / "compat"), str(REPO)])},
        drop=(
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "SM_HP_MP_PARAMETERS",
            "OMPI_COMM_WORLD_RANK",
        ),
    )


def test_distributed_optimizer_is_an_optimizer_every_scheduler_drives(facts: dict) -> None:
    assert all(facts["isinstance"])
    for name, (wrapped, plain) in facts["lr"].items():
        assert wrapped == plain, name  # same learning rates and weights as the bare optimizer
    assert facts["shared"] == [True, True, True] and facts["after_load_shared"] is True
    assert facts["state_keys"] == ["param_groups", "state"] and facts["zeroed"] is True
    assert facts["hook_calls"] == 1  # step hooks registered on the wrapper run


def test_amp_nn_state_and_checkpoint(facts: dict) -> None:
    assert facts["scaler"] == [False, 1.0]  # no CUDA: a pass-through, as torch's own GradScaler
    assert facts["amp_module"] is True
    assert facts["nn"] == ["Linear", "LayerNorm", "Embedding"]
    assert facts["cfg"] == [2, 1] and facts["ranks"] == [0, 0, 0, 1]
    assert facts["checkpoint"] == [True, True]


def test_unsupported_names_say_what_to_use(facts: dict) -> None:
    errors = facts["errors"]
    assert errors["tp_register"].startswith("SMPUnsupportedAPIError: smp.tp_register is not supported")
    assert "tensor_parallel_degree=1" in errors["set_tensor_parallelism"]
    assert "torch.nn.TransformerEncoderLayer" in errors["DistributedTransformer"]
    assert "scaled_dot_product_attention" in errors["FlashAttentionLayer"]
    assert errors["optimizers"].startswith("AttributeError: smp.optimizers is not supported")
    assert "torch.optim" in errors["optimizers"]
    assert "has no attribute 'no_such_name'" in errors["unknown"]
    assert "smlaunch/rank/smp/README.md" in errors["unknown"]
