"""The smp engine against a single-process reference, with real gloo ranks on 127.0.0.1.

Two launches (2 ranks, then 4) run every scenario of issue 5's test list in sequence inside the same
processes (tests/functional/_smp_worker.py): pp=2 GPipe m=1, 1F1B m=8 with BatchNorm, a transformer,
virtual stages, checkpoint save at pp=2 and resume at pp=2; pp=4 1F1B m=8 and m=2 (GPipe fallback),
pp=2 x dp=2 in cluster and spread, each with simple and interleaved, virtual stages with dp,
pp=1 x dp=4. Every
scenario also takes a smaller last batch (shape cache) and an eval step without backward.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from smlaunch.contract.processes import free_port
from smlaunch.rank.smp.checkpoint import merge_partial_checkpoint
from smlaunch.rank.smp.layout import RankLayout
from tests.functional._smp_worker import build_model, reference

REPO = Path(__file__).resolve().parents[2]
TOL = 1e-5


def _sc(
    name: str, model: str, seed: int, m: int, batches: list[int], config: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "model": model,
        "seed": seed,
        "microbatches": m,
        "batches": batches,
        "config": config,
        **extra,
    }


WORLD2 = [
    _sc("pp2_gpipe_m1", "mlp", 2, 1, [6, 6, 4], {"partitions": 2, "microbatches": 1, "pipeline": "simple"}),
    _sc("pp2_1f1b_m8_bn", "bn", 3, 8, [32, 32, 16], {"pipeline_parallel_degree": 2, "microbatches": 8}),
    _sc("pp2_1f1b_m4_transformer", "transformer", 4, 4, [8, 8, 4], {"partitions": 2, "microbatches": 4}),
    _sc("pp2_virtual2_m4", "mlp", 5, 4, [8, 8], {"partitions": 2, "microbatches": 4}, virtual_stages=2),
    _sc("pp2_custom_module_chain", "grouped", 14, 2, [4, 4], {"partitions": 2, "microbatches": 2}),
    _sc(
        "pp2_manual_partition",
        "mlp",
        13,
        2,
        [4, 4],
        {"partitions": 2, "microbatches": 2, "auto_partition": False, "default_partition": 0},
        manual=[0, 0, 0, 0, 0, 0, 1, 1, 1],
    ),
    _sc(
        "ckpt_save",
        "mlp",
        6,
        2,
        [4, 4, 4],
        {"partitions": 2, "microbatches": 2},
        save={"at_step": 1, "tag": "s1"},
    ),
    _sc(
        "ckpt_resume",
        "mlp",
        6,
        2,
        [4, 4, 4],
        {"partitions": 2, "microbatches": 2},
        resume={"from_step": 2, "tag": "s1"},
    ),
]

WORLD4 = [
    _sc("pp4_1f1b_m8", "mlp", 7, 8, [16, 16, 8], {"partitions": 4, "microbatches": 8}),
    _sc("pp4_m2_gpipe_fallback", "mlp", 8, 2, [4, 4], {"partitions": 4, "microbatches": 2}),
    _sc(
        "pp2_dp2_cluster_simple",
        "mlp",
        9,
        4,
        [8, 8, 4],
        {
            "partitions": 2,
            "microbatches": 4,
            "pipeline": "simple",
            "placement_strategy": "cluster",
            "ddp": True,
        },
    ),
    _sc(
        "pp2_dp2_spread_interleaved_transformer",
        "transformer",
        10,
        4,
        [8, 8],
        {
            "partitions": 2,
            "microbatches": 4,
            "pipeline": "interleaved",
            "placement_strategy": "spread",
            "ddp": True,
        },
    ),
    _sc(
        "pp2_dp2_cluster_interleaved_m8",
        "mlp",
        15,
        8,
        [16, 16, 8],
        {
            "partitions": 2,
            "microbatches": 8,
            "pipeline": "interleaved",
            "placement_strategy": "cluster",
            "ddp": True,
        },
    ),
    _sc(
        "pp2_dp2_spread_simple_m1",
        "mlp",
        16,
        1,
        [4, 4, 2],
        {
            "partitions": 2,
            "microbatches": 1,
            "pipeline": "simple",
            "placement_strategy": "spread",
            "ddp": True,
        },
    ),
    _sc(
        "pp2_virtual2_dp2_spread",
        "mlp",
        11,
        4,
        [8, 8],
        {"partitions": 2, "microbatches": 4, "placement_strategy": "spread", "ddp": True},
        virtual_stages=2,
    ),
    _sc("pp1_dp4", "mlp", 12, 2, [8, 8], {"partitions": 1, "microbatches": 2, "ddp": True}),
]


def _launch(world: int, scenarios: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    spec = out / "scenarios.json"
    spec.write_text(json.dumps(scenarios))
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(
            os.environ,
            RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(r),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO),
        )
        env.pop("SM_HP_MP_PARAMETERS", None)
        argv = [sys.executable, "-m", "tests.functional._smp_worker", str(spec), str(out)]
        procs.append(
            subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=150)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    results = []
    for r, p in enumerate(procs):
        path = out / f"rank{r}.json"
        assert p.returncode == 0 and path.exists(), f"rank {r} failed:\n{logs[r][-4000:]}"
        results.append(json.loads(path.read_text()))
    return results


COMM2 = {"name": "comm", "kind": "comm", "config": {"partitions": 2}}
COMM4 = {
    "name": "comm",
    "kind": "comm",
    "config": {"partitions": 2, "ddp": True, "placement_strategy": "spread"},
}


def _check(results: list[dict[str, Any]], scenarios: list[dict[str, Any]]) -> None:
    for per_rank in results:
        assert per_rank["comm"]["comm_ok"], per_rank["comm"]
    for sc in scenarios:
        cfg = sc["config"]
        pp = cfg.get("partitions", cfg.get("pipeline_parallel_degree"))
        layout = RankLayout(len(results), pp, 1, cfg.get("placement_strategy", "cluster"))
        owned: list[str] = []
        for r, per_rank in enumerate(results):
            res = per_rank[sc["name"]]
            assert "error" not in res, res.get("trace")
            assert res["checked"] > 0, sc["name"]
            assert res["loss_err"] < TOL, (sc["name"], r, res)
            assert res["param_err"] < TOL, (sc["name"], r, res)
            assert res["buffer_err"] < TOL, (sc["name"], r, res)
            assert res["eval_err"] < TOL, (sc["name"], r, res)
            assert res["full_keys_ok"], sc["name"]
            assert (res["pp_rank"], res["dp_rank"]) == (layout.pp_rank(r), layout.dp_rank(r)), sc["name"]
            if res["dp_rank"] == 0:
                owned += res["local_params"]
        # every parameter is owned by exactly one pipeline rank
        expected = sorted(n for n, _ in build_model(sc["model"], 0).named_parameters())
        assert sorted(owned) == expected, sc["name"]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_ranks_pipeline_scenarios_and_checkpoints(tmp_path: Path) -> None:
    results = _launch(2, [COMM2, *WORLD2], tmp_path)
    _check(results, WORLD2)
    assert results[1]["pp2_manual_partition"]["local_params"] == ["6.bias", "6.weight", "8.bias", "8.weight"]
    # the checkpoint written with pp=2 loads as a full state dict in one process
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "newest").read_text() == "s1_full"
    assert sorted(p.name for p in (ckpt / "s1_partial").iterdir()) == [
        "model_0_0_0.pt",
        "model_1_0_0.pt",
        "optimizer_0_0_0.pt",
        "optimizer_1_0_0.pt",
        "user_content.pt",
    ]
    sc = next(s for s in WORLD2 if s["name"] == "ckpt_save")
    want = reference(sc, dp=1)["states"][1]
    full = torch.load(ckpt / "s1_full", weights_only=True)
    merged = merge_partial_checkpoint(ckpt, "s1")
    plain = build_model("mlp", seed=123)
    plain.load_state_dict(full)  # strict: exactly the plain module's keys
    for k, v in want.items():
        assert torch.allclose(full[k], v, atol=TOL), k
        assert torch.equal(merged[k], full[k]), k
    assert torch.load(ckpt / "user_content_s1_full.pt", weights_only=False) == {"step": 1}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_four_ranks_pp4_and_hybrid_data_parallel(tmp_path: Path) -> None:
    _check(_launch(4, [COMM4, *WORLD4], tmp_path), WORLD4)
