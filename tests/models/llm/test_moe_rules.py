"""evaluation/llm/moe_rules: Megatron's expert-parallel rules, one-line messages naming the rule, and the
vectorised filter agreeing with the checker on every point of a small grid."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dnnplace.arch.moe_config import load_moe
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.moe import DISPATCHERS
from dnnplace.models.llm.moe_rules import (
    MOE_CONFIG_RULES,
    check_moe_config,
    edp_of,
    filter_moe_rows,
    modules_mask,
    moe_columns,
    moe_problem_columns,
)
from dnnplace.models.llm.published import CONFIGS

FIXTURES = CONFIGS


def ds3():
    return load_moe(FIXTURES / "deepseek-v3.json")


def qwen3():
    return load_moe(FIXTURES / "qwen3-30b-a3b.json")


def test_published_layouts_keep_every_rule() -> None:
    check_moe_config(ds3(), 1024, moe_columns(tp=1, pp=8, dp=128, ep=64, etp=1, recompute="selective",
                                              recompute_modules=("mla_up_proj", "mlp", "moe")))
    check_moe_config(qwen3(), 16, moe_columns(tp=1, pp=1, dp=16, ep=16, etp=1, dispatcher="flex"))
    check_moe_config(ds3(), 1024, moe_columns(pp=8, vp=2, dp=128, ep=64, a2a_overlap=True))
    check_moe_config(load_moe(FIXTURES / "llama-4-maverick-17b-128e.json"), 512,
                     moe_columns(tp=4, pp=1, dp=128, ep=128, etp=4))
    assert edp_of({"gpus": 1024, **moe_columns(pp=8, ep=64, etp=1)})[0] == 2
    assert edp_of({"gpus": 512, **moe_columns(pp=1, ep=128, etp=4)})[0] == 1


BROKEN = [
    (dict(pp=8, dp=128, ep=48), "ep_experts", "ep=48 must divide the 256 routed experts"),
    (dict(pp=8, dp=128, ep=64, etp=4), "expert_grid", "etp*ep*pp = 2048 must divide the 1024 GPUs"),
    (dict(pp=8, dp=128, ep=32, etp=3), "expert_grid", "= 768 must divide"),
    (dict(tp=2, pp=8, dp=64, ep=64, sequence_parallel=False), "moe_sequence_parallel", "tp=2"),
    (dict(pp=8, dp=128, ep=64, recompute_modules=("moe",)), "modules_selective", "not none"),
    (dict(pp=8, dp=128, ep=64, recompute="selective", recompute_modules=("moe_act",), grouped_gemm=False),
     "moe_act_grouped_gemm", "moe_act needs grouped GEMMs"),
    (dict(pp=8, dp=128, ep=64, recompute="selective", recompute_modules=("shared_experts",),
          shared_expert_overlap=True), "shared_overlap_recompute", "shared-expert overlap"),
    (dict(pp=8, dp=128, ep=1, a2a_overlap=True), "a2a_overlap_ep", "ep > 1"),
    (dict(pp=8, vp=2, dp=128, ep=64, dispatcher="allgather", a2a_overlap=True), "a2a_overlap_dispatcher",
     "alltoall or flex"),
    (dict(pp=8, dp=128, ep=64, a2a_overlap=True), "a2a_overlap_vp", "pp=8 needs interleaving"),
    (dict(pp=8, vp=2, dp=128, ep=64, recompute="selective", recompute_modules=("moe",), a2a_overlap=True),
     "a2a_overlap_recompute", "'moe' recompute module"),
    (dict(pp=8, vp=2, dp=128, ep=64, recompute="full", a2a_overlap=True), "a2a_overlap_recompute", "full"),
    (dict(pp=8, vp=2, dp=128, ep=64, a2a_overlap=True, shared_expert_overlap=True), "a2a_overlap_shared",
     "exclude each other"),
]


@pytest.mark.parametrize(("kwargs", "rule", "text"), BROKEN)
def test_each_broken_rule_is_named_in_one_line(kwargs: dict, rule: str, text: str) -> None:
    with pytest.raises(DnnplaceError) as err:
        check_moe_config(ds3(), 1024, moe_columns(**kwargs))
    msg = str(err.value)
    assert msg.startswith("config ") and msg.endswith(f"(rule {rule})") and text in msg and "\n" not in msg


def test_model_dependent_rules() -> None:
    q = qwen3()  # no MLA, no shared experts, no dense layers; expert ffn 768
    for modules, rule in ((("mla_up_proj",), "mla_up_proj_mla"), (("shared_experts",), "shared_experts_exist"),
                          (("mlp",), "mlp_exists")):
        with pytest.raises(DnnplaceError, match=rf"qwen3-30b-a3b has not \(rule {rule}\)"):
            check_moe_config(q, 16, moe_columns(dp=16, ep=16, recompute="selective", recompute_modules=modules))
    with pytest.raises(DnnplaceError, match="rule etp_expert_ffn"):
        check_moe_config(q, 20, moe_columns(dp=20, ep=2, etp=5))  # 768 % 5 != 0; the grid 5 x 2 divides 20
    with pytest.raises(DnnplaceError, match="rule flex_expert_ranks"):
        check_moe_config(q, 16, moe_columns(dp=16, ep=1, etp=1, dispatcher="flex"))


def test_unknown_names_refused_in_one_line() -> None:
    with pytest.raises(DnnplaceError, match="unknown recompute module 'attn'"):
        modules_mask(["attn"])
    with pytest.raises(DnnplaceError, match="dispatcher must be one of alltoall, allgather, flex"):
        moe_columns(dispatcher="deepep")
    with pytest.raises(DnnplaceError, match="ep must be a positive integer"):
        moe_columns(pp=8, ep=0)


def test_mask_agrees_with_the_checker_on_a_grid() -> None:
    m, n = ds3(), 64
    names = ("tp", "pp", "ep", "etp", "sequence_parallel", "dispatcher", "recompute", "recompute_modules")
    grid = list(itertools.product((1, 2, 4), (1, 2, 3, 8), (1, 2, 4, 8, 12, 64), (1, 2, 3), (True, False),
                                  range(len(DISPATCHERS)), (0, 1), (0, 1, 0b100001, 0b1000, 0b1000000)))
    cols: dict = {k: np.array(v) for k, v in zip(names, zip(*grid))}
    rng = np.random.default_rng(0)
    cols["grouped_gemm"] = np.ones(len(grid), dtype=bool)
    cols["vp"] = rng.choice([1, 2], len(grid))
    cols["a2a_overlap"] = rng.random(len(grid)) < 0.5
    cols["shared_expert_overlap"] = rng.random(len(grid)) < 0.3
    mask = filter_moe_rows(m, n, cols, len(grid))
    assert 0 < mask.sum() < len(grid)
    for i in range(len(grid)):
        one = {k: v[i:i + 1] for k, v in cols.items()}
        try:
            check_moe_config(m, n, one)
            ok = True
        except DnnplaceError:
            ok = False
        assert ok == bool(mask[i]), {k: v[i] for k, v in cols.items()}
    assert len({r.name for r in MOE_CONFIG_RULES}) == len(MOE_CONFIG_RULES)
    cols_all = {**moe_problem_columns(m, n), **cols}
    assert all(set(r.needs) <= set(cols_all) for r in MOE_CONFIG_RULES)


def test_an_unknown_dispatcher_index_is_named() -> None:
    cols = moe_columns(ep=8, dp=8)
    cols["dispatcher"] = np.array([7])
    with pytest.raises(DnnplaceError, match=r"dispatcher must be one of alltoall, allgather, flex \(rule dispatcher\)"):
        check_moe_config(qwen3(), 8, cols)


def test_a2a_overlap_with_two_mtp_layers_is_refused() -> None:
    import dataclasses

    m = ds3()
    m = dataclasses.replace(m, moe=dataclasses.replace(m.moe, mtp_layers=2))
    with pytest.raises(DnnplaceError, match=r"at most 1 MTP layer, deepseek-v3 has 2 \(rule a2a_overlap_mtp\)"):
        check_moe_config(m, 1024, moe_columns(pp=8, vp=2, dp=128, ep=64, a2a_overlap=True))


def test_a2a_overlap_with_an_mtp_layer_needs_pipelining() -> None:
    with pytest.raises(DnnplaceError, match=r"MTP layer needs pp > 1 .*\(rule a2a_overlap_mtp_pp\)"):
        check_moe_config(ds3(), 1024, moe_columns(pp=1, dp=1024, ep=64, a2a_overlap=True))


def test_every_moe_rule_has_a_case() -> None:
    named = {case[1] for case in BROKEN} | {"mla_up_proj_mla", "shared_experts_exist", "mlp_exists",
                                            "a2a_overlap_mtp_pp",
                                            "etp_expert_ffn", "flex_expert_ranks", "dispatcher", "a2a_overlap_mtp",
                                            "expert_bias_etp"}  # the last: exporters/test_megatron_moe.py
    assert {r.name for r in MOE_CONFIG_RULES} == named
