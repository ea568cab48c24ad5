"""The plan-file schema (exporters rely on these exact keys) and the CLI command."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from llm_helpers import EXAMPLES, llama, problem
from typer.testing import CliRunner

from dnnplace.cli.plan_cmd import parse_fix, register
from dnnplace.model.llm import LLMPlan
from dnnplace.solvers.llm import search

TOP = ["format", "version", "model", "cluster", "job", "config", "prediction", "status", "bound", "gap",
       "exhaustive", "runtime_s"]


def test_schema_keys_and_round_trip() -> None:
    plan = search(problem(llama("70b"), 64, 128), {"tp": 4, "pp": 4, "cp": 2, "vp": 5, "mbs": 1})
    d = plan.to_dict()
    assert list(d) == TOP
    assert d["version"] == 2
    assert list(d["model"]) == ["name", "family", "num_layers", "hidden_size", "ffn_hidden_size",
                                "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                "tied_embeddings", "mlp", "position", "norm", "max_position", "dropout",
                                "architecture", "source", "num_experts", "top_k", "expert_ffn", "shared_experts",
                                "rope_theta", "qkv_bias", "linear_bias", "qk_norm", "sliding_window",
                                "global_every"]
    assert list(d["config"]) == ["tp", "pp", "vp", "cp", "dp", "mbs", "num_microbatches", "recompute",
                                 "sequence_parallel", "distributed_optimizer", "layers_per_stage",
                                 "first_stage_layers", "last_stage_layers"]
    assert list(d["prediction"]["time_breakdown"]) == ["compute", "tp_comm_exposed", "cp_comm_exposed",
                                                       "pp_comm_exposed", "dp_comm_exposed", "bubble"]
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
