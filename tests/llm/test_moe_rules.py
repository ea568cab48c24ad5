"""evaluation/llm/moe_rules: Megatron's expert-parallel rules, one-line messages naming the rule, and the
vectorised filter agreeing with the checker on every point of a small grid."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.evaluation.llm.moe_rules import MOE_RULES, check_moe_config, columns_of, edp_of, modules_mask, moe_mask
from dnnplace.frontends.moe_config import load_moe
from dnnplace.model.moe import DISPATCHERS

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def ds3():
    return load_moe(FIXTURES / "deepseek-v3.json")


def qwen3():
    return load_moe(FIXTURES / "qwen3-30b-a3b.json")


def test_published_layouts_keep_every_rule() -> None:
    check_moe_config(ds3(), 1024, columns_of(tp=1, pp=8, dp=128, ep=64, etp=1, recompute="selective",
                                             modules=("mla_up_proj", "mlp", "moe")))
    check_moe_config(qwen3(), 16, columns_of(tp=1, pp=1, dp=16, ep=16, etp=1, dispatcher="flex"))
    check_moe_config(load_moe(FIXTURES / "llama-4-maverick-17b-128e.json"), 512,
                     columns_of(tp=4, pp=1, dp=128, ep=128, etp=4))
    assert edp_of(1024, columns_of(pp=8, ep=64, etp=1))[0] == 2
    assert edp_of(512, columns_of(pp=1, ep=128, etp=4))[0] == 1


@pytest.mark.parametrize(("kwargs", "rule"), [
    (dict(pp=8, dp=128, ep=48), "ep_divides_experts"),
    (dict(pp=8, dp=128, ep=64, etp=4), "expert_grid"),  # 4 x 64 x 8 = 2048 > 1024 GPUs
    (dict(pp=8, dp=128, ep=32, etp=3), "expert_grid"),
    (dict(tp=2, pp=8, dp=64, ep=64, sp=False), "sequence_parallel_with_tp"),
    (dict(pp=8, dp=128, ep=64, modules=("moe",)), "modules_need_selective"),
    (dict(pp=8, dp=128, ep=64, recompute="selective", modules=("moe_act",), grouped_gemm=False),
     "moe_act_needs_grouped_gemm"),
])
def test_each_broken_rule_is_named_in_one_line(kwargs: dict, rule: str) -> None:
    with pytest.raises(DnnplaceError) as err:
        check_moe_config(ds3(), 1024, columns_of(**kwargs))
    msg = str(err.value)
    assert f"breaks {rule}:" in msg and "\n" not in msg and "deepseek-v3" in msg


def test_model_dependent_rules() -> None:
    q = qwen3()  # no MLA, no shared experts, no dense layers; expert ffn 768
    for modules, rule in ((("mla_up_proj",), "mla_up_proj_needs_mla"), (("shared_experts",),
                                                                        "shared_experts_need_shared"),
                          (("mlp",), "mlp_needs_dense_layers")):
        with pytest.raises(DnnplaceError, match=rule):
            check_moe_config(q, 16, columns_of(dp=16, ep=16, recompute="selective", modules=modules))
    with pytest.raises(DnnplaceError, match="etp_divides_expert_ffn"):
        check_moe_config(q, 20, columns_of(dp=20, ep=2, etp=5))  # 768 % 5 != 0, the grid 5 x 2 divides 20
    with pytest.raises(DnnplaceError, match="flex_needs_expert_ranks"):
        check_moe_config(q, 16, columns_of(dp=16, ep=1, etp=1, dispatcher="flex"))


def test_unknown_names_refused_in_one_line() -> None:
    with pytest.raises(DnnplaceError, match="unknown recompute module 'attn'"):
        modules_mask(["attn"])
    with pytest.raises(DnnplaceError, match="dispatcher must be one of alltoall, allgather, flex"):
        columns_of(dispatcher="deepep")
    with pytest.raises(DnnplaceError, match="ep must be a positive integer"):
        check_moe_config(ds3(), 1024, columns_of(pp=8, ep=0))


def test_mask_agrees_with_the_checker_on_a_grid() -> None:
    m, n = ds3(), 64
    grid = list(itertools.product((1, 2, 4), (1, 2, 3, 8), (1, 2, 4, 8, 12, 64), (1, 2, 3), (True, False),
                                  range(len(DISPATCHERS)), (0, 1), (0, 1, 0b100001, 0b1000)))
    cols = {k: np.array(v) for k, v in zip(("tp", "pp", "ep", "etp", "sp", "dispatcher", "recompute", "modules"),
                                           zip(*grid))}
    cols["cp"] = np.ones(len(grid))
    cols["dp"] = n / (cols["tp"] * cols["pp"])
    cols["grouped_gemm"] = np.ones(len(grid), dtype=bool)
    mask = moe_mask(m, n, cols)
    assert 0 < mask.sum() < len(grid)
    for i in range(len(grid)):
        one = {k: v[i:i + 1] for k, v in cols.items()}
        try:
            check_moe_config(m, n, one)
            ok = True
        except DnnplaceError:
            ok = False
        assert ok == bool(mask[i]), {k: v[i] for k, v in cols.items()}
    assert len({r.name for r in MOE_RULES}) == len(MOE_RULES) and all(r.why for r in MOE_RULES)
