"""Exporters round-trip through the trainers' own parsers; hostile plans fail in one line.

Megatron: bash itself reads the exported array, then an argparse parser built
from the option table extracted from Megatron-LM (fixtures/megatron_options.json)
parses it, and megatron-core (when installed) checks the layer split with its
own layout parser and layer-count rule.  torchtitan: its ``ConfigManager``
loads the TOML (torchtitan 0.2.x, ``pip install '.[trainers]'``).  DeepSpeed: its
``DeepSpeedConfig`` loads ``ds_config``.  Each real-parser test is skipped when
that package is missing.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from dnnplace.errors import DnnplaceError
from dnnplace.exporters import EXPORTERS, export
from dnnplace.exporters.megatron import ARRAY
from dnnplace.frontends.llm_plan import validate_plan

FIX = Path(__file__).parent / "fixtures"
BASE = json.loads((FIX / "llama3.1-70b_64xh100.plan.json").read_text())
OPTIONS = json.loads((FIX / "megatron_options.json").read_text())


def plan(*, gpus: int | None = None, model: dict | None = None, job: dict | None = None, **cfg: Any) -> dict:
    """A consistent plan derived from the 70B example (dp, microbatches and first/last filled in)."""
    p = copy.deepcopy(BASE)
    p["model"].update(model or {})
    p["job"].update(job or {})
    c = p["config"]
    c.update(cfg)
    if "layers_per_stage" not in cfg:
        n, k = p["model"]["num_layers"], c["pp"] * c["vp"]
        c["layers_per_stage"] = [n // k + (i < n % k) for i in range(k)]
    lps, pp = c["layers_per_stage"], c["pp"]
    c["first_stage_layers"], c["last_stage_layers"] = sum(lps[0::pp]), sum(lps[pp - 1::pp])
    p["cluster"]["gpus"] = gpus or c["tp"] * pp * c["cp"] * c["dp"]
    c["num_microbatches"] = p["job"]["global_batch"] // (c["dp"] * c["mbs"])
    return validate_plan(p)


LLAMA8B = {"name": "llama3.1-8b", "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
           "num_attention_heads": 32, "num_key_value_heads": 8}
PLANS = {
    "70b-tp4-pp4-vp5-cp2": plan(),
    "8b-tp1-pp1-cp2": plan(model=LLAMA8B, tp=1, pp=1, vp=1, cp=2, dp=8, sequence_parallel=False,
                           distributed_optimizer=False, recompute="selective", job={"precision": "fp8"}),
    "70b-uneven-first-last": plan(tp=8, pp=4, vp=1, cp=1, dp=2, layers_per_stage=[18, 22, 22, 18]),
    "70b-full-recompute-layout": plan(tp=8, pp=4, vp=2, cp=1, dp=2, recompute="full",
                                      layers_per_stage=[9, 11, 10, 10, 10, 10, 11, 9]),
    "gelu-learned-layernorm": plan(model={"mlp": "relu2", "position": "learned", "norm": "layer",
                                          "tied_embeddings": True, "num_key_value_heads": 64},
                                   tp=2, pp=2, vp=1, cp=1, dp=4, layers_per_stage=[39, 41]),
}


# ---------------------------------------------------------------- megatron


def bash_args(text: str, tmp_path: Path) -> list[str]:
    """The array as bash itself reads it (source the snippet, print each element NUL-terminated)."""
    f = tmp_path / "args.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", f'source "$1" && printf "%s\\0" "${{{ARRAY}[@]}}"', "_", str(f)],
                         capture_output=True, check=True, timeout=30)
    return out.stdout.decode().split("\0")[:-1]


def megatron_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    for name, spec in OPTIONS["options"].items():
        if spec["type"] == "flag":
            parser.add_argument(name, action="store_true")
        else:
            parser.add_argument(name, type=int if spec["type"] == "int" else str, choices=spec.get("choices"))
    return parser


def megatron_namespace(p: dict, tmp_path: Path) -> argparse.Namespace:
    args = bash_args(export(p, "megatron"), tmp_path)
    ns, unknown = megatron_parser().parse_known_args(args)
    assert unknown == [], unknown
    for group in OPTIONS["at_most_one_of"]:
        assert sum(getattr(ns, o[2:].replace("-", "_")) is not None for o in group) <= 1
    return ns


def megatron_built_layers(ns: argparse.Namespace) -> list[int] | None:
    """Decoder layers per virtual stage as megatron-core builds them, or None without megatron-core."""
    if importlib.util.find_spec("megatron") is None:
        return None
    import torch
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    pp = ns.pipeline_model_parallel_size
    if ns.pipeline_model_parallel_layout is not None:
        layout = PipelineParallelLayerLayout.from_str(ns.pipeline_model_parallel_layout, pp)
        layout.validate_layer_layout(num_layers=ns.num_layers, mtp_num_layers=0)
        vp = layout.virtual_pipeline_model_parallel_size
        from megatron.core import parallel_state  # the layout reads the VP size from the global state

        parallel_state.set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
        try:
            return [layout.get_num_layers_to_build(vp_stage=i // pp, pp_rank=i % pp) for i in range(pp * vp)]
        finally:
            parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    vp = ns.num_virtual_stages_per_pipeline_rank
    cfg = TransformerConfig(num_layers=ns.num_layers, hidden_size=ns.hidden_size,
                            num_attention_heads=ns.num_attention_heads, pipeline_model_parallel_size=pp,
                            virtual_pipeline_model_parallel_size=vp, pipeline_dtype=torch.bfloat16,
                            num_layers_in_first_pipeline_stage=ns.decoder_first_pipeline_num_layers,
                            num_layers_in_last_pipeline_stage=ns.decoder_last_pipeline_num_layers)
    vp = vp or 1
    return [get_num_layers_to_build(cfg, vp_stage=i // pp if vp > 1 else None, pp_rank=i % pp)
            for i in range(pp * vp)]


@pytest.mark.parametrize("key", PLANS)
def test_megatron_round_trip(key: str, tmp_path: Path) -> None:
    p = PLANS[key]
    m, c, j = p["model"], p["config"], p["job"]
    ns = megatron_namespace(p, tmp_path)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == (
        c["tp"], c["pp"], c["cp"])
    assert (ns.micro_batch_size, ns.global_batch_size, ns.seq_length) == (c["mbs"], j["global_batch"], j["seq_len"])
    assert (ns.num_layers, ns.hidden_size, ns.ffn_hidden_size, ns.num_attention_heads) == (
        m["num_layers"], m["hidden_size"], m["ffn_hidden_size"], m["num_attention_heads"])
    assert ns.sequence_parallel == (c["sequence_parallel"] and c["tp"] > 1)
    assert ns.use_distributed_optimizer == c["distributed_optimizer"]
    assert ns.group_query_attention == (m["num_key_value_heads"] < m["num_attention_heads"])
    assert ns.untie_embeddings_and_output_weights == (not m["tied_embeddings"])
    assert ns.swiglu == (m["mlp"] == "swiglu") and ns.squared_relu == (m["mlp"] == "relu2")
    assert ns.fp8_format == ("hybrid" if j["precision"] == "fp8" else None) and ns.bf16
    if c["recompute"] == "full":
        assert (ns.recompute_granularity, ns.recompute_method, ns.recompute_num_layers) == ("full", "uniform", 1)
    assert ns.recompute_activations == (c["recompute"] == "selective")
    built = megatron_built_layers(ns)
    if built is not None:
        assert built == c["layers_per_stage"]


def test_megatron_option_choice(tmp_path: Path) -> None:
    """Even split: VP count only; uneven first/last: the two counts; anything else: the layout."""
    ns = megatron_namespace(PLANS["70b-tp4-pp4-vp5-cp2"], tmp_path)
    assert ns.num_virtual_stages_per_pipeline_rank == 5 and ns.pipeline_model_parallel_layout is None
    ns = megatron_namespace(PLANS["70b-uneven-first-last"], tmp_path)
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (18, 18)
    ns = megatron_namespace(PLANS["70b-full-recompute-layout"], tmp_path)
    assert ns.pipeline_model_parallel_layout.startswith("E") and ns.pipeline_model_parallel_layout.endswith("L")
    assert ns.num_virtual_stages_per_pipeline_rank is None


# ---------------------------------------------------------------- torchtitan


def torchtitan_config_manager() -> Any:
    """torchtitan's ConfigManager, imported without the package __init__ (it pulls triton MoE kernels)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan is not installed (pip install '.[trainers]')")
    if "torchtitan" not in sys.modules:
        sys.modules["torchtitan"] = importlib.util.module_from_spec(spec)  # the package, its __init__ not run
    from torchtitan.config import ConfigManager

    return ConfigManager


@pytest.mark.parametrize("key", PLANS)
def test_torchtitan_round_trip(key: str, tmp_path: Path) -> None:
    p = PLANS[key]
    c, j = p["config"], p["job"]
    text = export(p, "torchtitan")
    f = tmp_path / "job.toml"
    f.write_text(text)
    assert tomllib.loads(text)["job"]["description"] == p["model"]["name"]
    cfg = torchtitan_config_manager()().parse_args(["--job.config_file", str(f)])
    par = cfg.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree) == (
        c["tp"], c["pp"], c["cp"])
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == c["dp"]
    assert (cfg.training.global_batch_size, cfg.training.local_batch_size, cfg.training.seq_len) == (
        j["global_batch"], j["global_batch"] // c["dp"], j["seq_len"])
    assert cfg.activation_checkpoint.mode == c["recompute"]
    if c["pp"] > 1:
        from torch.distributed.pipelining.schedules import get_schedule_class

        get_schedule_class(par.pipeline_parallel_schedule)  # torch knows the schedule name
        parts = par.module_fqns_per_model_part
        assert len(parts) == c["pp"] * c["vp"]
        assert [sum(x.startswith("layers.") for x in part) for part in parts] == c["layers_per_stage"]
        flat = [x for part in parts for x in part]
        assert flat == ["tok_embeddings"] + [f"layers.{i}" for i in range(p["model"]["num_layers"])] + [
            "norm", "output"]


# ---------------------------------------------------------------- deepspeed


@pytest.mark.parametrize("key", PLANS)
def test_deepspeed_round_trip(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = PLANS[key]
    c, j = p["config"], p["job"]
    doc = json.loads(export(p, "deepspeed"))
    ds = doc["ds_config"]
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * c[
        "dp"] == j["global_batch"]
    pm = doc["pipeline_module"]
    parts = pm["parts"]
    assert len(parts) == c["pp"] + 1 and parts[0] == 0 and parts[-1] == p["model"]["num_layers"] + 3
    assert all(a < b for a, b in zip(parts, parts[1:]))
    assert sum(pm["decoder_layers_per_stage"]) == p["model"]["num_layers"]
    assert bool(doc["notes"]) == (c["vp"] > 1 or c["cp"] > 1 or c["tp"] > 1 or c["recompute"] == "selective"
                                  or j["precision"] == "fp8")
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install '.[trainers]')")
    import deepspeed.runtime.config as ds_runtime_config
    from deepspeed.runtime.config import DeepSpeedConfig

    # Without an initialised process group DeepSpeed falls back to world size 1 before it asks the mpu.
    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)

    class MPU:  # DeepSpeed reads the data-parallel size from the model-parallel unit it is given
        @staticmethod
        def get_data_parallel_world_size() -> int:
            return int(c["dp"])

    cfg = DeepSpeedConfig(copy.deepcopy(ds), mpu=MPU())
    assert cfg.train_batch_size == j["global_batch"]
    assert cfg.zero_optimization_stage == (1 if c["distributed_optimizer"] else 0)
    assert cfg.bfloat16_config.enabled
    assert cfg.tensor_parallel_config.autotp_size == (c["tp"] if c["tp"] > 1 else 0)
    assert cfg.activation_checkpointing_config.partition_activations == (c["recompute"] == "full" and c["tp"] > 1)
    assert cfg.pipeline["stages"] == c["pp"]


# ---------------------------------------------------------------- hostile plans and the helper


HOSTILE_NAMES = ['x"; rm -rf / #', "x$(touch /tmp/pwned)`id`", 'a"]\n[evil]\nx = "1', "' \\ \" ]] \u202e"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_or_escaped(name: str, tmp_path: Path) -> None:
    p = copy.deepcopy(PLANS["70b-tp4-pp4-vp5-cp2"])
    p["model"]["name"] = name
    if "\n" in name:
        with pytest.raises(DnnplaceError, match=r"model\.name"):
            validate_plan(p)
        return
    validate_plan(p)
    args = bash_args(export(p, "megatron"), tmp_path)  # bash sees only the plan's options
    assert megatron_parser().parse_known_args(args)[1] == []
    assert tomllib.loads(export(p, "torchtitan"))["job"]["description"] == name
    assert set(tomllib.loads(export(p, "torchtitan"))) == {"job", "model", "training", "parallelism",
                                                            "activation_checkpoint"}
    assert json.loads(export(p, "deepspeed"))["model"] == name


def _bad(path: str, value: Any) -> dict:
    p = copy.deepcopy(PLANS["70b-tp4-pp4-vp5-cp2"])
    *head, last = path.split(".")
    obj = p
    for k in head:
        obj = obj[k]
    if value is KeyError:
        del obj[last]
    else:
        obj[last] = value
    return p


@pytest.mark.parametrize("path,value,field", [
    ("config.tp", "4", "config.tp"),
    ("config.tp", 4.0, "config.tp"),
    ("config.pp", True, "config.pp"),
    ("config.mbs", -1, "config.mbs"),
    ("config.dp", 3, r"tp\*pp\*cp\*dp"),
    ("cluster.gpus", 63, r"tp\*pp\*cp\*dp"),
    ("config.num_microbatches", 63, "num_microbatches"),
    ("config.layers_per_stage", [4] * 19 + [5], "layers_per_stage"),
    ("config.layers_per_stage", [4] * 19, "layers_per_stage"),
    ("config.layers_per_stage", [4] * 19 + ["4"], r"layers_per_stage\[19\]"),
    ("config.first_stage_layers", 19, "first_stage_layers"),
    ("config.recompute", "everything", "config.recompute"),
    ("job.precision", "fp16; echo", "job.precision"),
    ("model.mlp", "swiglu --evil", "model.mlp"),
    ("model.name", "", "model.name"),
    ("model.name", 7, "model.name"),
    ("model.num_key_value_heads", 7, "num_key_value_heads"),
    ("model.hidden_size", 10**30, "model.hidden_size"),
    ("model.extra", 1, "model.extra"),
    ("job.seq_len", KeyError, "job.seq_len"),
    ("format", "other", "plan.format"),
    ("config", [], "config"),
])
def test_bad_plans_fail_in_one_line(path: str, value: Any, field: str) -> None:
    with pytest.raises(DnnplaceError, match=field) as info:
        validate_plan(_bad(path, value))
    assert "\n" not in str(info.value)


def test_export_command_writes_atomically_and_refuses_its_input(tmp_path: Path) -> None:
    src = tmp_path / "plan.json"
    src.write_text(json.dumps(PLANS["70b-uneven-first-last"]))
    for name, exp in EXPORTERS.items():
        if exp.takes != "llm-plan":
            continue
        out = tmp_path / f"out{exp.suffix}"
        res = run_cli("export", src, "--to", name, "-o", out)
        assert res.returncode == 0, res.stderr
        text = out.read_text()
        assert text == run_cli("export", src, "--to", name).stdout and text.endswith("\n")
    res = run_cli("export", src, "--to", "megatron", "-o", src)
    assert res.returncode == 2 and "input" in res.stderr
    res = run_cli("export", src, "--to", "nemo", "-o", tmp_path / "x")
    assert res.returncode == 2
    res = run_cli("export", src, "--to", "megatron", "-w", src, "-o", tmp_path / "x")
    assert res.returncode == 2 and "applies to split targets only" in res.stderr
    res = run_cli("export", src, "--to", "stages", "-o", tmp_path / "x")
    assert res.returncode == 2 and "-w" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    res = run_cli("export", bad, "--to", "megatron")
    assert res.returncode == 2 and "not valid JSON" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
