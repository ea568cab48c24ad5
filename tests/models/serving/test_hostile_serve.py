"""``dnnplace serve`` used by a careful hostile user: each case here was a wrong answer or a dead end.

Why each test: a plan the engine refuses at start-up (TP not dividing the heads, TP on an engine without
it, more sequences than batched tokens, a KV dtype the engine does not have) or a knob dropped on the way to
the engine (the KV dtype in the exports) is the worst outcome -- a confident wrong answer; so are a
quantized checkpoint priced at 16 bits and a stopped search that leaves most of a large fleet idle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.arch.quant import quant_from_dict
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "serving" / "llama3.1-8b.json"


def _problem(gpus: str = "2xh100", **kw):
    return dnnplace.load_serving(MODEL, gpus=gpus, isl=512, osl=128, **kw)


def _config(tmp_path: Path, name: str = "config.json", **extra) -> Path:
    doc = json.loads(MODEL.read_text())
    doc.update(extra)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


# --- TP the engine refuses -----------------------------------------------------------------------------


def test_a_tp_that_does_not_divide_the_heads_is_refused_not_priced():
    with pytest.raises(DnnplaceError, match="TP 3 does not divide .* 32 attention heads"):
        dnnplace.solve(_problem("8xh100"), tp=3, time_limit=5)
    p = _problem("8xh100")
    bad = Replica((Stage("h100", 0, (0, 1, 2), 32),))
    ev = evaluate(p, ServingConfig((bad,), 8, 8192))  # a hand-edited plan at TP 3
    assert not ev.fits and "attention heads" in ev.why


def test_engines_without_tp_never_get_a_tp_plan():
    with pytest.raises(DnnplaceError, match="tp 1 only"):
        dnnplace.solve(_problem("4xh100", engine="llama.cpp"), tp=2, time_limit=5)
    plan = search(_problem("4xh100", engine="hf"), time_limit=5)
    assert plan.config.replicas and all(r.tp == 1 for r in plan.config.replicas)


@pytest.mark.parametrize(("fix", "words"), [
    ({"pp": 3}, "3 stages of 1 GPU"), ({"tp": 4}, "at most 2"), ({"tp": 2, "layers": "16+16"}, "layers=16\\+16"),
    ({"pp": 40}, "only 32 layers")])
def test_pins_the_fleet_cannot_lay_out_say_why_not_does_not_fit(fix, words):
    with pytest.raises(DnnplaceError, match=words) as info:
        dnnplace.solve(_problem(), time_limit=5, **fix)
    assert "fits on no deployment" not in str(info.value)


# --- vLLM's batch limits -------------------------------------------------------------------------------


def test_a_pinned_token_budget_caps_vllm_sequences_and_a_contradiction_is_refused():
    plan = search(_problem(), time_limit=5, max_num_batched_tokens=64)
    assert plan.config.max_num_seqs <= plan.config.max_num_batched_tokens == 64
    plan = search(_problem(), time_limit=5, max_num_seqs=10_000)
    assert plan.config.max_num_batched_tokens >= 10_000
    with pytest.raises(DnnplaceError, match="max_num_seqs=200 is more than max_num_batched_tokens=100"):
        dnnplace.solve(_problem(), time_limit=5, max_num_seqs=200, max_num_batched_tokens=100)
    ev = evaluate(_problem(), ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 256, 64))
    assert not ev.fits and "refuses" in ev.why


# --- quantized checkpoints -----------------------------------------------------------------------------


def test_modelopt_checkpoints_are_read_from_hf_quant_config_beside_the_config(tmp_path):
    quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _config(folder)
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    with pytest.raises(DnnplaceError, match="quantized to fp4 .*give --precision fp4"):
        dnnplace.load_serving(folder, gpus="1xh100", precision="bf16")
    assert dnnplace.load_serving(folder, gpus="1xh100", precision="fp4").model.precision == "fp4"
    # no --precision: the checkpoint's own (a quantized checkpoint served without the flag is not refused)
    assert dnnplace.load_serving(folder, gpus="1xh100").model.precision == "fp4"
    assert dnnplace.load_serving(_config(tmp_path, "plain.json"), gpus="1xh100").model.precision == "bf16"
    side = _config(tmp_path, "org--M-FP8_config.json")  # configs stored side by side in one folder
    (tmp_path / "org--M-FP8_hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    assert dnnplace.load_serving(side, gpus="1xh100", precision="fp8").model.precision == "fp8"


def test_the_plan_file_of_a_modelopt_checkpoint_reads_back_the_same(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _config(folder)
    (folder / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A16_AWQ"}}))
    out = tmp_path / "plan.json"
    res = run_cli("serve", folder, "--gpus", "1xl40s", "--precision", "int4", "--isl", 512, "--osl", 128, "-o", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["model"]["config"]["quantization_config"]["quant_method"] == "modelopt"
    back = run_cli("evaluate", out, "--json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["output_tokens_per_s"] == pytest.approx(doc["prediction"]["output_tokens_per_s"])


@pytest.mark.parametrize(("q", "precision"), [
    ({"producer": {"name": "modelopt"}, "quant_algo": "FP8"}, "fp8"),  # no quant_method: ModelOpt's own
    ({"quant_method": "mxfp4"}, "fp4"),  # GPT-OSS
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8")])
def test_quantized_configs_that_had_no_precision_to_give(tmp_path, q, precision):
    assert quant_from_dict({"quantization_config": q}, "c").precision == precision  # type: ignore[union-attr]
    path = _config(tmp_path, quantization_config=q)
    assert dnnplace.load_serving(path, gpus="1xh100", precision=precision).model.precision == precision


def test_an_unknown_modelopt_algorithm_is_named_not_read_as_fp8():
    with pytest.raises(DnnplaceError, match="unknown ModelOpt quant_algo 'INT8_SQ'"):
        quant_from_dict({"quantization_config": {"quant_method": "modelopt", "quant_algo": "INT8_SQ"}}, "c")


# --- KV-cache dtypes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("engine", "kv"), [("vllm", "q8_0"), ("sglang", "q8_0"), ("trtllm", "q8_0"),
                                            ("llama.cpp", "fp8"), ("hf", "fp8")])
def test_a_kv_dtype_the_engine_has_not_is_refused(engine, kv):
    with pytest.raises(DnnplaceError, match=f"--kv-dtype {kv}: {engine} has no such KV cache"):
        _problem(engine=engine, kv_dtype=kv)


@pytest.mark.parametrize(("engine", "kv", "text"), [
    ("vllm", "fp8", "--kv-cache-dtype fp8"), ("sglang", "fp8", "--kv-cache-dtype fp8_e4m3"),
    ("trtllm", "fp8", '"dtype": "fp8"'), ("llama.cpp", "q8_0", "-ctk q8_0 -ctv q8_0")])
def test_the_planned_kv_dtype_reaches_the_engine(engine, kv, text):
    p = _problem("1xh100", engine=engine, kv_dtype=kv)
    plan = search(p, time_limit=5)
    assert text in export(p, plan, engine)


# --- plan files and large fleets -----------------------------------------------------------------------


def test_a_plan_whose_summary_contradicts_its_stages_is_refused(tmp_path):
    out = tmp_path / "plan.json"
    assert run_cli("serve", MODEL, "--gpus", "2xh100", "--isl", 512, "--osl", 128, "-o", out).returncode == 0
    doc = json.loads(out.read_text())
    doc["config"]["replicas"][0]["partition"] = [1, 2, 3]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("export", bad, "--to", "vllm")
    assert res.returncode == 2 and "'partition' is [1, 2, 3] but its stages give" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not res.stdout


@pytest.mark.parametrize("tried", ["many", [256], {"many": 1.0}, {"256": "fast"}, {"256": True}])
def test_a_plan_file_with_a_mangled_list_of_limits_tried_is_refused_in_one_line(tmp_path, tried):
    out = tmp_path / "plan.json"
    assert run_cli("serve", MODEL, "--gpus", "1xl40s", "--isl", 128, "--osl", 128, "-o", out).returncode == 0
    doc = json.loads(out.read_text())
    assert doc["max_num_seqs_searched"]  # the search tried the limit
    doc["max_num_seqs_searched"] = tried
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("evaluate", bad)
    assert res.returncode == 2 and "max_num_seqs_searched" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not res.stdout


def test_a_search_stopped_by_its_time_limit_still_uses_the_fleet():
    p = _problem("400xh100")
    plan = search(p, time_limit=1.0)
    used = sum(s.tp for r in plan.config.replicas for s in r.stages)
    assert plan.status != "optimal" or plan.bound is not None  # a stopped search claims no bound
    assert used >= 390  # not the few GPUs of the subsets solved before the limit
    sol = dnnplace.solve(_problem("2xh100"), time_limit=3)
    # the baselines' searches get what the search left of the user's one limit, never more
    assert 0.05 * 3 <= sol.plan.meta["time_limit"] <= 3


# --- what the exported command is launched with --------------------------------------------------------

M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"


def test_vllm_is_launched_with_a_context_its_kv_cache_holds():
    """vLLM refuses to start when a worker cannot hold one request of max_model_len: 70B on 2 x H100 holds
    ~42k tokens, so the model's 131,072 is capped in the plan and the command, and a pinned one is refused."""
    from dnnplace.models.serving.plan_file import plan_document
    from dnnplace.models.serving.spec import ServingPlan

    p = dnnplace.load_serving(M70, gpus="2xh100", isl=512, osl=128)
    cfg = ServingConfig((Replica((Stage("h100", 0, (0, 1), 80),)),), 64, 8192)
    ev = evaluate(p, cfg)
    assert ev.fits and ev.replicas[0].kv_tokens < 131072
    cmd = export(p, ServingPlan(cfg), "vllm")
    assert f"--max-model-len {int(ev.replicas[0].kv_tokens)}" in cmd
    assert plan_document(p, ServingPlan(cfg), ev)["prediction"]["max_model_len"] == int(ev.replicas[0].kv_tokens)
    pinned = dnnplace.load_serving(M70, gpus="2xh100", isl=512, osl=128, max_model_len=131072)
    bad = evaluate(pinned, cfg)
    assert not bad.fits and "vllm refuses to start" in bad.why
    p32 = dnnplace.load_serving(M70, gpus="2xh100", isl=512, osl=128, max_model_len=32768)
    plan = search(p32, time_limit=10)  # the DP's memory rule holds one such request per worker too
    assert plan.config.replicas and evaluate(p32, plan.config).fits


def test_a_plan_exported_to_another_engine_is_checked_under_that_engines_rules():
    from dnnplace.models.serving.spec import ServingPlan

    p = _problem("1xh100")
    plan = search(p, time_limit=5)
    assert "--mem-fraction-static 0.835" in export(p, plan, "sglang")  # SGLang's own rule on an H100, not vLLM's 0.92
    g = _problem("1xh100", engine="llama.cpp", precision="q4_k_m")
    gplan = ServingPlan(ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 4, 512))
    with pytest.raises(DnnplaceError, match="GGUF q4_k_m weights, which only llama.cpp loads"):
        export(g, gplan, "vllm")


def test_a_search_cut_before_any_fit_does_not_say_the_model_fits_nowhere():
    """70B fits on 2 x A100-80G, so "fits on no deployment ... needs at least 2 x a100" from a search stopped
    after a millisecond contradicted itself."""
    p = dnnplace.load_serving(M70, gpus="2xa100-80g+2xl40s;4xh100", isl=512, osl=128)
    with pytest.raises(DnnplaceError, match="not known; give more time") as info:
        dnnplace.solve(p, time_limit=1e-6)
    assert "fits on no deployment" not in str(info.value)


def test_tensorrt_llm_is_not_planned_on_gpus_it_has_no_build_for():
    with pytest.raises(DnnplaceError, match="trtllm runs on NVIDIA GPUs only; the fleet has mi300x"):
        _problem("1xh100;1xmi300x", engine="trtllm")
    p = _problem("1xmi300x", engine="llama.cpp")
    plan = search(p, time_limit=5)
    assert "--device ROCm0" in export(p, plan, "llama.cpp")  # a HIP build names its devices ROCm<i>
    with pytest.raises(DnnplaceError, match="NVIDIA GPUs only"):
        export(p, plan, "trtllm")


def test_llama_cpp_is_not_planned_with_weights_no_gguf_file_has():
    with pytest.raises(DnnplaceError, match="--precision fp8: llama.cpp has no such weight type"):
        _problem(engine="llama.cpp", precision="fp8")
    p = _problem("1xh100", precision="fp8")
    with pytest.raises(DnnplaceError, match="made for vllm with fp8 weights; llama.cpp loads"):
        export(p, search(p, time_limit=5), "llama.cpp")


@pytest.mark.parametrize("engine", ["hf", "llama.cpp"])
def test_single_process_engines_never_get_a_replica_across_nodes(engine):
    """A device_map (and llama.cpp without RPC) runs in one process: 70B over two one-GPU nodes was planned
    as one replica that no export could write."""
    p = dnnplace.load_serving(M70, gpus="1xh100;1xh100", engine=engine, isl=512, osl=128)
    with pytest.raises(DnnplaceError, match="needs at least 2 x h100 in one node"):
        dnnplace.solve(p, time_limit=10)
    two = ServingConfig((Replica((Stage("h100", 0, (0,), 40), Stage("h100", 1, (0,), 40))),), 1, 4096)
    ev = evaluate(p, two)
    assert not ev.fits and "spans nodes" in ev.why


@pytest.mark.parametrize(("engine", "flag"), [("sglang", "--chunked-prefill-size 1024"), ("llama.cpp", "-ub 1024")])
def test_the_priced_token_budget_reaches_the_engine(engine, flag):
    """SGLang's chunked-prefill size and llama.cpp's -ub default by GPU memory and build: a plan priced at a
    budget the command does not pass is priced for another engine setting."""
    p = _problem("1xh100", engine=engine, precision="bf16")
    plan = search(p, time_limit=5, max_num_batched_tokens=1024)
    assert flag in export(p, plan, engine)


def test_a_plan_file_edited_onto_gpus_its_engine_cannot_run_is_refused(tmp_path):
    out = tmp_path / "plan.json"
    res = run_cli("serve", MODEL, "--gpus", "1xh100", "--engine", "trtllm", "--isl", 512, "--osl", 128, "-o", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    doc["fleet"]["gpus"] = "1xmi300x"
    doc["config"]["replicas"][0]["stages"][0]["gpu"] = "mi300x"
    doc["runner_ups"] = []
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("evaluate", bad)
    assert res.returncode == 2 and "NVIDIA GPUs only" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_llama_cpp_is_started_with_a_cache_the_gpus_hold():
    """-c was context x slots (131,072 x 64 = 8.4M tokens, ~1 TiB of KV for 8B): llama.cpp allocates it at start.
    It is now capped to the plan's KV tokens, with every slot still holding one request."""
    import shlex

    p = _problem("1xh100", engine="llama.cpp")
    plan = search(p, time_limit=5, max_num_seqs=64)
    args = shlex.split(export(p, plan, "llama.cpp").splitlines()[1])
    c, slots = int(args[args.index("-c") + 1]), int(args[args.index("-np") + 1])
    kv = evaluate(p, plan.config).replicas[0].kv_tokens
    assert c <= kv and c // slots >= 512 + 128


@pytest.mark.timing
def test_one_time_limit_bounds_the_search_and_the_baselines_together():
    """--time-limit is the command's: a fleet too large to search exhaustively stops the search at its share
    and the baselines' searches at what is left, so solving and pricing the baselines stay near the limit."""
    import time

    from dnnplace.models.serving.baselines import plan_baselines

    p = _problem("8xh100;8xa100;8xl40s")
    t0 = time.monotonic()
    sol = dnnplace.solve(p, time_limit=3)
    plan_baselines(p, sol.plan)  # priced by solve, as the plan file and the report read them
    assert time.monotonic() - t0 < 3 * 1.5  # the limit plus pricing the chosen plans, not twice the limit


def test_a_fleet_the_default_budget_fills_is_planned_at_a_smaller_one():
    """Llama 3.1 70B int4 on an RTX 4090 + an RTX 3090 under SGLang: at SGLang's default 8,192-token chunk the
    activations leave no KV cache on either card, and the planner said "fits on no deployment"; its own
    evaluator runs a 38+42 pipeline at a 512-token chunk.  The budget is now searched down before a refusal."""
    p = dnnplace.load_serving(ROOT / "examples" / "serving" / "llama3.1-70b.json", gpus="1xrtx-4090+1xrtx-3090",
                              precision="int4", engine="sglang")
    plan = search(p, time_limit=20)
    ev = evaluate(p, plan.config)
    assert plan.config.replicas and ev.fits and plan.config.max_num_batched_tokens < 8192
    assert plan.meta["max_num_batched_tokens_searched"][8192] == 0.0  # the default, tried, fits nothing
    assert plan.bound is None or plan.bound >= ev.capacity_tokens_per_s * (1 - 1e-9)
