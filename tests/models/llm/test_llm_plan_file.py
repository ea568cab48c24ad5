"""The plan-file schema (exporters rely on these exact keys) and the CLI command."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from llm_helpers import EXAMPLES, llama, problem
from typer.testing import CliRunner

from dnnplace.cli.plan_cmd import parse_fix, register
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import LLMPlan

TOP = ["format", "version", "model", "cluster", "job", "config", "prediction", "status", "bound", "gap",
       "exhaustive", "runtime_s"]


def test_schema_keys_and_round_trip() -> None:
    plan = search(problem(llama("70b"), 64, 128), {"tp": 4, "pp": 4, "cp": 2, "vp": 5, "mbs": 1})
    d = plan.to_dict()
    assert list(d) == TOP
    assert d["version"] == 9
    assert list(d["model"]) == ["name", "family", "num_layers", "hidden_size", "ffn_hidden_size",
                                "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                "tied_embeddings", "mlp", "position", "norm", "max_position", "dropout",
                                "architecture", "source", "num_experts", "top_k", "expert_ffn", "shared_experts",
                                "rope_theta", "qkv_bias", "linear_bias", "qk_norm", "sliding_window",
                                "global_every", "rotary_fraction", "parallel_residual"]
    assert list(d["config"]) == ["tp", "pp", "vp", "cp", "dp", "mbs", "num_microbatches", "recompute",
                                 "sequence_parallel", "distributed_optimizer", "layers_per_stage", "ep", "etp",
                                 "dispatcher", "recompute_modules", "a2a_overlap", "zero", "grad_dtype",
                                 "offload_layers", "cuda_graphs", "routing", "first_stage_layers",
                                 "last_stage_layers"]
    assert list(d["prediction"]["time_breakdown"]) == ["compute", "tp_comm_exposed", "cp_comm_exposed",
                                                       "pp_comm_exposed", "dp_comm_exposed", "bubble",
                                                       "ep_comm_exposed", "offload_exposed", "host_exposed"]
    assert list(d["prediction"]["memory_breakdown"]) == ["weights", "gradients", "optimizer", "activations",
                                                         "buffers"]
    c = d["config"]
    assert len(c["layers_per_stage"]) == 20 and c["num_microbatches"] == 64
    assert c["first_stage_layers"] == sum(c["layers_per_stage"][0::4])
    again = LLMPlan.from_dict(json.loads(json.dumps(d))).to_dict()
    assert again == d


def test_parse_fix() -> None:
    assert parse_fix("tp=4, pp=4,recompute=selective,distributed_optimizer=false") == {
        "tp": 4, "pp": 4, "recompute": "selective", "distributed_optimizer": False}


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command so typer keeps "plan" as a subcommand
        pass

    return app


def test_cli_json_output_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "plan.json"
    model = str(EXAMPLES / "llama3.1-8b.json")
    r = runner.invoke(_app(), ["plan", model, "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                               "--fix", "tp=1,pp=1,cp=2,vp=1,mbs=1", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["format"] == "dnnplace.llm-plan"
    r = runner.invoke(_app(), ["plan", model, "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                               "--fix", "tp=x"])
    assert r.exit_code == 2 and "tp must be an integer" in r.output
    r = runner.invoke(_app(), ["plan", model, "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                               "-o", model])
    assert r.exit_code == 2


def test_a_breakdown_that_is_not_an_object_of_numbers_is_refused() -> None:
    """Found by the CLI fuzz test: ``"memory_breakdown": [[]]`` was an internal error, not a refusal."""
    import pytest

    from dnnplace.errors import DnnplaceError

    d = search(problem(llama("8b"), 16, 32), {"tp": 2, "pp": 1, "mbs": 4}).to_dict()
    for key, bad in (("memory_breakdown", [[]]), ("time_breakdown", {"compute": "1"}), ("memory_breakdown", None)):
        doc = json.loads(json.dumps(d))
        doc["prediction"][key] = bad
        with pytest.raises(DnnplaceError, match=key):
            LLMPlan.from_dict(doc)


import pytest  # noqa: E402

from dnnplace.errors import DnnplaceError  # noqa: E402


@pytest.mark.parametrize("text,msg", [
    ("tp=2,tp=4", "tp is given twice"), ("tp=2, tp = 2", "tp is given twice"),
    ("tp=0", "tp 0 is outside"), ("pp=1.5", "pp must be an integer"), ("recompute=maybe", "recompute must be one of"),
    ("distributed_optimizer=maybe", "distributed_optimizer must be true or false"), ("vp=-1", "vp -1 is outside"),
    ("mbs=99999999999999999999", "mbs a 20-digit number is outside"), ("sequence_parallel=true", "not KEY=VALUE"),
    ("tp", "not KEY=VALUE"),
])
def test_fix_refuses_repeated_keys_and_nonsense_values(text: str, msg: str) -> None:
    with pytest.raises(DnnplaceError, match=msg) as info:
        parse_fix(text)
    assert "\n" not in str(info.value)


def test_fix_values_take_the_declared_kinds() -> None:
    pins = parse_fix("tp=4,recompute=full,distributed_optimizer=off,vp=2")
    assert pins == {"tp": 4, "recompute": "full", "distributed_optimizer": False, "vp": 2}
    assert all(type(v) is not str or k == "recompute" for k, v in pins.items())


@pytest.mark.parametrize("args,culprit", [
    (["--fix", "tp=2,tp=4"], "given twice"),
    (["--fix", "tp=3"], "rule tp_heads"),
    (["--fix", "tp=8,pp=8"], "rule world_size"),
    (["--global-batch", "3", "--fix", "dp=2"], "rule batch_divisible"),
    (["--gpus", "1", "--seq-len", "131072"], "no configuration fits"),
])
def test_refusals_name_the_rule_and_stay_short(args: list[str], culprit: str) -> None:
    runner = CliRunner()
    base = {"--gpus": "8", "--seq-len": "8192", "--global-batch": "128"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["plan", str(EXAMPLES / "llama3.1-70b.json"), *[x for kv in base.items() for x in kv]]
    r = runner.invoke(_app(), argv)
    assert r.exit_code == 2 and culprit in r.output, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 210, r.output
    assert not any(len(w) > 12 and w.replace(",", "").replace(".", "").isdigit() for w in lines[0].split())


@pytest.mark.parametrize("flag,value,key", [("--global-batch", str(2**40), "global_batch"),
                                            ("--gpus", str(10**12), "gpus"), ("--seq-len", str(2**30), "seq_len"),
                                            ("--gpus-per-node", "4096", "gpus_per_node")])
def test_cli_input_limits_are_one_line_and_quick(flag: str, value: str, key: str) -> None:
    import time

    base = {"--gpus": "8", "--seq-len": "4096", "--global-batch": "32", flag: value}
    started = time.perf_counter()
    r = CliRunner().invoke(_app(), ["plan", str(EXAMPLES / "llama3.1-8b.json"), *[x for kv in base.items()
                                                                                  for x in kv]])
    assert r.exit_code == 2 and key in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert time.perf_counter() - started < 5
