"""The model-parallel example end to end: ``PyTorch(...).fit()`` on a LocalSession emulating an
ml.p3.8xlarge (4 ranks: 2 partitions x 2 replicas, spread, interleaved, 4 microbatches), the script
unchanged against the ``smdistributed.modelparallel.torch`` shim; loss goes down, and the saved full
model predicts the same in a plain single process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_parallel"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_smp_on_emulated_p3_8xlarge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in ("run", "load_check", "model"):
        sys.modules.pop(name, None)
    import run

    accuracy = run.main(epochs=2)
    out = capsys.readouterr().out
    assert "launcher: smp" in out
    assert "smp: world=4 pp=2 dp=2 microbatches=4" in out
    losses = [float(v) for v in re.findall(r"epoch=\d+ train_loss=([0-9.]+)", out)]
    assert len(losses) == 2 and losses[1] < losses[0], out
    assert "load_check OK" in out
    assert accuracy > 0.3  # ten classes: chance is 0.1
    leftovers = [p for p in psutil.Process().children(recursive=True) if p.is_running()]
    assert not [p for p in leftovers if p.status() != psutil.STATUS_ZOMBIE], leftovers


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_pipeline_across_two_emulated_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 hosts x 2 ranks with spread placement: each pipeline spans both hosts (ranks 0+2, 1+3)."""
    monkeypatch.setenv("SMLAUNCH_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in ("run", "load_check", "model"):
        sys.modules.pop(name, None)
    import run

    run.main(epochs=1, instance_count=2, processes_per_host=2)
    out = capsys.readouterr().out
    assert "[algo-2] launcher: smp, ranks 2-3 of 4 on host 2 of 2, gloo" in out
    assert "smp: world=4 pp=2 dp=2 microbatches=4" in out
    assert "load_check OK" in out
