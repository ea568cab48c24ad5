"""Piper's checker (PIPER-SPEC section 5) as evaluation/piper.py: values, OOM, and every abort as a one-line error."""

from __future__ import annotations

import copy

import pytest

from dnnplace.errors import InputError
from dnnplace.models.piper.evaluation import INF, evaluate_piper
from dnnplace.models.piper.piper_json import parse_piper, plan_from_dict, plan_to_dict
from dnnplace.models.piper.spec import PiperPlan, PiperStage


def tm(p, w=0.0, a=0.0, b=0.0, fw=None, bw=None, tid="vanilla"):
    return {"id": tid, "timePerSample": p, "parameterSize": w, "memoryUsageA": a, "memoryUsageB": b,
            "syncTimeFw": fw or {}, "syncTimeBw": bw or {}}


def chain_doc():
    # 0 -> 1 -> 2, c = 4 and 6; t = 1 (two TMPCs) and t = 2 (one TMPC)
    return {
        "maxDevices": 8, "maxMemoryPerDevice": 100.0, "bandwidth": 2.0, "mbsInBatch": 4,
        "nodes": [
            {"id": 0, "name": "a", "TMPCs": {
                "1": [tm(2.0, w=8.0, a=10, b=5, bw={"1": 1.0}), tm(3.0, w=8.0, a=1, b=6, bw={"1": 1.0},
                                                                    tid="activation recomp")],
                "2": [tm(1.5, w=4.0, a=6, b=3, bw={"1": 2.0})]}},
            {"id": 1, "name": "b", "TMPCs": {
                "1": [tm(4.0, w=16.0, a=20, b=10, fw={"0": 0.5}, bw={"2": 0.0}),
                      tm(5.0, w=16.0, a=2, b=12, fw={"0": 0.5}, bw={"2": 0.0}, tid="activation recomp")],
                "2": [tm(2.5, w=8.0, a=12, b=5, fw={"0": 1.0}, bw={"2": 1.0})]}},
            {"id": 2, "name": "c", "TMPCs": {
                "1": [tm(1.0, a=1, b=1, fw={"1": 0.0})],
                "2": [tm(0.8, a=1, b=1, fw={"1": 3.0})]}},
        ],
        "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 4.0},
                  {"sourceId": 1, "destId": 2, "communicationCost": 6.0}],
    }


def test_value_by_hand():
    inst = parse_piper(chain_doc())
    plan = PiperPlan([
        PiperStage([0], 2, 1, {0: "vanilla"}),
        PiperStage([1, 2], 1, 2, {1: "vanilla", 2: "vanilla"}),
    ])
    ev = evaluate_piper(inst, plan)
    # stage 0: d=2, D=3 -> y=2; edge 0->1 out: 2*(4+1)=10; resync 4*1*8/(2*4)=4; (10/2+4)/2 + 2/2 = 5.5
    # stage 1: d=1, t=2, D=1 -> y=1; edges: in 0->1 at node 1: 2*(4+1)=10; (10/1+0)/2 + (2.5+0.8)/1 = 8.3
    assert ev.stages[0].time == pytest.approx(5.5)
    assert ev.stages[1].time == pytest.approx(8.3)
    assert ev.tps == pytest.approx(8.3)
    assert [s.in_flight for s in ev.stages] == [2, 1]
    assert ev.stages[0].memory == pytest.approx(10 * 2 + 5)
    assert ev.devices == 4 and ev.data_parallel_sum == 3


def test_oom_is_inf_not_an_error():
    doc = chain_doc()
    doc["maxMemoryPerDevice"] = 20.0
    inst = parse_piper(doc)
    plan = PiperPlan([PiperStage([0, 1, 2], 1, 1, {0: "vanilla", 1: "vanilla", 2: "vanilla"})])
    ev = evaluate_piper(inst, plan)
    assert ev.tps == INF and not ev.feasible


def test_no_stages_is_nodes_unplaced():
    # issue 22 item 6: not "out of memory" (Piper's checker returns INF), a one-line error naming a node
    inst = parse_piper(chain_doc())
    with pytest.raises(InputError, match="nodes unplaced.*node 0"):
        evaluate_piper(inst, PiperPlan([]))


GOOD_STAGES = [([0], 1, 1, {0: "vanilla"}), ([1, 2], 1, 1, {1: "vanilla", 2: "vanilla"})]


def plan_with(fn):
    stages = copy.deepcopy(GOOD_STAGES)
    stages = fn(stages) or stages
    return PiperPlan([PiperStage(list(n), d, t, dict(m)) for n, d, t, m in stages])


ABORTS = {
    "duplicate node": lambda s: [([0], 1, 1, {0: "vanilla"}), ([0, 1, 2], 1, 1, {0: "vanilla", 1: "vanilla",
                                                                                 2: "vanilla"})],
    "data-parallel degree 0": lambda s: [(s[0][0], 0, 1, s[0][3]), s[1]],
    "does not divide": lambda s: [(s[0][0], 3, 1, s[0][3]), s[1]],
    "tensor-parallel degree 9": lambda s: [(s[0][0], 1, 9, s[0][3]), s[1]],
    "goes from stage 1 back": lambda s: [([1, 2], 1, 1, {1: "vanilla", 2: "vanilla"}), ([0], 1, 1, {0: "vanilla"})],
    "in no stage": lambda s: [s[0], ([1], 1, 1, {1: "vanilla"})],
    "node 0 is in no stage": lambda s: [s[1]],
    "more than the batch": lambda s: [(s[0][0], 4, 1, s[0][3]), (s[1][0], 2, 1, s[1][3])],
    "more than the 8 available": lambda s: [(s[0][0], 2, 4, s[0][3]), (s[1][0], 1, 1, s[1][3])],
    "not in that stage": lambda s: [([0], 1, 1, {0: "vanilla", 1: "vanilla"}), s[1]],
    "no TMPC for node": lambda s: [s[0], (s[1][0], 1, 1, {1: "vanilla"})],
    "no TMPC 'nope'": lambda s: [([0], 1, 1, {0: "nope"}), s[1]],
    "no TMPCs for t=4": lambda s: [([0], 1, 4, {0: "vanilla"}), s[1]],
}


@pytest.mark.parametrize("needle", sorted(ABORTS))
def test_checker_aborts_are_one_line_errors(needle):
    inst = parse_piper(chain_doc())
    with pytest.raises(InputError) as exc:
        evaluate_piper(inst, plan_with(ABORTS[needle]))
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_plan_file_round_trip():
    inst = parse_piper(chain_doc())
    plan = plan_with(lambda s: None)
    doc = plan_to_dict(inst, plan, evaluate_piper(inst, plan))
    assert doc["stages"][1]["tmpcs"] == {"1": "vanilla", "2": "vanilla"}
    back = plan_from_dict(inst, doc)
    assert evaluate_piper(inst, back).tps == evaluate_piper(inst, plan).tps == doc["timePerSample"]


def test_old_ids_are_kept_in_plans():
    doc = chain_doc()
    # renumber: ids 10, 20, 30
    remap = {0: 10, 1: 20, 2: 30}
    for nd in doc["nodes"]:
        nd["id"] = remap[nd["id"]]
        for lst in nd["TMPCs"].values():
            for o in lst:
                o["syncTimeFw"] = {str(remap[int(k)]): v for k, v in o["syncTimeFw"].items()}
                o["syncTimeBw"] = {str(remap[int(k)]): v for k, v in o["syncTimeBw"].items()}
    for e in doc["edges"]:
        e["sourceId"], e["destId"] = remap[e["sourceId"]], remap[e["destId"]]
    inst = parse_piper(doc)
    plan = plan_with(lambda s: None)
    out = plan_to_dict(inst, plan, evaluate_piper(inst, plan))
    assert out["stages"][0]["nodes"] == [10] and out["stages"][1]["tmpcs"] == {"20": "vanilla", "30": "vanilla"}
