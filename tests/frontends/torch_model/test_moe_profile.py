"""Mixture-of-experts models profile at operator level, for inference and training (issue #20).

Tiny one-layer configs of the example families (examples/hf_transformers.py), so the fast lane stays fast;
the six families at the issue's size run in the slow lane.
"""

from __future__ import annotations

import math

import pytest
from conftest import example_module

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import dnnplace  # noqa: E402
from dnnplace.frontends.torch_model.capture import capture  # noqa: E402
from dnnplace.frontends.torch_model.moe import grouped_mm_flops  # noqa: E402
from dnnplace.frontends.torch_model.profile import _flop_counter, build_workload_dict  # noqa: E402
from dnnplace.models.paper import paper_json  # noqa: E402

hf = example_module("hf_transformers")


def _tiny(family: str, experts: str | None = None, layers: int = 1):
    """A one-layer model of the family with 4 experts, top-2 (T = 2 x 64 tokens, hidden 128), and its experts' width."""
    import transformers as tr

    fields: dict = {"num_hidden_layers": layers}
    if experts is not None:
        fields["experts_implementation"] = experts
    if family == "mixtral":
        return hf._decoder(tr.MixtralConfig, tr.MixtralForCausalLM, num_local_experts=4, num_experts_per_tok=2,
                           **fields), 2 * hf.FAMILY_WIDTH  # its experts are intermediate_size wide
    if family == "qwen2_moe":
        return hf._decoder(tr.Qwen2MoeConfig, tr.Qwen2MoeForCausalLM, num_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=hf.FAMILY_WIDTH, shared_expert_intermediate_size=2 * hf.FAMILY_WIDTH,
                           decoder_sparse_step=1, **fields), hf.FAMILY_WIDTH
    raise ValueError(family)


def _profile(built, *, training: bool, device: str = "a100", **kw) -> dict:
    model, args = built
    cap = capture(model, args, quiet=True)
    return build_workload_dict(cap, cap.inputs, training=training, device=device, accelerators=2, cpus=1,
                               repeats=1, **kw)


def _forward(doc: dict) -> list[dict]:
    return [n for n in doc["nodes"] if not n["isBackwardNode"]]


def _expert_mms(doc: dict) -> list[dict]:
    return [n for n in _forward(doc) if "grouped_mm" in n["name"] or n["name"].startswith("bmm")]


@pytest.mark.slow  # profiles and runs real transformers MoE models
@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_moe_profiles_and_trains_with_the_experts_counted(family):
    (built, moe_width) = _tiny(family)
    model = built[0]
    assert model.config._experts_implementation == "grouped_mm"  # transformers' default
    tokens = hf.FAMILY_BATCH * hf.FAMILY_SEQ * 2  # every token goes to its top-2 experts
    d, f = hf.FAMILY_WIDTH, moe_width
    for training in (False, True):
        doc = _profile(built, training=training)
        mms = _expert_mms(doc)
        # gate+up (d -> 2f) and down (f -> d): the T x k routed rows, whatever the routing
        assert sorted(n["flops"] for n in mms) == sorted([2.0 * tokens * d * 2 * f, 2.0 * tokens * f * d])
        assert all(n["fpgaLatency"] > 0 and n["cpuLatency"] > 0 for n in mms)
        # all 4 experts' fp32 weights, held by the experts' nodes (the grouped matmul reads a transposed view)
        held = sum(n["paramBytes"] for n in _forward(doc) if n["module"].endswith("mlp.experts"))
        assert held == 4 * 4 * (2 * f * d + d * f)
        if training:
            by_name = {n["name"]: n for n in doc["nodes"]}
            # the router's integer bookkeeping has no gradient, hence no backward work; the experts do
            routing = [n for n in _forward(doc) if n["module"].endswith("mlp.experts")
                       and n["name"].startswith(("histc", "cumsum", "sort"))]
            assert len(routing) == 3
            assert all(by_name[f"{n['name']}_grad"]["fpgaLatency"] == 0.0 for n in routing)
            assert all(by_name[f"{n['name']}_grad"]["fpgaLatency"] > 0 for n in mms)
        w = paper_json.parse_workload(doc, source=family)
        sol = dnnplace.solve(w, time_limit=60)
        assert sol.status in ("optimal", "bounded", "time_limit", "feasible")
        assert sol.bound is not None and math.isfinite(sol.bound) and sol.bound <= sol.value * (1 + 1e-9)


@pytest.mark.slow  # profiles and runs real transformers MoE models
def test_eager_experts_are_traced_as_the_grouped_implementation():
    """The eager loop over hit experts cannot be exported (data-dependent trip count); the grouped one is the
    same function, so it is traced instead -- and costs what the grouped model costs."""
    (eager, _), (grouped, _) = _tiny("mixtral", "eager"), _tiny("mixtral")
    model, args = eager
    assert model.config._experts_implementation == "eager"
    cap = capture(model, args, quiet=True)
    assert cap.method == "export" and cap.granularity == "op"
    assert any("grouped_mm" in str(n.target) for n in cap.gm.graph.nodes)
    assert model.config._experts_implementation == "eager"  # the user's model is left as it was
    with torch.no_grad():
        assert torch.allclose(cap.gm(*cap.inputs).logits, model(*args).logits, atol=1e-5)
    grouped[0].load_state_dict(model.state_dict())
    assert _profile(eager, training=True)["nodes"] == _profile(grouped, training=True)["nodes"]


@pytest.mark.slow  # profiles and runs real transformers MoE models
def test_batched_experts_count_the_same_work():
    (batched, _), (grouped, _) = _tiny("mixtral", "batched_mm"), _tiny("mixtral")
    b, g = _profile(batched, training=True), _profile(grouped, training=True)
    assert sum(n["flops"] for n in _expert_mms(b)) == sum(n["flops"] for n in _expert_mms(g)) > 0


@pytest.mark.slow  # profiles and runs real transformers MoE models
def test_host_training_times_a_moe_model():
    """--device host --training used to fail: the backward timing made the float histc of expert ids a leaf,
    and cumsum(..., dtype=int32) of it has no gradient ('Autograd not support dtype: Int')."""
    (built, _) = _tiny("mixtral")
    doc = _profile(built, training=True, device="host", link=(0.01, 1e9))
    by_name = {n["name"]: n for n in doc["nodes"]}
    routing = [n for n in _forward(doc) if n["name"].startswith(("histc", "cumsum", "sort"))
               and n["module"].endswith("mlp.experts")]
    assert len(routing) == 3 and all(by_name[f"{n['name']}_grad"]["fpgaLatency"] == 0.0 for n in routing)
    assert all(by_name[f"{n['name']}_grad"]["fpgaLatency"] > 0 for n in _expert_mms(doc))


@pytest.mark.parametrize(("a", "b", "groups"), [
    ((12, 8), (3, 8, 5), "rows"),       # tokens sorted by expert, one weight per expert
    ((3, 4, 8), (3, 8, 5), "batch"),
    ((6, 12), (12, 5), "k"),            # a weight gradient: the offsets split the contraction
])
def test_grouped_mm_flops_are_those_of_the_matmuls_it_groups(a, b, groups):
    sizes = [2, 7, 3] if groups != "k" else [5, 4, 3]
    if groups == "rows":
        mms = [((m, a[1]), (a[1], b[2])) for m in sizes]
    elif groups == "batch":
        mms = [((a[1], a[2]), (a[2], b[2]))] * a[0]
    else:
        mms = [((a[0], k), (k, b[1])) for k in sizes]
    with _flop_counter() as fc:
        for x, y in mms:
            torch.randn(x) @ torch.randn(y)
    assert grouped_mm_flops(a, b, (3,)) == fc.get_total_flops()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixtral_4", "qwen2_moe_4", "qwen3_moe_4", "olmoe_4", "deepseek_v3_4", "jamba_4"])
def test_the_issue_families_profile_and_solve(name, tmp_path):
    built = getattr(hf, name)()
    for training in (False, True):
        doc = _profile(built[:2], training=training)
        mms = _expert_mms(doc)
        assert mms and all(n["flops"] > 0 for n in mms)
        sol = dnnplace.solve(paper_json.parse_workload(doc, source=name), time_limit=120)
        assert sol.bound is not None and math.isfinite(sol.bound)


def test_the_graph_calls_the_grouped_matmul_through_an_importable_function():
    """A stage GraphModule is unpickled in a fresh worker process: naming ``torch.ops.transformers...`` there
    fails (the operator is registered only once transformers is imported), a module function does not."""
    from dnnplace.frontends.torch_model import moe

    (built, _) = _tiny("mixtral")
    cap = capture(*built, quiet=True)
    targets = [n.target for n in cap.gm.graph.nodes if n.op == "call_function"]
    assert targets.count(moe.grouped_mm_fallback) == 2
    assert not any(str(t).startswith("transformers.") for t in targets)


@pytest.mark.slow
def test_moe_stages_unpickle_in_a_process_without_transformers(tmp_path):
    import pickle
    import subprocess
    import sys

    from conftest import ROOT

    from dnnplace.runtime.launch import prepare

    spec = "examples/hf_transformers.py:mixtral_4"
    w = dnnplace.profile(spec, device="a100", accelerators=2, repeats=1)
    _, _, plan = prepare(spec, dnnplace.solve(w).split, w)
    path = tmp_path / "stages.pkl"
    path.write_bytes(pickle.dumps(plan.modules))
    code = ("import pickle, sys; mods = pickle.load(open(sys.argv[1], 'rb'));"
            " print(sum('grouped_mm' in n.name for m in mods for n in m.graph.nodes))")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip().splitlines()[-1]) == 8  # 4 layers x (gate+up, down)


@pytest.mark.slow  # profiles and runs real transformers MoE models
def test_bf16_experts_use_torch_grouped_mm_and_count_the_same():
    """In bf16 transformers exports ``torch.nn.functional.grouped_mm`` (``aten._grouped_mm``), which torch's
    FLOP counter does not know either."""
    (built, _), (fp32, _) = _tiny("mixtral"), _tiny("mixtral")
    model = built[0].to(torch.bfloat16)
    cap = capture(model, built[1], quiet=True)
    assert any(n.target is torch.ops.aten._grouped_mm.default for n in cap.gm.graph.nodes)
    doc = build_workload_dict(cap, cap.inputs, training=True, device="a100", accelerators=2, cpus=1)
    assert sorted(n["flops"] for n in _expert_mms(doc)) == sorted(n["flops"] for n in _expert_mms(
        _profile(fp32, training=True)))
