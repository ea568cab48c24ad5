"""The one LLM rule set: each rule refuses by name, and the search, the evaluator and the plan reader agree."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from cli_runner import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_helpers import EXAMPLES, problem

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.evaluation.rules import CONFIG_RULES, check_config, check_problem
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.solvers.search import base_columns, splits
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig, Recompute, TransformerArch


def arch(**kw: object) -> TransformerArch:
    base = dict(name="m", family="llama", num_layers=8, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=8,
                head_dim=64, vocab=32000)
    return TransformerArch(**{**base, **kw})  # type: ignore[arg-type]


def cfg(tp: int = 1, pp: int = 1, vp: int = 1, cp: int = 1, dp: int = 8, mbs: int = 1, layers: int = 8,
        sp: bool | None = None, lps: tuple[int, ...] | None = None) -> ParallelConfig:
    k = pp * vp
    lps = lps if lps is not None else tuple(layers // k + (i < layers % k) for i in range(k))
    return ParallelConfig(tp, pp, vp, cp, dp, mbs, "none", tp > 1 if sp is None else sp, True, lps)


# (architecture change, gpus, gbs, seq, config, rule it breaks): every rule of the set, and the #33 variants
CASES = [
    ({}, 8, 16, 1024, cfg(tp=2, dp=2), "world_size"),
    ({"heads": 12, "kv_heads": 12, "hidden": 768}, 8, 16, 1024, cfg(tp=8, dp=1), "tp_heads"),
    ({"kv_heads": 2}, 8, 16, 1024, cfg(tp=4, dp=2), "tp_kv_heads"),  # TP not dividing the KV heads
    ({"kv_heads": 1}, 8, 16, 1024, cfg(tp=2, dp=4), "tp_kv_heads"),
    ({"ffn_hidden": 14337}, 8, 16, 1024, cfg(tp=2, dp=4), "tp_ffn"),  # Megatron's MLP linears split it
    ({"ffn_hidden": 4098}, 8, 16, 1024, cfg(tp=4, dp=2), "tp_ffn"),
    ({"heads": 16, "kv_heads": 16}, 16, 16, 1024, cfg(tp=16, dp=1), "tp_in_node"),  # was the search's alone
    ({"num_layers": 2}, 8, 16, 1024, cfg(pp=4, dp=2, layers=2, lps=(1, 1, 0, 0)), "pp_layers"),
    ({}, 8, 16, 1000, cfg(cp=8, dp=1), "cp_sequence"),
    ({}, 8, 16, 1025, cfg(tp=2, dp=4), "sp_sequence"),  # sequence not divisible by TP with SP
    ({"heads": 16, "kv_heads": 16}, 8, 16, 1028, cfg(tp=4, cp=2, dp=1), "sp_sequence"),  # 1028 / cp 2 = 514
    ({}, 8, 12, 1024, cfg(dp=8), "batch_divisible"),
    ({}, 8, 16, 1024, cfg(dp=8, vp=2), "vp_needs_pp"),
    ({}, 8, 24, 1024, cfg(pp=2, vp=2, dp=4, mbs=2), "vp_microbatches"),  # 3 micro-batches on pp 2
    ({}, 8, 48, 1024, cfg(pp=4, vp=2, dp=2, mbs=4), "vp_microbatches"),  # 6 on pp 4
    ({}, 8, 16, 1024, cfg(pp=2, vp=8, dp=4, lps=(1,) * 16), "vp_layers"),
    ({}, 8, 16, 1024, cfg(pp=2, dp=4, lps=(8,)), "split_count"),
    ({}, 8, 16, 1024, cfg(pp=2, dp=4, lps=(8, 0)), "split_min"),  # the plan reader used to accept a 0
    ({}, 8, 16, 1024, cfg(pp=2, dp=4, lps=(4, 5)), "split_sum"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), ep=2), "dense_no_expert_knobs"),  # a dense model has no experts
    ({}, 8, 16, 1024, replace(cfg(dp=8), zero=0), "zero_dist_opt"),  # ZeRO-0 without the distributed optimizer
    ({}, 8, 16, 1024, replace(cfg(dp=8), zero=3, distributed_optimizer=False), "zero_dist_opt"),
    ({}, 8, 16, 1024, replace(cfg(tp=8, dp=1), zero=3), "zero_shards"),  # nothing to shard over
    ({}, 8, 16, 1024, replace(cfg(dp=8), offload_layers=8), "offload_layers"),  # Megatron: fewer than L
    ({}, 8, 16, 1024, replace(cfg(pp=2, dp=4), offload_layers=1), "offload_pp"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), offload_layers=1, recompute="selective"), "offload_recompute"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), cuda_graphs="attn+moe_router"), "graphs_moe_scope"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), offload_layers=1, cuda_graphs="attn"), "graphs_offload"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), recompute="full", cuda_graphs="attn"), "graphs_full_recompute"),
    ({}, 8, 16, 1024, replace(cfg(dp=8), recompute="full", cuda_graphs="layer"), "graphs_full_recompute"),
    ({"dropout": True}, 8, 16, 1024, replace(cfg(dp=8), recompute="selective", cuda_graphs="attn"),
     "graphs_dropout_recompute"),  # the dense selective set is core_attn
    ({"dropout": True}, 8, 16, 1024, replace(cfg(dp=8), recompute="selective", cuda_graphs="full_iteration"),
     "graphs_dropout_recompute"),
]
#: Rules only a mixture of experts breaks, with their cases in tests/models/llm/test_llm_zero.py, and the
#: offloading rules another device or an MoE model breaks (tests/models/llm/test_llm_offload.py).
MOE_ONLY = {"zero_dense", "offload_host", "offload_dense", "graphs_mlp_scope", "graphs_layer_moe",
            "fp8_param_gather_zero", "fp8_delayed_recompute_modules",  # these two: test_trainer_rules.py
            "graphs_a2a_mlp", "graphs_moe_recompute"}  # exporters/test_megatron_moe.py


def _problem(change: dict, gpus: int, gbs: int, seq: int):  # noqa: ANN202
    return problem(arch(**change), gpus, gbs, seq=seq)


@pytest.mark.parametrize("change,gpus,gbs,seq,config,rule", CASES)
def test_each_rule_refuses_by_name(change: dict, gpus: int, gbs: int, seq: int, config: ParallelConfig,
                                   rule: str) -> None:
    pr = _problem(change, gpus, gbs, seq)
    with pytest.raises(DnnplaceError, match=rf"\(rule {rule}\)$") as info:
        check_config(pr, config)
    assert "\n" not in str(info.value)
    with pytest.raises(DnnplaceError, match=rule):
        evaluate(pr, config)


def test_every_rule_has_a_case() -> None:
    from dnnplace.models.llm.moe_rules import MOE_CONFIG_RULES  # their cases: tests/models/llm/test_moe_rules.py

    assert {r.name for r in CONFIG_RULES} == {c[-1] for c in CASES} | {r.name for r in MOE_CONFIG_RULES} | MOE_ONLY


def _valid_plan_doc() -> dict:
    pr = problem(arch(num_layers=8), 8, 32, seq=1024)
    return search(pr, {"tp": 2, "pp": 2, "vp": 2, "cp": 1, "mbs": 1, "recompute": "none"}).to_dict()


@pytest.mark.parametrize("edit,rule", [
    ({"model": {"num_key_value_heads": 1, "num_attention_heads": 16}}, "tp_kv_heads"),
    ({"model": {"ffn_hidden_size": 4097}}, "tp_ffn"),
    ({"job": {"seq_len": 1025}}, "sp_sequence"),
    ({"job": {"global_batch": 10}, "config": {"num_microbatches": 5}}, "vp_microbatches"),
    ({"config": {"layers_per_stage": [3, 0, 3, 2], "first_stage_layers": 6, "last_stage_layers": 2}},
     "split_min"),
])
def test_plan_files_carrying_refused_configs_are_refused_on_reading(edit: dict, rule: str) -> None:
    doc = _valid_plan_doc()
    for part, values in edit.items():
        doc[part].update(values)
    with pytest.raises(DnnplaceError, match=f"rule {rule}"):
        LLMPlan.from_dict(json.loads(json.dumps(doc)))


def test_ffn_not_divisible_admits_no_tensor_parallelism(tmp_path) -> None:  # noqa: ANN001
    """intermediate_size 14337: the search never picks tp > 1, and pinning tp=2 names the rule."""
    a = arch(ffn_hidden=14337)
    pr = problem(a, 8, 16, seq=1024)
    cols = base_columns(pr, {})
    assert set(cols["tp"].tolist()) == {1}
    assert search(pr).config.tp == 1
    with pytest.raises(DnnplaceError, match="rule tp_ffn"):
        search(pr, {"tp": 2})
    config = json.loads((EXAMPLES / "llama3.1-8b.json").read_text())
    config["intermediate_size"] = 14337
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    res = run_cli("plan", path, "--gpus", "8", "--seq-len", "4096", "--global-batch", "32", "--fix", "tp=2")
    assert res.returncode == 2 and "rule tp_ffn" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_learned_positions_limit_the_sequence() -> None:
    """GPT-2-style learned positions cannot run past max_position: a problem rule, for every entry point."""
    a = arch(family="gpt2", mlp="gelu", position="learned", norm="layer", max_position=1024, kv_heads=16)
    ok = problem(a, 8, 16, seq=1024)
    check_problem(ok)
    for seq in (1025, 2048, 8192):
        pr = problem(a, 8, 16, seq=seq)
        for call in (lambda: check_problem(pr), lambda: search(pr), lambda: evaluate(pr, cfg())):  # noqa: B023
            with pytest.raises(DnnplaceError, match="rule learned_positions"):
                call()
    doc = search(ok, {"tp": 1, "pp": 1, "cp": 1, "mbs": 1}).to_dict()
    doc["job"]["seq_len"] = 2048
    with pytest.raises(DnnplaceError, match="learned_positions"):
        LLMPlan.from_dict(doc)
    rope = problem(replace(a, position="rope"), 8, 16, seq=8192)  # RoPE models are not limited by it
    check_problem(rope)


SMALL = st.builds(
    lambda L, hd, heads, kvdiv, ffn: TransformerArch("tiny", "llama", L, hd * heads, ffn, heads, heads // kvdiv,
                                                     hd, 1000),
    st.integers(1, 6), st.sampled_from([64, 96]), st.sampled_from([1, 2, 3, 4, 6]), st.sampled_from([1, 2, 3]),
    st.sampled_from([384, 1000, 1536]))


@settings(max_examples=15, deadline=None)
@given(a=SMALL, gpus=st.sampled_from([1, 2, 4, 6, 8, 12]), gpn=st.sampled_from([2, 4, 8]),
       gbs=st.sampled_from([1, 2, 3, 4, 6, 8]), seq=st.sampled_from([96, 128, 1000, 1024]))
def test_search_enumerates_exactly_what_the_rules_accept(a: TransformerArch, gpus: int, gpn: int, gbs: int,
                                                         seq: int) -> None:
    """The search's base configurations = every (tp, pp, vp, cp, dp, mbs, recompute, optimizer) in range that
    check_config accepts with some split of the family, found by brute force through check_config."""
    if not a.kv_heads or a.heads % a.kv_heads:
        return
    pr = problem(a, gpus, gbs, seq=seq, gpn=gpn)
    try:
        check_problem(pr)
    except DnnplaceError:
        return
    cols = base_columns(pr, {})
    got = {row for row in zip(*(cols[k].tolist() for k in ("tp", "pp", "vp", "cp", "dp", "mbs", "recompute",
                                                             "distributed_optimizer")), strict=True)
           if len(splits(a.num_layers, row[1], row[2]))}  # the search drops what its split family cannot split
    want = set()
    L = a.num_layers
    for tp, pp, cp, vp, mbs in itertools.product(range(1, gpus + 1), range(1, gpus + 1), range(1, gpus + 1),
                                                 range(1, L + 1), range(1, gbs + 1)):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        rows = splits(L, pp, vp) if pp * vp <= L else []
        for rc, dist in itertools.product(range(3), (True, False)):
            for r in rows[:1]:
                c = ParallelConfig(tp, pp, vp, cp, dp, mbs, list(Recompute)[rc], tp > 1, dist,
                                   _stages(list(r), pp, vp))
                try:
                    check_config(pr, c)
                except DnnplaceError:
                    continue
                want.add((tp, pp, vp, cp, dp, mbs, rc, dist))
    assert got == want


def _stages(rank_layers: list[int], pp: int, vp: int) -> tuple[int, ...]:
    """Per-rank layer counts as virtual stages (rank r's chunks: r, r + pp, ...), each rank's split evenly."""
    out = [0] * (pp * vp)
    for r, n in enumerate(rank_layers):
        for k in range(vp):
            out[k * pp + r] = n // vp + (k < n % vp)
    return tuple(out)


def test_interleaved_split_may_leave_the_ends_to_embedding_and_loss() -> None:
    # Megatron-Bridge's Llama 3.1 405B recipe (account_for_embedding / account_for_loss_in_pipeline_split) on
    # pp 16 x vp 8: 128 virtual stages for 126 layers, the first holding only the embedding, the last the loss.
    from dnnplace.core.catalogue import CATALOGUE
    from dnnplace.models.llm.spec import Cluster, LLMProblem, TrainingJob

    arch = TransformerArch("llama3.1-405b", "llama", 126, 16384, 53248, 128, 8, 128, 128256)
    dev = CATALOGUE["gb200"]
    pr = LLMProblem(arch, Cluster(dev.name, 256, 64), TrainingJob(8192, 1536, "bf16"), dev)
    split = (0,) + (1,) * 126 + (0,)
    est = evaluate(pr, ParallelConfig(4, 16, 8, 1, 4, 1, "none", True, True, split))
    assert est.step_time_s > 0
    with pytest.raises(DnnplaceError, match="rule (vp_layers|split_min)"):  # an inner stage without a layer is not one
        evaluate(pr, ParallelConfig(4, 16, 8, 1, 4, 1, "none", True, True, (1, 0) + (1,) * 124 + (1, 0)))
    with pytest.raises(DnnplaceError, match="rule split_min"):  # nor is a 1F1B rank without one
        evaluate(pr, ParallelConfig(4, 2, 1, 1, 32, 1, "none", True, True, (126, 0)))
