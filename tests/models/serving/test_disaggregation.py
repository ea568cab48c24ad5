"""Prefill/decode disaggregation beside the plan (``serve --disaggregate``): the splits tried, the decode phase
held against brute force, one deployment's numbers by hand, the plan file and the engines' launches read back."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from pathlib import Path

import pytest
from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.cost import p2p_time
from dnnplace.models.serving.disaggregation import (
    best_disaggregated,
    disaggregate,
    pool_problems,
    splits,
)
from dnnplace.models.serving.evaluation import evaluate, iteration
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.fleet import parse_gpus
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.plan_file import read_serving_plan
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage, Workload

from .test_search_brute import KEEP, _model, brute_force

ROOT = Path(__file__).resolve().parents[3]
M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"
M8 = ROOT / "examples" / "serving" / "llama3.1-8b.json"


def test_splits_by_kind_then_by_node_then_by_gpu_count():
    by_kind = splits(parse_gpus("2xa100+2xl40s;4xh100"))
    assert len(by_kind) == 6  # 2^3 - 2 non-empty proper subsets of three kinds
    by_node = splits(parse_gpus("4xh100;4xh100;4xh100"))
    assert len(by_node) == 6 and all(pre and rest for _, pre, rest in by_node)
    by_count = splits(parse_gpus("8xh100"))
    assert [len(pre) for _, pre, _ in by_count] == [1, 2, 4]
    assert splits(parse_gpus("1xh100")) == []
    for _, pre, rest in by_kind + by_node + by_count:
        assert not pre & rest


def test_the_decode_phase_computes_no_prompt_token():
    p = problem(M8, gpus="1xh100", isl=2048, osl=128)
    _, dec = pool_problems(p)
    it = iteration(dec, 64.0, 8192)
    assert it.prefill == 0.0 and it.decode == 64.0 and it.kv_len == p.workload.held
    assert iteration(p, 64.0, 8192).prefill > 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("1xl4+1xa10g", "2xl4", "1xa100-40g+2xt4", "1xl4;1xl4")), st.sampled_from((4096, 8192)),
       st.integers(2, 4))
def test_the_decode_pool_search_equals_brute_force(spec, hidden, layers):
    """The search's DP and bound hold for a decode instance as for an aggregated one."""
    p = problem(_model(hidden, layers), gpus=spec, isl=512, osl=128, max_model_len=4096)
    _, dec = pool_problems(p)
    KEEP.append(dec)
    plan = search(dec, time_limit=60, max_num_seqs=64)
    want = brute_force(dec, 64, plan.config.max_num_batched_tokens)
    if want <= 0:
        assert not plan.config.replicas
        return
    got = evaluate(dec, plan.config).output_tokens_per_s
    assert plan.bound is not None and plan.bound >= want * (1 - 1e-9)
    if plan.status == "optimal":
        assert math.isclose(got, want, rel_tol=1e-9)


def test_one_deployment_by_hand():
    p = problem(M70, gpus="2xa100-80g+2xl40s", precision="fp8", isl=1024, osl=256)
    pre = ServingConfig((Replica((Stage("l40s", 0, (2, 3), 80),)),), 256, 8192)
    dec = ServingConfig((Replica((Stage("a100-80g", 0, (0, 1), 80),)),), 256, 8192)
    d = disaggregate(p, pre, dec)
    pp, dp = pool_problems(p)
    pe, de = evaluate(pp, pre), evaluate(dp, dec)
    assert d.prefill_rps == pytest.approx(pe.output_tokens_per_s)  # one token per prompt: tokens/s = requests/s
    assert d.decode_rps == pytest.approx(de.output_tokens_per_s / 256)
    nbytes = 1024 * float(p.model.kv_per_gpu(1).sum())  # every layer's K and V of the prompt
    assert d.link == "pcie"  # two GPU kinds in one node
    sent = float(p2p_time("l40s", nbytes, "pcie").seconds[0])
    assert d.transfer_ms == pytest.approx(sent * 1e3) and d.transfer_rps == pytest.approx(1 / sent)
    assert d.requests_per_s == pytest.approx(min(d.prefill_rps, d.decode_rps, d.transfer_rps))
    assert d.output_tokens_per_s == pytest.approx(256 * d.requests_per_s)
    assert d.ttft_ms == pytest.approx(pe.ttft_ms + sent * 1e3 + de.tpot_ms)


def test_the_best_split_stays_within_its_bound():
    p = problem(M70, gpus="2xa100-80g+2xl40s", precision="fp8")
    d = best_disaggregated(p, time_limit=30)
    assert d is not None and len(d.splits) == 2 and d.bound is not None
    assert d.output_tokens_per_s <= d.bound * (1 + 1e-9)
    assert d.output_tokens_per_s == pytest.approx(max(r["output_tokens_per_s"] for r in d.splits), rel=1e-6)
    if d.status == "optimal":
        assert d.output_tokens_per_s == pytest.approx(d.bound, rel=1e-9)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pd") / "plan.json"
    res = run_cli("serve", M70, "--gpus", "2xa100-80g+2xl40s", "--precision", "fp8", "--disaggregate", "-o", out)
    assert res.returncode == 0, res.stderr
    assert "disaggregated (what-if" in " ".join(res.stdout.split())
    return out


def test_the_plan_file_carries_it_and_reads_it_back_priced_again(planned):
    doc = json.loads(planned.read_text())
    d = doc["disaggregated"]
    assert d["limited_by"] in ("prefill pool", "decode pool", "KV transfers")
    assert d["beyond_band"] == (abs(d["gain_over_plan"] - 1) > max(d["error_band"], doc["error_band"]))
    prob, plan = read_serving_plan(doc, str(planned))
    again = plan.meta["disaggregated"]
    assert again.output_tokens_per_s == pytest.approx(d["output_tokens_per_s"], rel=1e-6)
    assert again.status == d["status"] and again.split == d["split"]


@pytest.mark.parametrize("mangle, culprit", [
    (lambda d: d.update(status="best"), "status must be optimal, feasible or infeasible"),
    (lambda d: d["decode"]["replicas"][0]["stages"][0].update(gpus=d["prefill"]["replicas"][0]["stages"][0]["gpus"],
                                                              gpu=d["prefill"]["replicas"][0]["stages"][0]["gpu"]),
     "in both the prefill and the decode pool"),
    (lambda d: d.update(splits=[1]), "splits: each must be an object"),
    (lambda d: d.pop("prefill"), "'prefill' is missing"),
])
def test_a_mangled_section_is_refused_in_one_line(planned, tmp_path, mangle, culprit):
    doc = json.loads(planned.read_text())
    mangle(doc["disaggregated"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run_cli("export", bad, "--to", "vllm", "--disaggregated")
    assert res.returncode == 2 and culprit in res.stderr and len(res.stderr.strip().splitlines()) == 1


def _commands(text: str) -> list[tuple[str, dict[str, str], list[str]]]:
    out, head = [], ""
    for line in text.splitlines():
        if line.startswith("#"):
            head = line
            continue
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words if "=" in w and w.split("=")[0].isupper())
        out.append((head, env, [w for w in words if not ("=" in w and w.split("=")[0].isupper())]))
    return out


def test_the_vllm_launch_reads_back(planned):
    prob, plan = read_serving_plan(json.loads(planned.read_text()), str(planned))
    d = plan.meta["disaggregated"]
    cmds = _commands(export(prob, plan, "vllm", disaggregate=True))
    workers, (_, _, proxy) = cmds[:-1], cmds[-1]
    assert len(workers) == len(d.prefill.replicas) + len(d.decode.replicas)
    ports, sides, gpus, lens = [], set(), set(), set()
    for head, env, args in workers:
        role = "kv_producer" if head.startswith("# prefill") else "kv_consumer"
        assert json.loads(args[args.index("--kv-transfer-config") + 1]) == {"kv_connector": "NixlConnector",
                                                                            "kv_role": role}
        ports.append(args[args.index("--port") + 1])
        sides.add(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        devs = set(env["CUDA_VISIBLE_DEVICES"].split(","))
        assert not devs & gpus  # one node here: no GPU in two instances
        gpus |= devs
        lens.add(args[args.index("--max-model-len") + 1])
    assert len(sides) == len(workers) and len(lens) == 1  # one context for both pools
    pre_ports = proxy[proxy.index("--prefiller-ports") + 1:proxy.index("--decoder-hosts")]
    dec_ports = proxy[proxy.index("--decoder-ports") + 1:]
    assert pre_ports + dec_ports == ports


def test_sglang_launch_and_its_router(tmp_path):
    out = tmp_path / "plan.json"
    res = run_cli("serve", M70, "--gpus", "2xa100-80g+2xl40s", "--precision", "fp8", "--engine", "sglang",
                  "--disaggregate", "-o", out)
    assert res.returncode == 0, res.stderr
    cmds = _commands(run_cli("export", out, "--to", "sglang", "--disaggregated").stdout)
    modes = [args[args.index("--disaggregation-mode") + 1] for _, _, args in cmds[:-1]]
    assert modes[0] == "prefill" and modes[-1] == "decode"
    router = cmds[-1][2]
    assert "--pd-disaggregation" in router and router.count("--prefill") == modes.count("prefill")
    res = run_cli("export", out, "--to", "vllm", "--disaggregated")
    assert res.returncode == 2 and "priced for sglang" in res.stderr


def test_refusals_are_one_line(tmp_path):
    res = run_cli("serve", M8, "--gpus", "1xh100+1xl40s", "--engine", "trtllm", "--disaggregate")
    assert res.returncode == 2 and "written for vllm and sglang" in res.stderr
    out = tmp_path / "plan.json"
    assert run_cli("serve", M8, "--gpus", "1xh100", "-o", out).returncode == 0
    res = run_cli("export", out, "--to", "vllm", "--disaggregated")
    assert res.returncode == 2 and "serve --disaggregate" in res.stderr
    res = run_cli("serve", M8, "--gpus", "1xh100", "--disaggregate", "-o", out)
    assert res.returncode == 0 and "cannot be split" in " ".join(res.stdout.split())
    res = run_cli("export", out, "--to", "vllm", "--disaggregated")
    assert res.returncode == 2 and "cannot be split" in res.stderr


def test_the_pools_workloads(tmp_path):
    p = problem(M8, gpus="1xh100", isl=300, osl=40, rate=2.0, ttft_ms=100.0)
    pre, dec = pool_problems(p)
    assert pre.workload == Workload(300, 1) and dec.workload == Workload(300, 40, phase="decode")
    assert dataclasses.replace(dec.workload, phase="both") == Workload(300, 40)


def test_the_report_shows_the_what_if(planned, tmp_path):
    out = tmp_path / "r.html"
    res = run_cli("report", planned, "-o", out)
    assert res.returncode == 0, res.stderr
    page = out.read_text()
    assert "disaggregated (what-if)" in page and "limited by the" in page


def test_a_transfer_that_cannot_be_priced_is_said_not_taken():
    """Two inference cards on two nodes: no datasheet network, so the KV transfer has no price -- the split is
    reported as such, never as a deployment serving 0 tokens/s."""
    p = problem(M8, gpus="1xl40s;1xl40s")
    with pytest.raises(DnnplaceError, match="no figure for l40s"):
        best_disaggregated(p, time_limit=30)
    res = run_cli("serve", M8, "--gpus", "1xl40s;1xl40s", "--disaggregate")
    assert res.returncode == 0 and "no figure for l40s" in " ".join(res.stdout.split())
