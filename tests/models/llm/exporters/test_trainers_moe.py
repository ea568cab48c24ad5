"""exporters/torchtitan_moe and deepspeed_moe: MoE plans written for torchtitan and DeepSpeed-MoE, read back by
the trainers' own parsers (torchtitan's ConfigManager and ParallelDims, DeepSpeed's MoE layer and config), the
MoE flavor table against torchtitan's sources, and one-line refusals of what they cannot run as priced."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import dnnplace
from dnnplace.arch.moe_config import load_moe
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.exporters import export
from dnnplace.models.llm.exporters.torchtitan_moe import MOE_FLAVORS, moe_flavor_of
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

FIXTURES = CONFIGS


def qwen3_plan(**cfg: Any) -> LLMPlan:
    pr = dnnplace.load_llm(FIXTURES / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024)
    base: dict[str, Any] = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "dp": 16, "mbs": 1, "recompute": "none",
                            "sequence_parallel": False, "distributed_optimizer": True, "layers_per_stage": (48,),
                            "ep": 16, "etp": 1, "dispatcher": "flex"}
    base.update(cfg)
    c = ParallelConfig(**base)
    est = evaluate(pr, c)
    return LLMPlan(pr, c, est, "fixed", est.step_time_s, 0.0, False, 0.0)


def torchtitan_config_manager() -> Any:
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    if "torchtitan" not in sys.modules:
        sys.modules["torchtitan"] = importlib.util.module_from_spec(spec)  # its __init__ pulls triton kernels
    from torchtitan.config import ConfigManager

    return ConfigManager


# torchtitan writes no ZeRO-1 (it shards with FSDP2 or replicates with DDP) and the planner prices MoE models at
# ZeRO 0/1 only: the runs it can express replicate, so their experts fold into tp x cp (ep x etp divides it).
_REPLICATED = {"tp": 2, "dp": 8, "sequence_parallel": True, "distributed_optimizer": False, "ep": 2}


@pytest.mark.parametrize("cfg", [{}, {"dispatcher": "alltoall"}, {"cp": 2, "dp": 4, "etp": 2}])
def test_torchtitan_moe_round_trip(cfg: dict[str, Any], tmp_path: Path) -> None:
    p = qwen3_plan(**{**_REPLICATED, **cfg})
    c = p.config
    f = tmp_path / "job.toml"
    f.write_text(export(p, "torchtitan"))
    job = torchtitan_config_manager()().parse_args(["--job.config_file", str(f)])
    par = job.parallelism
    assert (job.model.name, job.model.flavor) == ("qwen3", "30B-A3B")
    assert (par.expert_parallel_degree, par.expert_tensor_parallel_degree) == (c.ep, c.etp)
    assert par.expert_parallel_comm_backend == ("deepep" if c.dispatcher == "flex" else "standard")
    from torchtitan.distributed.parallel_dims import ParallelDims

    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                        pp=par.pipeline_parallel_degree, ep=par.expert_parallel_degree,
                        etp=par.expert_tensor_parallel_degree, world_size=16)  # its own checks
    assert dims.ep_enabled and dims.dp_shard * dims.cp * dims.tp % (dims.ep * dims.etp) == 0


@pytest.mark.parametrize("cfg,culprit", [({**_REPLICATED, "dispatcher": "allgather"}, "dispatcher=allgather"),
                                         ({**_REPLICATED, "ep": 4, "etp": 4}, "etp=4"),
                                         ({"distributed_optimizer": False}, "does not divide"),
                                         ({}, "zero=1")])
def test_torchtitan_moe_refuses_what_it_cannot_run(cfg: dict[str, Any], culprit: str) -> None:
    with pytest.raises(DnnplaceError, match=culprit) as info:
        export(qwen3_plan(**cfg), "torchtitan")
    assert "\n" not in str(info.value)


def test_torchtitan_moe_refuses_deepseek_v3_mtp_and_names_the_field() -> None:
    """torchtitan's DeepSeek-V3 671B has no multi-token-prediction layer: the priced model is not buildable."""
    with pytest.raises(DnnplaceError, match="mtp_layers 1") as info:
        moe_flavor_of(load_moe(FIXTURES / "deepseek-v3.json"))
    assert "\n" not in str(info.value)
    assert moe_flavor_of(load_moe(FIXTURES / "qwen3-30b-a3b.json")).flavor == "30B-A3B"


def _registry(model: str) -> dict[str, dict[str, Any]]:
    """torchtitan's ``<model>_args`` literal read from its sources with :mod:`ast` (the modules import triton)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    root = Path(list(spec.submodule_search_locations)[0]) / "models" / model
    var = {"deepseek_v3": "deepseekv3_args", "qwen3": "qwen3_args"}[model]

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Call):  # MoEArgs(...)
            return {kw.arg: value(kw.value) for kw in node.keywords}
        try:
            return ast.literal_eval(node)
        except ValueError:
            return None

    for node in ast.walk(ast.parse((root / "__init__.py").read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            return {value(k): value(v) for k, v in zip(node.value.keys, node.value.values, strict=True)}
    raise AssertionError(f"no {var} in torchtitan")


def test_torchtitan_moe_flavor_table_is_torchtitans() -> None:
    reg = {name: _registry(name) for name in ("deepseek_v3", "qwen3")}
    for f in MOE_FLAVORS:
        a = reg[f.name][f.flavor]
        moe = a["moe_args"]
        got = (a["n_layers"], a["dim"], a["n_heads"], a["vocab_size"], moe["num_experts"], moe.get("top_k"),
               a["moe_inter_dim"], moe.get("num_shared_experts", 1), moe.get("score_func", "sigmoid"),
               moe.get("num_expert_groups") or 0, moe.get("num_limited_groups") or 0)
        assert got == (f.num_layers, f.hidden, f.heads, f.vocab, f.num_experts, f.top_k, f.expert_ffn,
                       f.shared_experts, f.router, f.expert_groups, f.topk_groups), f
        if f.name == "deepseek_v3":
            assert (a["n_dense_layers"], a["inter_dim"]) == (f.dense_layers, f.dense_ffn), f
            assert (a["q_lora_rank"], a["kv_lora_rank"], a["qk_nope_head_dim"], a["qk_rope_head_dim"],
                    a["v_head_dim"]) == f.mla, f
        else:
            assert a["n_kv_heads"] == f.kv_heads and a["moe_enabled"], f


def test_deepspeed_moe_layer_built_by_deepspeed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer arguments construct DeepSpeed's own MoE layer (its divisibility checks run); the engine config
    still parses."""
    p = qwen3_plan(dispatcher="alltoall")
    doc = json.loads(export(p, "deepspeed"))
    moe = doc["moe"]
    assert moe["sparse_layers"] == list(range(48))
    args = moe["layer_args"]
    assert (args["num_experts"], args["ep_size"], args["k"], args["drop_tokens"]) == (128, 16, 8, False)
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install '.[trainers]')")
    import torch
    from deepspeed.moe.layer import MoE

    layer = MoE(expert=torch.nn.Identity(), **args)
    assert (layer.num_experts, layer.ep_size, layer.num_local_experts) == (128, 16, 8)
    assert layer.deepspeed_moe.gate.k == 8 and not layer.deepspeed_moe.gate.drop_tokens


@pytest.mark.parametrize("cfg,culprit", [({}, "dispatcher=flex"),
                                         ({"dispatcher": "alltoall", "tp": 2, "dp": 8, "ep": 8,
                                           "sequence_parallel": True}, "etp=1 with tp=2")])
def test_deepspeed_moe_refuses_what_it_cannot_run(cfg: dict[str, Any], culprit: str) -> None:
    with pytest.raises(DnnplaceError, match=culprit) as info:
        export(qwen3_plan(**cfg), "deepspeed")
    assert "\n" not in str(info.value)
