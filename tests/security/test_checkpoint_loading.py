"""smp checkpoints restored from ``checkpoint_s3_uri`` load without running code from the files.

One process (world size 1, a real gloo group): partial and full checkpoints of a model, an Adam
optimizer with state and a ``user_content`` holding what scripts put there (an argparse Namespace,
numpy scalars and arrays) round-trip through ``weights_only=True`` loads; a crafted pickle that would
run code is refused, naming the file, and its code does not run; ``SMLAUNCH_UNSAFE_CHECKPOINT_LOAD=1``
opts in with a warning (and the same file then does run code: the refusal above is of a real attack).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from smlaunch import contract
from smlaunch.rank.smp import api as smp
from smlaunch.rank.smp.checkpoint import UnsafeCheckpointError, merge_partial_checkpoint
from smlaunch.rank.smp.state import shutdown


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in (
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SM_HP_MP_PARAMETERS",
        "OMPI_COMM_WORLD_RANK",
        "SMP_TORCH_VIRTUAL_STAGES",
        contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD,
    ):
        monkeypatch.delenv(name, raising=False)
    smp.init({})
    try:
        torch.manual_seed(0)
        yield smp.DistributedModel(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)))
    finally:
        shutdown()


class RunsCode:
    """Unpickling this runs ``exec``: it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def _train_one_step(model: Any) -> Any:
    optimizer = smp.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01))

    @smp.step
    def step(model: Any, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).pow(2).mean()
        model.backward(loss)
        return loss

    optimizer.zero_grad()
    step(model, torch.randn(4, 4))
    optimizer.step()
    return optimizer


USER_CONTENT = {
    "epoch": 3,
    "args": argparse.Namespace(lr=0.01, name="run"),
    "loss": np.float64(0.25),
    "seen": np.arange(4, dtype=np.int32),
}


@pytest.mark.parametrize("partial", [True, False], ids=["partial", "full"])
def test_checkpoints_round_trip_through_weights_only_loads(model: Any, tmp_path: Path, partial: bool) -> None:
    optimizer = _train_one_step(model)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_state = optimizer.state_dict()["state"]
    smp.save_checkpoint(
        tmp_path, "step1", partial=partial, model=model, optimizer=optimizer, user_content=USER_CONTENT
    )
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    content = smp.resume_from_checkpoint(tmp_path, partial=partial)
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved[key]), key
    assert content["epoch"] == 3 and content["args"] == argparse.Namespace(lr=0.01, name="run")
    assert content["loss"] == 0.25 and np.array_equal(content["seen"], np.arange(4))
    if partial:
        assert sorted(merge_partial_checkpoint(tmp_path)) == sorted(saved)
        restored = optimizer.state_dict()["state"]
        assert all(torch.equal(restored[i]["exp_avg"], saved_state[i]["exp_avg"]) for i in saved_state)


def test_a_checkpoint_that_would_run_code_is_refused(model: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    smp.save_checkpoint(tmp_path, "s", partial=True, model=model, user_content={"epoch": 1})
    crafted = tmp_path / "s_partial" / "user_content.pt"
    torch.save({"epoch": RunsCode(marker)}, crafted)
    opt_in = f"{contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD}=1"
    with pytest.raises(UnsafeCheckpointError, match=rf"{crafted}.*{opt_in}"):
        smp.resume_from_checkpoint(tmp_path, "s")
    torch.save(RunsCode(marker), tmp_path / "full")
    with pytest.raises(UnsafeCheckpointError, match="exec"):
        smp.resume_from_checkpoint(tmp_path, "full", partial=False)
    with pytest.raises(UnsafeCheckpointError):
        smp.load(tmp_path / "full", partial=False)
    assert not marker.exists()


def test_full_pickle_is_an_explicit_opt_in_with_a_warning(
    model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    torch.save(RunsCode(marker), tmp_path / "trusted.pt")
    with pytest.warns(UserWarning, match="full pickle"):
        smp.load(tmp_path / "trusted.pt", partial=False, weights_only=False)
    assert marker.read_text() == "pwned"
    os.unlink(marker)
    monkeypatch.setenv(contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD, "1")
    with pytest.warns(UserWarning, match=contract.SMLAUNCH_UNSAFE_CHECKPOINT_LOAD):
        smp.load(tmp_path / "trusted.pt", partial=False)
    assert marker.exists()
