"""The one plan codec: every field the evaluator reads survives the file, and hostile files are one line."""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llm_helpers import EXAMPLES, problem

from dnnplace.core.limits import LLM_NAME_CHARS, LLM_SOURCE_CHARS
from dnnplace.errors import DnnplaceError, InputError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.plan_file import validate_plan
from dnnplace.models.llm.rules import PRICED_FAMILIES
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.spec import LLMPlan, TransformerArch
from dnnplace.utils.text import clip


@st.composite
def archs(draw: st.DrawFn) -> TransformerArch:
    """Accepted dense architectures, with every field the cost or the exporters read varied."""
    heads = draw(st.sampled_from([4, 8, 12]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, heads) if heads % k == 0]))
    head_dim = draw(st.sampled_from([32, 48, 64, 80, 128]))  # often not hidden / heads (Qwen3, Gemma)
    hidden = draw(st.sampled_from([256, 384, 512, 768]))
    position = draw(st.sampled_from(["rope", "learned"]))
    window = draw(st.sampled_from([0, 0, 128, 512]))
    return TransformerArch(
        name=draw(st.sampled_from(["m", "a b", "x\ny", "\x1b[31mred", "é" * 300, " ", ""])),
        family=draw(st.sampled_from(PRICED_FAMILIES)), num_layers=draw(st.integers(1, 6)), hidden=hidden,
        ffn_hidden=draw(st.sampled_from([512, 1024, 1536, 1000])), heads=heads, kv_heads=kv, head_dim=head_dim,
        vocab=draw(st.sampled_from([1000, 32000])), tied_embeddings=draw(st.booleans()),
        mlp=draw(st.sampled_from(["swiglu", "geglu", "gelu", "relu2"])), position=position,
        norm=draw(st.sampled_from(["rms", "layer"])), max_position=draw(st.sampled_from([2048, 4096, 131072])),
        dropout=draw(st.booleans()), architecture=draw(st.sampled_from(["", "LlamaForCausalLM"])),
        source=draw(st.sampled_from(["", "c.json", "/deep/" * 60 + "config.json"])),
        rope_theta=draw(st.sampled_from([10_000.0, 500_000.0, 1e6])), qkv_bias=draw(st.booleans()),
        linear_bias=draw(st.booleans()), qk_norm=draw(st.booleans()), sliding_window=window,
        global_every=draw(st.sampled_from([0, 2])) if window else 0)


def _same_prediction(a: Any, b: Any) -> None:
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory_per_gpu_bytes == pytest.approx(b.memory_per_gpu_bytes, rel=1e-12)
    assert a.fits == b.fits and a.num_microbatches == b.num_microbatches
    for k, v in a.memory_breakdown.items():
        assert b.memory_breakdown[k] == pytest.approx(v, rel=1e-12, abs=1e-9)
    for k, v in a.time_breakdown.items():
        assert b.time_breakdown[k] == pytest.approx(v, rel=1e-12, abs=1e-15)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=archs(), gpus=st.sampled_from([1, 2, 4, 8]), gbs=st.sampled_from([4, 8, 16]),
       seq=st.sampled_from([256, 1024, 2048]), precision=st.sampled_from(["bf16", "fp8"]))
def test_plan_file_round_trip_gives_the_same_prediction(a: TransformerArch, gpus: int, gbs: int, seq: int,
                                                        precision: str) -> None:
    """For random accepted problems: solve -> to_dict -> JSON -> from_dict -> evaluate is the same
    prediction, memory and knobs, and the same architecture (names made printable)."""
    pr = problem(a, gpus, gbs, seq=seq, gpn=4)
    pr = replace(pr, job=replace(pr.job, precision=precision))
    try:
        plan = search(pr)
    except DnnplaceError:
        event("refused")
        return  # refused (no configuration, nothing fits, learned positions): nothing written
    event("planned")
    back = LLMPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert back.config == plan.config and back.problem.job == pr.job and back.problem.cluster == pr.cluster
    got, want = asdict(back.problem.arch), asdict(a)
    for k in ("name", "source", "architecture"):  # printable, cut to what the reader takes
        limit = LLM_SOURCE_CHARS if k == "source" else LLM_NAME_CHARS
        written = clip(want.pop(k), limit)
        assert got.pop(k) == ("unnamed" if k == "name" and not written.strip() else written)
    assert got == want
    _same_prediction(plan.estimate, evaluate(back.problem, back.config))
    _same_prediction(plan.estimate, back.estimate)
    assert (back.status, back.bound, back.gap) == (plan.status, plan.bound, plan.gap)
    assert back.to_dict() == plan.to_dict()


def test_head_dim_survives_the_file() -> None:
    """Qwen3-like: head_dim 128 with hidden 5120 / 64 heads = 80; the file used to rebuild 80."""
    a = TransformerArch("q", "qwen3", 4, 5120, 25600, 64, 8, 128, 151936, qk_norm=True, rope_theta=1e6)
    pr = problem(a, 8, 16, seq=4096)
    plan = search(pr, {"tp": 8, "pp": 1, "cp": 1, "mbs": 1})
    back = LLMPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert back.problem.arch.head_dim == 128 and back.problem.arch == replace(a, source="")
    assert evaluate(back.problem, back.config).step_time_s == pytest.approx(plan.estimate.step_time_s, rel=1e-12)


def _doc() -> dict:
    pr = problem(TransformerArch("m", "llama", 8, 1024, 4096, 16, 8, 64, 32000), 8, 32, seq=1024)
    return search(pr, {"tp": 2, "pp": 2, "vp": 2, "cp": 1, "mbs": 1, "recompute": "none"}).to_dict()


def test_version_1_files_read_with_the_old_defaults() -> None:
    doc = _doc()
    v1 = copy.deepcopy(doc)
    v1["version"] = 1
    for k in ("head_dim", "max_position", "dropout", "num_experts", "top_k", "expert_ffn", "shared_experts",
              "rope_theta", "qkv_bias", "linear_bias", "qk_norm", "sliding_window", "global_every"):
        del v1["model"][k]
    a = LLMPlan.from_dict(v1).problem.arch
    assert a.head_dim == 1024 // 16 and a.max_position == 4096 and not a.qkv_bias and a.rope_theta == 10_000.0
    assert validate_plan(v1)["model"]["head_dim"] == 64  # readers see every field
    del doc["model"]["head_dim"]  # a version-2 file must carry it
    with pytest.raises(InputError, match=r"model\.head_dim: missing"):
        LLMPlan.from_dict(doc)


@pytest.mark.parametrize("claims,msg", [
    ({"status": "optimal", "gap": 0.5}, "gap"),  # "optimal ... gap 50 %"
    ({"status": "fixed", "gap": 0.2}, "gap"),
    ({"gap": 1.5, "status": "time_limit", "exhaustive": False}, "gap"),
    ({"gap": -0.1, "status": "time_limit", "exhaustive": False}, "gap"),
    ({"bound": 1e9}, "bound"),
    ({"bound": -1.0}, "bound"),
    ({"status": "time_limit", "exhaustive": True}, "exhaustive"),
    ({"status": "proven"}, "status"),
    ({"status": "time_limit", "exhaustive": False, "gap": 0.3}, "gap"),  # not (value - bound) / value
    ({"runtime_s": float("inf")}, "runtime_s"),
])
def test_a_files_claims_are_validated(claims: dict, msg: str) -> None:
    doc = {**_doc(), **claims}
    with pytest.raises(InputError, match=msg) as info:
        LLMPlan.from_dict(doc)
    assert "\n" not in str(info.value)


def test_report_and_evaluate_refuse_unchecked_claims(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**_doc(), "status": "optimal", "gap": 0.5}))
    for args in (["report", path, "-o", tmp_path / "r.html"], ["evaluate", path], ["export", path, "--to",
                                                                                     "megatron"]):
        res = run_cli(*args)
        assert res.returncode == 2 and "gap" in res.stderr and len(res.stderr.strip().splitlines()) == 1, args
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("edit,msg", [
    ({"model": {"family": "mixtral"}}, "model.family"),
    ({"model": {"family": "Llama; rm"}}, "model.family"),
    ({"model": {"num_experts": 8}}, "rule dense"),
    ({"model": {"num_layers": 2**40}}, "model.num_layers"),
    ({"model": {"num_layers": 10**6}}, "model.num_layers"),
    ({"config": {"layers_per_stage": [2**40, 1, 1, 1]}}, r"layers_per_stage\[0\]"),
    ({"config": {"layers_per_stage": [1] * 10**5}}, "layers_per_stage"),
    ({"config": {"tp": 2**70}}, "config.tp"),
    ({"cluster": {"gpus": 10**12}}, "cluster.gpus"),
    ({"job": {"global_batch": 2**40}}, "job.global_batch"),
    ({"model": {"hidden_size": 1e200}}, "model.hidden_size"),
    ({"model": {"head_dim": 0}}, "model.head_dim"),
    ({"model": {"rope_theta": float("nan")}}, "model.rope_theta"),
    ({"model": {"sliding_window": -1}}, "model.sliding_window"),
    ({"model": {"qk_norm": 1}}, "model.qk_norm"),
    ({"cluster": {"device": "tpu9"}}, "unknown device"),
    ({"prediction": {"step_time_s": float("nan")}}, "prediction.step_time_s"),
    ({"prediction": {"overflow": "everything"}}, "prediction.overflow"),
])
def test_hostile_plan_fields_are_one_line_and_quick(edit: dict, msg: str) -> None:
    doc = _doc()
    for part, values in edit.items():
        doc[part].update(values)
    started = time.perf_counter()
    with pytest.raises(InputError, match=msg) as info:
        LLMPlan.from_dict(doc)
    assert time.perf_counter() - started < 3.0
    text = str(info.value)
    assert "\n" not in text and len(text) < 300


def test_huge_plans_are_refused_by_every_command(tmp_path: Path) -> None:
    """A plan with 2**40 layers passed the old validator and crashed export and evaluate (MemoryError)."""
    doc = _doc()
    doc["model"]["num_layers"] = 2**40
    doc["config"]["layers_per_stage"] = [2**38] * 4
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    for args in (["evaluate", path], ["simulate", path], ["report", path, "-o", tmp_path / "r.html"],
                 ["export", path, "--to", "megatron"], ["export", path, "--to", "torchtitan"]):
        started = time.perf_counter()
        res = run_cli(*args)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
        assert "num_layers" in res.stderr and time.perf_counter() - started < 5


def _config(tmp_path: Path, name: str, **change: Any) -> Path:
    cfg = json.loads((EXAMPLES / "llama3.1-8b.json").read_text())
    cfg.pop("architectures")  # what a transformers config factory's to_dict() gives
    cfg.update(change)
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("where", ["plain/config.json", "deep/" + "d" * 60 + "/" + "e" * 60 + "/" + "f" * 60
                                   + "/config.json", "odd/new\nline\x1b[2J.json"])
def test_plan_files_written_are_read_back_by_every_command(tmp_path: Path, where: str) -> None:
    """No "architectures", a config path over 200 characters, a name with a newline or an escape."""
    model = _config(tmp_path, where)
    out = tmp_path / "plan.json"
    res = run_cli("plan", model, "--gpus", "8", "--seq-len", "4096", "--global-batch", "32",
                  "--fix", "tp=2,pp=1,cp=1,mbs=1,zero=3", "-o", out)  # zero 3: what torchtitan runs
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["model"]["architecture"] == "" and "\n" not in doc["model"]["name"]
    for args in (["evaluate", out, "--json"], ["simulate", out], ["report", out, "-o", tmp_path / "r.html"],
                 ["export", out, "--to", "megatron"], ["export", out, "--to", "torchtitan"],
                 ["export", out, "--to", "deepspeed"]):
        res = run_cli(*args)
        assert res.returncode == 0, (args, res.stderr)
    assert json.loads(run_cli("evaluate", out, "--json").stdout)["step_time_s"] == pytest.approx(
        doc["prediction"]["step_time_s"], rel=1e-12)


# ------------------------------------------------------------------ fuzz

GARBAGE = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([2**40, 10**30, -1, 0, 1])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.sampled_from(["none", "optimal", "llama", "h100", "\n", "\x1b[2J"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


def _paths(doc: dict) -> list[tuple]:
    out: list[tuple] = []
    for k, v in doc.items():
        out.append((k,))
        if isinstance(v, dict):
            out += [(k, k2) for k2 in v]
    return out


@st.composite
def hostile_docs(draw: st.DrawFn, base: dict) -> Any:
    doc = copy.deepcopy(base)
    if draw(st.integers(0, 9)) == 0:
        return draw(GARBAGE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc) or [("model",)]))
        obj: Any = doc
        for k in path[:-1]:
            obj = obj.get(k) if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or path[-1] not in obj:
            continue
        if draw(st.booleans()):
            del obj[path[-1]]
        else:
            obj[path[-1]] = draw(GARBAGE)
    return doc


BASE = _doc()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=hostile_docs(BASE))
def test_fuzz_the_plan_reader(doc: Any) -> None:
    """Malformed plan documents: refused with one short InputError line, or read into a valid plan."""
    try:
        plan = LLMPlan.from_dict(doc)
    except InputError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) < 400, text
        return
    assert plan.config.tp * plan.config.pp * plan.config.cp * plan.config.dp == plan.problem.cluster.gpus
    assert math.isfinite(plan.bound) and 0 <= plan.gap <= 1


@pytest.mark.parametrize("command", [["evaluate", "{p}", "--json"], ["report", "{p}", "-o", "{o}"],
                                     ["export", "{p}", "--to", "megatron"]])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(doc=hostile_docs(BASE))
def test_fuzz_plan_files_through_the_cli(tmp_path: Path, command: list[str], doc: Any) -> None:
    path, out = tmp_path / "p.json", tmp_path / "o.html"
    out.unlink(missing_ok=True)
    path.write_text(json.dumps(doc))
    res = run_cli(*(a.format(p=path, o=out) for a in command))
    assert res.returncode in (0, 2), res
    assert "Traceback" not in res.stdout + res.stderr and "internal error" not in res.stderr
    if res.returncode == 2:
        assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()


def test_every_field_has_one_declaration() -> None:
    """Adding an architecture field or a knob without its check, its plan key or its pin fails here."""
    import dataclasses

    from dnnplace.models.llm.config import FIELDS, pin_fields
    from dnnplace.models.llm.rules import ARCH_CHECKS
    from dnnplace.models.llm.solvers.method import LLMSearch

    arch_fields = [f.name for f in dataclasses.fields(TransformerArch)]
    assert sorted(name for name, _, _ in ARCH_CHECKS) == sorted(arch_fields)
    doc = _doc()
    assert len(doc["model"]) == len(arch_fields)
    assert set(FIELDS) <= set(doc["config"]) and set(doc["config"]) - set(FIELDS) == {
        "num_microbatches", "first_stage_layers", "last_stage_layers"}
    assert LLMSearch.param_names() == (*(f.name for f in pin_fields()), "runner_ups")
    assert all(f.metadata["doc"] for f in FIELDS.values())


def test_a_family_the_cost_model_does_not_price_is_refused() -> None:
    from dnnplace.models.llm.evaluation.rules import check_problem

    pr = problem(TransformerArch("x", "mixtral", 4, 512, 1024, 8, 8, 64, 1000), 8, 16, seq=1024)
    with pytest.raises(DnnplaceError, match="rule priced_family"):
        check_problem(pr)
    with pytest.raises(DnnplaceError, match="rule dense"):
        check_problem(replace(pr, arch=replace(pr.arch, num_experts=8)))
