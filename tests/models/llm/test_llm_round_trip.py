"""``plan -o`` -> ``evaluate`` / ``simulate`` / ``export`` agree with the plan (issue 33, done-when), and the
report labels a plan's status, bound and gap as claims (item 12)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llm_helpers import EXAMPLES

from dnnplace.models.llm.report import claimed_status


def _config(folder: Path, layers: int, heads: int, kv: int, hidden: int) -> Path:
    cfg = json.loads((EXAMPLES / "llama3.1-8b.json").read_text())
    cfg.update(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, hidden_size=hidden,
               intermediate_size=4 * hidden, head_dim=hidden // heads, vocab_size=32000)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def megatron_knobs(text: str, num_layers: int) -> dict[str, Any]:
    """The plan's knobs as Megatron would build them from the exported arguments (read independently of
    the exporter: its split options interpreted as ``megatron/training/arguments.py`` documents them)."""
    body = text[text.index("DNNPLACE_MEGATRON_ARGS=(") + len("DNNPLACE_MEGATRON_ARGS=("):text.rindex(")")]
    flags: dict[str, str | None] = {}
    for line in body.strip().splitlines():
        parts = line.split(maxsplit=1)
        flags[parts[0]] = parts[1].strip("'\"") if len(parts) > 1 else None
    pp = int(flags.get("--pipeline-model-parallel-size") or 1)
    vp = int(flags.get("--num-virtual-stages-per-pipeline-rank") or 1)
    if "--pipeline-model-parallel-layout" in flags:
        stages = str(flags["--pipeline-model-parallel-layout"]).split("|")
        lps = [s.count("t") for s in stages]
        vp = len(stages) // pp
    else:
        first = flags.get("--decoder-first-pipeline-num-layers")
        last = flags.get("--decoder-last-pipeline-num-layers")
        ends = {0: int(first)} if first is not None else {}
        ends.update({pp - 1: int(last)} if last is not None else {})
        middle = [r for r in range(pp) if r not in ends]
        rest = num_layers - sum(ends.values())
        per_rank = [ends.get(r, rest // max(1, len(middle))) for r in range(pp)]
        lps = [per_rank[s % pp] // vp for s in range(pp * vp)]
    granularity = flags.get("--recompute-granularity")
    recompute = "selective" if "--recompute-activations" in flags else (granularity or "none")
    return {"tp": int(flags["--tensor-model-parallel-size"] or 0), "pp": pp, "vp": vp,
            "cp": int(flags.get("--context-parallel-size") or 1), "mbs": int(flags["--micro-batch-size"] or 0),
            "recompute": recompute, "layers_per_stage": lps,
            "sequence_parallel": "--sequence-parallel" in flags,
            "distributed_optimizer": "--use-distributed-optimizer" in flags}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(layers=st.sampled_from([3, 8, 13, 24]), heads=st.sampled_from([8, 16]), kv=st.sampled_from([2, 8]),
       gpus=st.sampled_from([4, 8, 16]), gbs=st.sampled_from([8, 32, 48]), pp=st.sampled_from([1, 2, 4, None]),
       vp=st.sampled_from([1, 2, None]), recompute=st.sampled_from(["none", "selective", "full", None]))
def test_plan_file_round_trip_through_every_command(tmp_path_factory: pytest.TempPathFactory, layers: int,
                                                    heads: int, kv: int, gpus: int, gbs: int, pp: int | None,
                                                    vp: int | None, recompute: str | None) -> None:
    """For accepted configs: the file's prediction is what evaluate says, the simulated step is the predicted
    step (simulate is the whole step), and the Megatron export builds the plan's knobs and split."""
    folder = tmp_path_factory.mktemp("rt")
    model = _config(folder, layers, heads, kv, 64 * heads)
    pins = ",".join(f"{k}={v}" for k, v in (("pp", pp), ("vp", vp), ("recompute", recompute)) if v is not None)
    out = folder / "plan.json"
    res = run_cli("plan", model, "--gpus", gpus, "--seq-len", 1024, "--global-batch", gbs, "-o", out,
                  *(["--fix", pins] if pins else []))
    if res.returncode == 2:
        event("refused")
        return
    assert res.returncode == 0, res.stderr
    event("planned")
    doc = json.loads(out.read_text())
    want = doc["prediction"]
    ev = run_cli("evaluate", out, "--json")
    assert ev.returncode == 0, ev.stderr
    got = json.loads(ev.stdout)
    assert got["step_time_s"] == pytest.approx(want["step_time_s"], rel=1e-12)
    assert got["memory_per_gpu_bytes"] == pytest.approx(want["memory_per_gpu_bytes"], rel=1e-12)
    assert got["fits"] == want["fits"]
    sim = run_cli("simulate", out, "--json")
    assert sim.returncode == 0, sim.stderr
    simulated = json.loads(sim.stdout)
    assert simulated["predicted_step_time_s"] == pytest.approx(want["step_time_s"], rel=1e-12)
    assert simulated["simulated_step_time_s"] == pytest.approx(want["step_time_s"], rel=1e-9)
    ex = run_cli("export", out, "--to", "megatron")
    assert ex.returncode == 0, ex.stderr
    c = doc["config"]
    assert megatron_knobs(ex.stdout, layers) == {k: c[k] for k in ("tp", "pp", "vp", "cp", "mbs", "recompute",
                                                                   "layers_per_stage", "sequence_parallel",
                                                                   "distributed_optimizer")}


def test_megatron_knobs_reads_an_uneven_layout() -> None:
    text = ("DNNPLACE_MEGATRON_ARGS=(\n --tensor-model-parallel-size 2\n --pipeline-model-parallel-size 2\n"
            " --micro-batch-size 1\n --pipeline-model-parallel-layout Ettt|t|tt|ttL\n)")
    k = megatron_knobs(text, 9)
    assert (k["pp"], k["vp"], k["layers_per_stage"]) == (2, 2, [3, 1, 2, 2])


def test_report_labels_the_files_status_as_a_claim(tmp_path: Path) -> None:
    """Item 12: ``report PLAN.json`` printed "optimal (bound B, gap 0 %)" as if it had proven it."""
    out = tmp_path / "plan.json"
    res = run_cli("plan", EXAMPLES / "llama3.1-8b.json", "--gpus", 8, "--seq-len", 4096, "--global-batch", 32,
                  "--fix", "tp=2,pp=1,cp=1,mbs=1,recompute=none", "-o", out)
    assert res.returncode == 0, res.stderr
    page = tmp_path / "r.html"
    assert run_cli("report", out, "-o", page).returncode == 0
    html = page.read_text()
    assert re.search(r"search status \(claimed\)</t[dh]><t[dh]>(optimal|fixed), as the plan claims", html), html[:2000]
    assert "not re-proven here" in html


def test_a_claimed_bound_above_the_evaluated_step_is_called_false() -> None:
    assert "the claim is false" in claimed_status("optimal", 2.0, 0.0, 1.5)
    text = claimed_status("time_limit", 1.0, 0.5, 1.25)
    assert "gap 50.00 %" in text and "gap against the evaluated step time 20.00 %" in text
