"""Load the model trained with smp in one plain process and check it predicts what it did in training.

    python examples/model_parallel/load_check.py <dir with model.pt and test_logits.pt, or model.tar.gz>

No smp, no process group: ``model.pt`` is a plain ``state_dict`` with the model's own parameter names.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import build_model, digits


def check(model_dir: Path) -> float:
    model = build_model()
    model.load_state_dict(torch.load(model_dir / "model.pt", weights_only=True))
    model.eval()
    x, y = digits("test")
    with torch.no_grad():
        logits = model(x)
    trained = torch.load(model_dir / "test_logits.pt", weights_only=True)
    if not torch.allclose(logits, trained, atol=1e-4, rtol=1e-4):
        raise SystemExit(f"predictions differ: max |diff| = {(logits - trained).abs().max().item():.3g}")
    if not torch.equal(logits.argmax(1), trained.argmax(1)):
        raise SystemExit("predicted classes differ")
    accuracy = (logits.argmax(1) == y).float().mean().item()
    print(f"load_check OK: same predictions as in training, test_accuracy={accuracy:.4f}")
    return accuracy


def main() -> None:
    target = Path(sys.argv[1])
    if target.is_file():  # model.tar.gz
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(target) as tar:
            tar.extractall(tmp, filter="data")
            check(Path(tmp))
    else:
        check(target)


if __name__ == "__main__":
    main()
