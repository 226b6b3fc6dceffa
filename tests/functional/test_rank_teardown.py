"""A rank that leaves a gloo process group open is torn down while the interpreter is still whole.

Real subprocesses with the rank bootstrap on their path, as the supervisor starts ranks (see
``smlaunch/rank/boot.py``, "Process-group teardown")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from smlaunch.contract.processes import free_port
from smlaunch.rank.boot import BOOT_DIR, RANK_DIR_ENV

REPO = Path(__file__).resolve().parents[2]

LEAKY_RANK = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    original = dist.destroy_process_group

    def traced_destroy(*args, **kwargs):
        print("destroy_process_group called", flush=True)
        return original(*args, **kwargs)

    dist.destroy_process_group = traced_destroy
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    model(torch.ones(3, 4)).sum().backward()
    dist.barrier()
    print("trained", flush=True)
    # The script ends without destroying its group, and the DDP model keeps it alive.
    """
)


def _run_rank(tmp_path: Path, script: str, *, with_rank_dir: bool) -> subprocess.CompletedProcess[str]:
    rank_dir = tmp_path / "ranks"
    rank_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != RANK_DIR_ENV}
    env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR, str(REPO)])
    if with_rank_dir:
        env[RANK_DIR_ENV] = str(rank_dir)
    path = tmp_path / "train.py"
    path.write_text(script)
    return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)


def test_group_left_open_is_destroyed_at_exit(tmp_path: Path) -> None:
    result = _run_rank(tmp_path, LEAKY_RANK.format(port=free_port()), with_rank_dir=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["trained", "destroy_process_group called"]


def test_outside_smlaunch_nothing_is_registered(tmp_path: Path) -> None:
    """Without a rank directory, the rank bootstrap changes nothing: the group is left to the interpreter."""
    result = _run_rank(tmp_path, LEAKY_RANK.format(port=free_port()), with_rank_dir=False)
    assert "destroy_process_group called" not in result.stdout


def test_teardown_does_not_import_torch(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from smlaunch.rank.boot import close_process_groups\n"
        "close_process_groups()\n"
        "print('torch' in sys.modules)\n"
    )
    result = _run_rank(tmp_path, script, with_rank_dir=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
