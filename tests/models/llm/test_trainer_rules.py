"""What the trainers refuse is a named rule of the one rule set (issue 45, W3-W5): the search never plans it,
the checker refuses it in one line naming the rule and the trainer's source."""

from __future__ import annotations

from dataclasses import replace

import pytest
from llm_helpers import EXAMPLES

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation.precision import RECIPES
from dnnplace.models.llm.evaluation.rules import CONFIG_RULES, check_config
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.rules import DELAYED_PRECISIONS, PARAM_GATHER_PRECISIONS
from dnnplace.models.llm.solvers.search import search, search_with_runner_ups
from dnnplace.models.llm.spec import ParallelConfig


def test_precision_tables_are_the_recipes() -> None:
    assert set(PARAM_GATHER_PRECISIONS) == {k for k, r in RECIPES.items() if r.param_gather}
    assert set(DELAYED_PRECISIONS) == {k for k, r in RECIPES.items() if r.scaling == "delayed"}


def test_w3_fp8_parameters_need_the_distributed_optimizer() -> None:
    # Llama 3.1 8B, 8 GPUs, --fix tp=4,pp=2 --precision fp8: the free search picked zero=0
    pr = dnnplace.load_llm(EXAMPLES / "llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128, precision="fp8")
    plan, others = search_with_runner_ups(pr, {"tp": 4, "pp": 2}, None, None, 5)
    assert plan.config.zero >= 1 and all(r.config.zero >= 1 for r in others)
    bad = replace(plan.config, zero=0, distributed_optimizer=False)
    with pytest.raises(DnnplaceError, match=r"rule fp8_param_gather_zero\)$") as exc:
        check_config(pr, bad)
    assert "\n" not in str(exc.value) and "validate_args" in str(exc.value)
    with pytest.raises(DnnplaceError, match="fp8_param_gather_zero"):
        search(pr, {"tp": 4, "pp": 2, "zero": 0})


def _qwen3(precision: str) -> dnnplace.LLMProblem:
    return dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024,
                             precision=precision)


def test_w4_delayed_fp8_never_recomputes_moe_act_or_layernorm() -> None:
    pr = _qwen3("fp8")
    plan, others = search_with_runner_ups(pr, {}, None, None, 5)
    for c in [plan.config, *(r.config for r in others)]:
        assert "moe_act" not in c.recompute_modules and "layernorm" not in c.recompute_modules
    base = ParallelConfig(1, 1, 1, 1, 16, 1, "selective", False, True, (48,), ep=16)
    for modules in ("moe_act", "layernorm", "core_attn+moe_act+layernorm"):
        with pytest.raises(DnnplaceError, match=r"transformer_config.py.*rule fp8_delayed_recompute_modules\)$"):
            check_config(pr, replace(base, recompute_modules=modules))
    check_config(_qwen3("fp8-cs"), replace(base, recompute_modules="moe_act+layernorm"))  # current scaling may
    check_config(pr, replace(base, recompute_modules="core_attn"))


def test_w5_a2a_overlap_with_mtp_needs_pipelining() -> None:
    pr = dnnplace.load_llm(CONFIGS / "deepseek-v3.json", gpus=1024, seq_len=4096, global_batch=8192)
    cfg = ParallelConfig(1, 1, 1, 1, 1024, 1, "none", False, True, (61,), ep=64, a2a_overlap=True)
    with pytest.raises(DnnplaceError, match=r"MTP layer needs pp > 1 .*rule a2a_overlap_mtp_pp\)$"):
        check_config(pr, cfg)
    assert "a2a_overlap_mtp_pp" in {r.name for r in CONFIG_RULES}  # the rules the search filters with
    check_config(pr, replace(cfg, a2a_overlap=False))
