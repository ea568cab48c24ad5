"""``dnnplace serve --lengths FILE``: a request-length distribution instead of one ISL / OSL, read from CSV or
JSON, priced at its means with length-biased KV occupancy, drawn request by request by the simulation, and
carried by the plan file."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.serving import lengths as length_file
from dnnplace.models.serving.evaluation import evaluate, held_tokens
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.plan_file import read_serving_plan
from dnnplace.models.serving.simulator import draw_lengths, simulate
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage, Workload
from dnnplace.utils.files import read_json_file

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "serving" / "llama3.1-8b.json"
LLAMA8B = ROOT / "examples" / "llm" / "llama3.1-8b.json"

CSV = "prompt_tokens,completion_tokens,count\n100,20,3\n300,60,1\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _flat(text: str) -> str:
    """``text`` without white space: the console wraps long lines, and breaks a long path anywhere."""
    return "".join(text.split())


# ---------------------------------------------------------------- reading


def test_csv_and_json_files_give_the_same_workload(tmp_path):
    csv_file = _write(tmp_path, "a.csv", CSV)
    pairs = _write(tmp_path, "b.json", json.dumps([[100, 20]] * 3 + [[300, 60]]))
    objects = _write(tmp_path, "c.json", json.dumps([{"isl": 100, "osl": 20, "count": 3},
                                                     {"input_len": 300, "output_len": 60}]))
    wls = [problem(MODEL, gpus="1xh100", lengths=f).workload for f in (csv_file, pairs, objects)]
    assert wls[0] == wls[1] == wls[2]
    assert wls[0].lengths == ((100, 20, 3.0), (300, 60, 1.0))
    assert wls[0].lengths_source == str(csv_file)


def test_means_and_held_tokens_against_hand_computed_values(tmp_path):
    wl = problem(MODEL, gpus="1xh100", lengths=_write(tmp_path, "a.csv", CSV)).workload
    # means: isl (3*100 + 300) / 4 = 150, osl (3*20 + 60) / 4 = 30
    assert (wl.isl, wl.osl) == (150, 30)
    assert wl.max_len == 360
    # in flight, weighted by count x osl: (3*20*(100+10) + 60*(300+30)) / (60 + 60) = 220
    assert wl.held == pytest.approx(220.0)
    assert wl.held_whole == pytest.approx((3 * 20 * 120 + 60 * 360) / 120)
    # identical requests: the values used without a distribution
    same = Workload(512, 128)
    assert same.held == 512 + 64 and same.held_whole == 640 and same.max_len == 640
    one = Workload(512, 128, lengths=((512, 128, 7.0),))
    assert one.held == same.held and one.held_whole == same.held_whole and one.max_len == same.max_len
    trt = problem(MODEL, gpus="1xh100", engine="trtllm", lengths=tmp_path / "a.csv")
    assert held_tokens(trt) == trt.workload.held_whole


def test_a_mean_rounds_to_at_least_one_token(tmp_path):
    f = _write(tmp_path, "w.csv", "isl,osl,weight\n1,1,1\n3,2,0.1\n")
    wl = problem(MODEL, gpus="1xh100", lengths=f).workload
    assert wl.isl == 1 and wl.osl == 1 and wl.max_len == 5


def test_one_length_in_a_file_plans_as_isl_and_osl_do(tmp_path):
    f = _write(tmp_path, "same.csv", "isl,osl\n512,128\n512,128\n512,128\n")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    res = run_cli("serve", MODEL, "--gpus", "1xa100-80g+1xl40s", "--lengths", f, "-o", a)
    assert res.returncode == 0, res.stderr
    assert _flat(f"lengths: 3 requests from {f}, mean ISL 512 / OSL 128, longest 640 tokens") in _flat(res.stdout)
    assert run_cli("serve", MODEL, "--gpus", "1xa100-80g+1xl40s", "--isl", 512, "--osl", 128, "-o", b).returncode == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    assert da["config"] == db["config"]
    assert da["prediction"]["output_tokens_per_s"] == pytest.approx(db["prediction"]["output_tokens_per_s"],
                                                                    rel=1e-12)
    assert da["workload"]["lengths"] == [[512, 128, 3.0]] and db["workload"]["lengths"] is None


def test_the_longest_request_must_fit_the_kv_cache(tmp_path):
    """The mean request fits an L4's cache; the one long prompt does not: the deployment does not fit."""
    f = _write(tmp_path, "long.csv", "isl,osl,count\n512,128,1000\n100000,100,1\n")
    p = problem(MODEL, gpus="1xl4", lengths=f)
    assert p.workload.isl < 1000 and p.workload.max_len == 100100
    ev = evaluate(p, ServingConfig((Replica((Stage("l4", 0, (0,), 32),)),), 64, 8192))
    assert not ev.fits and "less than the longest request (100100)" in ev.why
    alike = replace(p, workload=Workload(p.workload.isl, p.workload.osl))
    assert evaluate(alike, ServingConfig((Replica((Stage("l4", 0, (0,), 32),)),), 64, 8192)).fits


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("name,text,culprit", [
    ("nohead.csv", "512,128\n", "no prompt-length column"),
    ("noout.csv", "isl,tokens\n512,128\n", "no output-length column"),
    ("twice.csv", "isl,input_len,osl\n1,2,3\n", "prompt-length given twice"),
    ("frac.csv", "isl,osl\n512,12.5\n", "line 2, column 'osl'"),
    ("word.csv", "isl,osl\n512,abc\n", "line 2, column 'osl'"),
    ("zero.csv", "isl,osl\n512,128\n0,128\n", "line 3, column 'isl'"),
    ("neg.csv", "isl,osl,count\n512,128,-1\n", "line 2, column 'count'"),
    ("nan.csv", "isl,osl,weight\n512,128,nan\n", "line 2, column 'weight'"),
    ("zeros.csv", "isl,osl,count\n512,128,0\n64,8,0\n", "every count/weight is 0"),
    ("empty.csv", "", "an empty file"),
    ("header.csv", "isl,osl\n", "no requests"),
    ("short.csv", "isl,osl\n512\n", "line 2: 1 fields"),
    ("long.csv", "isl,osl\n512,128\n4000,200\n", "line 3: isl 4000 + osl 200 = 4200 tokens is longer than the context"),
    ("obj.json", '{"isl": 5}', "must be a list"),
    ("bad.json", "[[512, 128], [512]]", "[1]: a pair"),
    ("badkey.json", '[{"isl": 512, "out": 1}]', "[0]: no output-length key"),
    ("negw.json", "[[512, 128, -2]]", "[0] weight"),
    ("notjson.json", "[[512, 128]", "not valid JSON"),
])
def test_a_bad_lengths_file_is_one_line_exit_2_nothing_written(tmp_path, name, text, culprit):
    f = _write(tmp_path, name, text)
    out = tmp_path / "p.json"
    res = run_cli("serve", MODEL, "--gpus", "1xh100", "--max-model-len", 4096, "--lengths", f, "-o", out)
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0] and name in lines[0], res.stderr
    assert not out.exists()


@pytest.mark.parametrize("extra,culprit", [
    (["--lengths", "missing.csv"], "missing.csv: no such file"),
    (["--lengths", "a.csv", "--isl", "512"], "not both"),
    (["--lengths", "a.csv", "--osl", "256"], "not both"),
    (["--lengths", "."], "is a directory"),
    (["--lengths", "a.csv", "-o", "a.csv"], "the output is the input file"),
])
def test_lengths_arguments_that_cannot_be_used_are_refused(tmp_path, extra, culprit):
    _write(tmp_path, "a.csv", CSV)
    res = run_cli("serve", MODEL, "--gpus", "1xh100", *extra, cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], res.stderr
    assert (tmp_path / "a.csv").read_text() == CSV and sorted(x.name for x in tmp_path.iterdir()) == ["a.csv"]


def test_more_rows_than_the_limit_are_refused(tmp_path, monkeypatch):
    assert length_file.MAX_LENGTH_ROWS == 1_000_000
    monkeypatch.setattr(length_file, "MAX_LENGTH_ROWS", 3)
    f = _write(tmp_path, "big.csv", "isl,osl\n" + "8,8\n" * 4)
    res = run_cli("serve", MODEL, "--gpus", "1xh100", "--lengths", f)
    assert res.returncode == 2 and "big.csv line 5: more than 3 rows" in res.stderr
    with pytest.raises(DnnplaceError, match=r"big.json\[3\]: more than 3 rows"):
        problem(MODEL, gpus="1xh100", lengths=_write(tmp_path, "big.json", json.dumps([[8, 8]] * 4)))
    ok = _write(tmp_path, "ok.csv", "isl,osl\n" + "8,8\n" * 3)
    assert problem(MODEL, gpus="1xh100", lengths=ok).workload.isl == 8


# ---------------------------------------------------------------- simulation


def test_the_simulation_draws_each_length_by_its_weight_and_prices_tpot_per_request(tmp_path):
    f = _write(tmp_path, "two.csv", "isl,osl,count\n64,8,3\n256,40,1\n")
    p = problem(LLAMA8B, gpus="1xh100", lengths=f)
    c = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 64, 8192)
    n = 400
    isl, osl = draw_lengths(p.workload, n, np.random.default_rng(0))
    assert set(zip(isl, osl)) == {(64, 8), (256, 40)}
    assert 70 <= osl.count(40) <= 130  # 100 expected (sd 9)
    s = simulate(p, c, rate=0.5, requests=n, seed=0)
    assert s.completed == n
    # every request stops at its own length: the total says how many drew the long one
    longs = (s.output_tokens - 8 * n) / 32
    assert longs == int(longs) and 70 <= longs <= 130
    # TPOT over each request's own output: a lone request's decode pace, whatever its length (with the mean
    # osl of 16 as the divisor, the 8-token requests' TPOT would be half the 40-token ones')
    t = s.tpot_ms
    assert t["p99"] < 1.25 * t["p50"] and t["mean"] == pytest.approx(t["p50"], rel=0.15)
    assert simulate(p, c, rate=0.5, requests=n, seed=0).to_dict() == s.to_dict()  # deterministic for a seed
    alike = replace(p, workload=Workload(p.workload.isl, p.workload.osl))
    same = simulate(alike, c, rate=0.5, requests=n, seed=0)
    assert same.output_tokens == n * p.workload.osl and same.tpot_ms["p50"] == pytest.approx(t["p50"], rel=0.15)


def test_reserving_engines_admit_each_request_by_its_own_length(tmp_path):
    f = _write(tmp_path, "two.csv", "isl,osl,count\n64,8,3\n256,40,1\n")
    p = problem(LLAMA8B, gpus="1xh100", lengths=f, engine="trtllm")
    c = ServingConfig((Replica((Stage("h100", 0, (0,), 32),)),), 16, 8192)
    s = simulate(p, c, rate=200.0, requests=120, seed=2)
    assert s.completed == 120 and not s.stopped and s.preemptions == 0
    longs = (s.output_tokens - 8 * 120) / 32  # each request made its own osl
    assert longs == int(longs) and 0 < longs < 120


# ---------------------------------------------------------------- plan file


@pytest.fixture(scope="module")
def plan_with_lengths(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lengths")
    f = d / "trace.csv"
    f.write_text("isl,osl,count\n512,128,3\n2048,64,1\n")
    out = d / "plan.json"
    res = run_cli("serve", MODEL, "--gpus", "1xh100", "--lengths", f, "-o", out)
    assert res.returncode == 0, res.stderr
    assert _flat(f"lengths: 4 requests from {f}, mean ISL 896 / OSL 112, longest 2,112 tokens") in _flat(res.stdout)
    return out


def test_a_plan_file_carries_the_distribution_back(plan_with_lengths):
    doc = read_json_file(plan_with_lengths)
    assert doc["workload"]["lengths"] == [[512, 128, 3.0], [2048, 64, 1.0]]
    assert doc["workload"]["isl"] == 896 and doc["workload"]["osl"] == 112
    prob, plan = read_serving_plan(doc, str(plan_with_lengths))
    assert prob.workload.lengths == ((512, 128, 3.0), (2048, 64, 1.0))
    assert prob.workload.lengths_source.endswith("trace.csv")
    assert evaluate(prob, plan.config).output_tokens_per_s == pytest.approx(
        doc["prediction"]["output_tokens_per_s"], rel=1e-9)
    res = run_cli("simulate", plan_with_lengths, "--rate", 2, "--requests", 40, "--json")
    assert res.returncode == 0, res.stderr
    sim = json.loads(res.stdout)
    # 40 requests of 128 or 64 output tokens each: both drawn, so neither 40 x 128 nor 40 x 64
    assert sim["completed"] == 40 and 40 * 64 < sim["output_tokens"] < 40 * 128


def test_a_plan_file_without_lengths_still_reads(tmp_path):
    out = tmp_path / "p.json"
    assert run_cli("serve", MODEL, "--gpus", "1xh100", "--isl", 512, "--osl", 128, "-o", out).returncode == 0
    doc = json.loads(out.read_text())
    del doc["workload"]["lengths"], doc["workload"]["lengths_source"]
    prob, _ = read_serving_plan(doc, "old.json")
    assert prob.workload == Workload(512, 128) and prob.workload.lengths is None


@pytest.mark.parametrize("lengths,culprit", [
    ("abc", "workload.lengths: must be a list"),
    ([[512, "x", 1]], "workload.lengths[0] osl"),
    ([[512, 128, -1]], "workload.lengths[0] weight"),
    ([[512, 128, 0]], "workload.lengths: every count/weight is 0"),
    ([], "workload.lengths: no requests"),
    ([[512, 128, 1], [2048, 64]], "workload.lengths: their means"),
    ([[512, 128, 1.5, 2]], "workload.lengths[0]: a pair"),
    ([[200000, 128, 1]], "workload.lengths[0]: isl 200000"),
])
def test_a_mangled_lengths_field_is_one_line(plan_with_lengths, tmp_path, lengths, culprit):
    doc = json.loads(plan_with_lengths.read_text())
    doc["workload"]["lengths"] = lengths
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for cmd in (("evaluate", bad), ("simulate", bad, "--rate", 1)):
        res = run_cli(*cmd)
        assert res.returncode == 2, res.stdout
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and culprit in lines[0] and "bad.json" in lines[0], res.stderr


def test_the_report_names_the_distribution(plan_with_lengths, tmp_path):
    prob, plan = read_serving_plan(read_json_file(plan_with_lengths), str(plan_with_lengths))
    out = tmp_path / "r.html"
    dnnplace.api.write_report(prob, plan, out)
    assert "2 request lengths, mean prompt 896, output 112 tokens, longest 2112" in out.read_text()


def test_the_bound_holds_the_evaluator_under_a_distribution(tmp_path):
    """The search's bound and plan against brute force, with requests of two lengths (vLLM and TensorRT-LLM's
    reserving capacity rule)."""
    from models.serving.test_search_brute import KEEP, _model, brute_force

    from dnnplace.models.serving.search import search

    f = _write(tmp_path, "mix.csv", "isl,osl,count\n256,64,5\n2048,512,1\n")
    for spec, engine in (("1xa10g+1xl4", "vllm"), ("2xrtx-3060;1xa10g", "trtllm")):
        p = problem(_model(4096, 3), gpus=spec, lengths=f, max_model_len=4096, engine=engine)
        KEEP.append(p)
        plan = search(p, time_limit=60)
        want = brute_force(p, plan.config.max_num_seqs)
        assert want > 0 and plan.bound is not None and plan.gap is not None
        assert plan.bound >= want * (1 - 1e-9), (spec, plan.bound, want)
        got = evaluate(p, plan.config).output_tokens_per_s
        assert got >= want * (1 - plan.gap) * (1 - 1e-9)
        assert math.isfinite(got)
