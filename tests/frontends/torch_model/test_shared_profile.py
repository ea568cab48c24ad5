"""Profiled models with shared weights: every device that uses them holds, and pays for, a copy (issue #20).

The tied LM's head is its embedding; ALBERT's one layer serves all four layers.
Profile, solve with a memory budget on several accelerators, and check each
device's memory and copies against the groups its nodes use.
"""

from __future__ import annotations

import pytest
from conftest import ROOT
from shared_models import twice_module

torch = pytest.importorskip("torch")

import dnnplace  # noqa: E402
from dnnplace.frontends.torch_model.capture import capture  # noqa: E402
from dnnplace.frontends.torch_model.loader import load_factory  # noqa: E402
from dnnplace.frontends.torch_model.profile import build_workload_dict  # noqa: E402
from dnnplace.models.paper.paper_json import parse_workload  # noqa: E402


def _profile(spec: str, training: bool) -> dict:
    loaded = load_factory(spec)
    cap = capture(loaded.model, loaded.args, kwargs=loaded.kwargs or None, quiet=True)
    return build_workload_dict(cap, cap.inputs, training=training, device="a100", accelerators=2, cpus=0,
                               repeats=1)


def _solve_and_check(doc: dict, accelerators: int, fraction: float) -> dnnplace.Solution:
    """Solve with memory ``fraction`` of everything on one device; check every device's copies and bytes."""
    w0 = parse_workload(doc)
    everything = float(w0.size.sum() + w0.shared.size.sum())
    w = w0.with_budget(accelerators=accelerators, cpus=0, memory=fraction * everything)
    sol = dnnplace.solve(w, "dp")
    ev = sol.evaluation
    assert ev.feasible, ev.violations
    sh = w.shared
    for d in ev.devices:
        on = {w.index_of[v] for v in d.nodes}
        using = [g for g in range(sh.count) if on & set(sh.members(g).tolist())]
        assert d.shared == tuple(sh.names[g] for g in using)
        own = float(w.size[sorted(on)].sum()) if on else 0.0
        assert d.memory == pytest.approx(own + float(sh.size[using].sum()))
        assert d.memory <= w.memory * (1 + 1e-12)
    return sol


def test_profile_keeps_total_bytes_and_moves_shared_ones_into_groups():
    doc = _profile(str(ROOT / "examples/tied_lm.py:build"), training=False)
    (group,) = doc["sharedParameters"]
    assert group["name"] == "head.weight" and group["size"] == 256 * 64 * 4
    first, last = group["nodes"][0], group["nodes"][-1]
    node = {n["id"]: n for n in doc["nodes"]}
    assert node[first]["fxNodes"] == ["embedding"] and node[last]["fxNodes"][0].startswith("linear")
    assert node[first]["size"] == 0.0  # the embedding's only parameter is the tied one


def test_tied_lm_split_holds_the_tied_weight_on_both_ends():
    doc = _profile(str(ROOT / "examples/tied_lm.py:build"), training=True)
    sol = _solve_and_check(doc, accelerators=2, fraction=0.7)
    holders = {c["name"]: c["devices"] for c in sol.evaluation.shared_copies()}
    assert holders == {"head.weight": ["acc0", "acc1"]}
    from dnnplace.models.paper.paper_json import split_to_dict

    out = split_to_dict(sol.split, sol.evaluation)
    assert [f.get("sharedParameters") for f in out["fpgas"]] == [["head.weight"], ["head.weight"]]


@pytest.mark.slow
def test_albert_split_charges_the_shared_layer_to_every_stage():
    doc = _profile(str(ROOT / "examples/hf_transformers.py:albert_4"), training=True)
    groups = doc["sharedParameters"]
    assert len(groups) >= 4 and all(len(g["nodes"]) == 4 for g in groups)  # one reader per layer
    sol = _solve_and_check(doc, accelerators=4, fraction=0.45)
    ev = sol.evaluation
    used = [d for d in ev.devices if d.nodes]
    assert len(used) >= 3
    w = parse_workload(doc)
    layer_bytes = float(w.shared.size.sum())
    # every stage running a layer's weights holds them: at least two stages pay (nearly) the whole layer
    holding = [d for d in used if d.shared]
    assert len(holding) >= 2
    assert sum(1 for d in holding if d.memory >= 0.5 * layer_bytes) >= 2


_Twice = twice_module().Twice  # a block called at two depths (ALBERT-style) and a tied embedding / head


@pytest.mark.parametrize("granularity", ["op", "module"])
def test_a_module_called_twice_and_a_tied_weight_are_groups(granularity):
    model, args = _Twice().eval(), (torch.randint(0, 32, (4, 8)),)
    cap = capture(model, args, granularity=granularity, quiet=True)
    doc = build_workload_dict(cap, cap.inputs, training=False, device="a100", accelerators=2, cpus=0, repeats=1)
    groups = {g["name"]: g for g in doc["sharedParameters"]}
    assert groups["head.weight"]["size"] == 32 * 16 * 4 and groups["block"]["size"] == (16 * 16 + 16) * 4
    assert all(len(g["nodes"]) == 2 for g in groups.values())


def test_module_calls_of_a_symbolic_trace_share_by_identity():
    from dnnplace.frontends.torch_model.capture import Captured
    from dnnplace.frontends.torch_model.shared import parameter_use

    gm = torch.fx.symbolic_trace(_Twice())
    calls = [[n] for n in gm.graph.nodes if n.op == "call_module"]  # embed, block, mid, block, head
    use = parameter_use(Captured(gm, calls, {}, [], "module", "symbolic_trace"), range(len(calls)))
    assert use.groups == [("embed.weight", 32 * 16 * 4, (0, 4)), ("block", (16 * 16 + 16) * 4, (1, 3))]
    assert use.own == [0, 0, (16 * 16 + 16) * 4, 0, 0]
