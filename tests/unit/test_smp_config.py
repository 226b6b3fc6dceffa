"""smp configuration: merge order, alias, strict keys, unsupported parameters, world-size rules,
partitioning and microbatch rules. Pure; no process group is started (errors fire before it)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from smlaunch.rank.smp import partition as part
from smlaunch.rank.smp.config import SMPUnsupportedError, SMPValidationError, check_world_size, resolve_config
from smlaunch.rank.smp.microbatch import StepOutput, TensorSplitError, split_arguments, to_step_outputs
from smlaunch.rank.smp.state import STATE, init


def _env(params: dict | None = None, **extra: str) -> dict[str, str]:
    env = dict(extra)
    if params is not None:
        env["SM_HP_MP_PARAMETERS"] = json.dumps(params)
    return env


def test_environment_wins_and_partitions_alias() -> None:
    cfg = resolve_config({"partitions": 2, "microbatches": 2}, _env({"microbatches": 4, "ddp": True}))
    assert (cfg.pp, cfg.microbatches, cfg.ddp) == (2, 4, True)
    assert cfg.placement == "DPT" and resolve_config({"placement_strategy": "spread"}, {}).placement == "TPD"
    assert cfg.pipeline == "interleaved" and cfg.tp == 1


def test_conflicting_alias_and_unknown_key() -> None:
    with pytest.raises(SMPValidationError, match="Conflicting"):
        resolve_config({"partitions": 2, "pipeline_parallel_degree": 4}, {})
    with pytest.raises(SMPValidationError, match="Unrecognized config parameter micro_batches"):
        resolve_config({"micro_batches": 2}, {})
    with pytest.raises(SMPValidationError, match="Unrecognized config parameter bogus"):
        resolve_config({}, _env({"bogus": 1}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tensor_parallel_degree", 2),
        ("horovod", True),
        ("fp16", True),
        ("bf16", True),
        ("shard_optimizer_state", True),
        ("sharded_data_parallel_degree", 2),
        ("offload_activations", True),
    ],
)
def test_unsupported_parameters_name_parameter_and_alternative(key: str, value: object) -> None:
    with pytest.raises(SMPUnsupportedError) as err:
        resolve_config({"partitions": 1, key: value}, {})
    assert err.value.parameter == key
    assert key in str(err.value) and "Alternative:" in str(err.value)


def test_type_and_range_errors() -> None:
    with pytest.raises(SMPValidationError, match="microbatches must be an integer >= 1"):
        resolve_config({"microbatches": 0}, {})
    with pytest.raises(SMPValidationError, match="placement_strategy"):
        resolve_config({"placement_strategy": "ring"}, {})
    with pytest.raises(SMPValidationError, match="default_partition must be given"):
        resolve_config({"partitions": 2, "auto_partition": False}, {})
    with pytest.raises(SMPValidationError, match="default_partition must be in"):
        resolve_config({"partitions": 2, "default_partition": 2}, {})
    # accepted no-ops
    resolve_config(
        {
            "optimize": "memory",
            "memory_weight": 0.3,
            "active_microbatches": 2,
            "deterministic_server": True,
            "ddp_port": 1234,
        },
        {},
    )


def test_world_size_rules() -> None:
    cfg = resolve_config({"partitions": 2}, {})
    with pytest.raises(SMPValidationError, match=r"multiple of .* \(2 \* 1 = 2\)"):
        check_world_size(cfg, 3)
    with pytest.raises(SMPValidationError, match="set 'ddp': True"):
        check_world_size(cfg, 4)
    assert check_world_size(resolve_config({"partitions": 2, "ddp": True}, {}), 4) == 2


@pytest.mark.parametrize(
    ("config", "env", "match"),
    [
        ({"partitions": 2}, {"RANK": "0", "WORLD_SIZE": "3"}, "multiple of"),
        ({"partitions": 2}, {"RANK": "0", "WORLD_SIZE": "4"}, "ddp"),
        (
            {"partitions": 2, "tensor_parallel_degree": 2},
            {"RANK": "0", "WORLD_SIZE": "4"},
            "tensor_parallel_degree",
        ),
        ({"partitions": 1, "horovod": True}, {}, "horovod"),
        ({"partitions": 1, "fp16": True}, {}, "fp16"),
        ({"partitions": 1, "unknown_knob": 1}, {}, "Unrecognized config parameter"),
    ],
)
def test_init_rejects_bad_config_before_starting_anything(config: dict, env: dict, match: str) -> None:
    with pytest.raises(SMPValidationError, match=match):
        init(config, environ=env)
    assert not STATE.initialized and not torch.distributed.is_initialized()


def test_balanced_contiguous_split() -> None:
    assert part.balanced_split([1, 1, 1, 1], 2) == [0, 0, 1, 1]
    assert part.balanced_split([10, 1, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1, 1]
    assert part.balanced_split([3, 3, 3, 3, 3, 3, 3, 3], 4) == [0, 0, 1, 1, 2, 2, 3, 3]
    ids = part.balanced_split([5, 1, 4, 2, 2, 6, 1], 3)
    assert ids == sorted(ids) and set(ids) == {0, 1, 2}
    with pytest.raises(SMPValidationError, match="3 top-level blocks but 4"):
        part.balanced_split([1, 1, 1], 4)


def test_manual_partition_context_and_set_partition() -> None:
    with part.partition(1):
        b = nn.Linear(2, 2)
    a, act = nn.Linear(2, 2), nn.ReLU()
    part.set_partition(a, 0)
    c = nn.Linear(2, 2)  # unannotated, with parameters: default partition
    blocks = list(nn.Sequential(a, act, b, c).named_children())
    assert part.manual_partition(blocks, 2, default_partition=1) == [0, 0, 1, 1]
    with pytest.raises(SMPValidationError, match="Non-monotone partition layout"):
        part.manual_partition(blocks, 2, default_partition=0)


def test_partition_context_nested_inside_a_module() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            with part.partition(1):
                self.child0 = nn.Linear(2, 2)
                with part.partition(0):
                    self.child1 = nn.Linear(2, 2)
                self.child2 = nn.Linear(2, 2)
            self.child3 = nn.Linear(2, 2)

    m = Model()
    assert [part.assigned_partition(getattr(m, f"child{i}")) for i in range(4)] == [1, 0, 1, None]
    with pytest.raises(SMPValidationError, match=r"nn\.Sequential"):
        part.blocks_of(m)
    mixed = nn.Sequential(nn.Sequential(m.child0, m.child1))
    with pytest.raises(SMPValidationError, match="assigned to partitions"):
        part.manual_partition(list(mixed.named_children()), 2, 0)


def test_microbatch_split_rules() -> None:
    def body(model: object, x: torch.Tensor, extra: dict, lr: torch.Tensor) -> None: ...

    x = torch.arange(12).reshape(6, 2)
    mbs = split_arguments(body, (None, x, {"y": torch.arange(6)}, torch.ones(6)), {}, 3, ["lr"], None)
    assert [a[1].tolist() for a, _ in mbs] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]
    assert mbs[2][0][2]["y"].tolist() == [4, 5] and mbs[0][0][3].shape == (6,)
    cols = split_arguments(body, (None, x, {}, torch.tensor(0.1)), {}, 2, None, {"x": 1})
    assert cols[1][0][1].tolist() == [[1], [3], [5], [7], [9], [11]]

    class Sliceable:
        def smp_slice(self, num_mb: int, mb: int, axis: int) -> tuple[int, int]:
            return (mb, num_mb)

    prev = StepOutput([torch.zeros(1), torch.ones(1)])
    own = split_arguments(body, (None, prev, {"s": Sliceable()}, torch.tensor(0.1)), {}, 2, None, None)
    assert own[1][0][1].item() == 1.0 and own[1][0][2]["s"] == (1, 2)
    with pytest.raises(TensorSplitError, match="divisible by the number of microbatches"):
        split_arguments(body, (None, torch.ones(10, 2), {}, torch.tensor(0.1)), {}, 4, None, None)


def test_step_output() -> None:
    outs = to_step_outputs([(torch.tensor(1.0), torch.ones(2, 3)), (torch.tensor(3.0), torch.zeros(2, 3))])
    loss, out = outs
    assert isinstance(loss, StepOutput)
    assert loss.reduce_mean().item() == 2.0 and loss.reduce_sum().item() == 4.0
    assert out.concat().shape == (4, 3) and out.stack().shape == (2, 2, 3)
    assert sum(to_step_outputs([1, 2, 3])) == 6  # smp examples sum() plain numbers


class _Chain(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "reorder":
            return self.a(self.b(x))
        y = self.a(x)
        if self.mode == "python_between" or (self.mode == "train_only_between" and self.training):
            y = y * 2
        if self.mode == "twice":
            y = self.a(y)
        out = self.b(y)
        return out + 1 if self.mode == "post" else out


def test_custom_module_chains_are_discovered_and_other_graphs_rejected() -> None:
    x = (torch.randn(2, 3),)
    assert [n for n, _ in part.blocks_of(_Chain("plain"), x)] == ["a", "b"]
    assert [n for n, _ in part.blocks_of(_Chain("reorder"), x)] == ["b", "a"]
    for mode, why in [
        ("python_between", "exactly the output of 'a'"),
        ("twice", "more than once"),
        ("post", "does not return the output"),
        ("train_only_between", r"exactly the output of 'a' \(in training mode\)"),
    ]:
        with pytest.raises(SMPValidationError, match=why):
            part.blocks_of(_Chain(mode), x)
    # The probe leaves every mode as it found it, and moves no statistics.
    model = _Chain("plain").train()
    model.b.eval()
    part.blocks_of(model, x)
    assert model.training and model.a.training and not model.b.training


@pytest.mark.parametrize("strategy", ["each", "contiguous", "group_2"])
def test_activation_checkpointing_strategies_keep_outputs_and_gradients(strategy: str) -> None:
    from smlaunch.rank.smp.api import set_activation_checkpointing

    def net() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))

    a, b = net(), net()
    set_activation_checkpointing(a, strategy=strategy)
    x = torch.randn(4, 3)
    a(x).sum().backward()
    b(x).sum().backward()
    assert torch.allclose(a(x), b(x))
    assert all(torch.allclose(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(SMPValidationError, match="strategy"):
        set_activation_checkpointing(net(), strategy="group_x")
