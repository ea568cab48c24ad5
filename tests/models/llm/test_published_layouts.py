"""Runs NVIDIA made are planned, not refused: pipeline layouts with an embedding-only first or a loss-only last
virtual stage (Megatron-Core counts the embedding and the loss as a layer each), and hybrid linear-attention
models refused in one line that names the missing term."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.solvers.grid import splits

QWEN3_NEXT = Path(__file__).parent / "data" / "qwen3-next-80b-a3b.json"


def test_interleaved_splits_may_leave_the_end_stages_empty() -> None:
    # 94 layers on pp 32 x vp 3: the embedding and the loss fill a stage each (0, 1, ..., 1, 0)
    rows = splits(94, 32, 3).tolist()
    assert [2] + [3] * 30 + [2] in rows
    # DeepSeek-V3's 61 layers on pp 8 x vp 4, Megatron-Bridge's Et|(tt|)*30mL: 1, 2, ..., 2, 0 (rank 0 holds 7)
    assert [7] + [8] * 6 + [6] in splits(61, 8, 4).tolist()
    # the family of before stays: 126 layers on pp 8 x vp 8 as 1, 2, ..., 2, 1
    assert [15] + [16] * 6 + [15] in splits(126, 8, 8).tolist()
    assert all(sum(r) == 94 for r in rows)


@pytest.mark.parametrize("pins", ["tp=2,pp=8,vp=4,ep=32,mbs=1", "tp=4,pp=8,vp=4,ep=8,mbs=1",
                                  "tp=2,pp=32,vp=3,ep=8,mbs=1"])
def test_modelzoo_qwen3_235b_layouts_plan_and_fit(pins: str) -> None:
    """Megatron-MoE-ModelZoo's Qwen3-235B-A22B layouts on 256 H100 (seq 4096, GBS 2048): each plans and fits."""
    pr = dnnplace.load_llm(CONFIGS / "qwen3-235b-a22b.json", gpus=256, seq_len=4096, global_batch=2048)
    fixed = {k: int(v) for k, v in (p.split("=") for p in pins.split(","))}
    plan = search(pr, fixed, time_limit=60)
    assert plan.estimate.fits
    assert {k: getattr(plan.config, k) for k in fixed} == fixed
    if fixed["pp"] == 32:
        stages = plan.config.layers_per_stage
        assert stages[0] == 0 and stages[-1] == 0 and set(stages[1:-1]) == {1}


def test_deepseek_v3_bridge_pp8_vp4_plans_with_its_layout() -> None:
    """Megatron-Bridge 25.09's DeepSeek-V3 FP8 row on 1,024 H100 (TP2 PP8 VP4 EP64, GBS 8192) was refused by the
    split family; its recipe's layout Et|(tt|)*30mL is now one of the family."""
    pr = dnnplace.load_llm(CONFIGS / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192,
                           precision="fp8-cs")
    plan = search(pr, {"tp": 2, "pp": 8, "vp": 4, "ep": 64, "mbs": 1}, time_limit=60)
    assert plan.estimate.fits
    assert plan.config.layers_per_stage == (1,) + (2,) * 30 + (0,)


def test_cli_plans_the_refused_rows() -> None:
    res = run_cli("plan", str(CONFIGS / "qwen3-235b-a22b.json"), "--gpus", "256", "--seq-len", "4096",
                  "--global-batch", "2048", "--fix", "tp=2,pp=32,vp=3,ep=8,mbs=1", "--runner-ups", "0")
    assert res.returncode == 0, res.stderr


def test_qwen3_next_refused_naming_gated_delta_net() -> None:
    with pytest.raises(DnnplaceError) as e:
        dnnplace.load_llm(QWEN3_NEXT, gpus=64, seq_len=4096, global_batch=512)
    msg = str(e.value)
    assert "\n" not in msg and "gated delta-net" in msg and "36 of 48 layers" in msg
    res = run_cli("plan", str(QWEN3_NEXT), "--gpus", "64", "--seq-len", "4096", "--global-batch", "512")
    assert res.returncode == 2 and "gated delta-net" in res.stderr and "experts" not in res.stderr.split(":")[-1]
