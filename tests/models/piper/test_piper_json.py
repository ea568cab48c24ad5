"""Piper JSON: SPEC 1.2 validation, BERT-L construction (SPEC 1.4), and the CLI (exit 2 on bad input)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from cli_runner import Result, run_cli

import dnnplace
from dnnplace.errors import InputError
from dnnplace.models.piper.piper_json import TRANSFORMER, bert_l, is_piper_json, load_piper, parse_piper, piper_to_dict

PIPER = Path(dnnplace.__file__).parent / "data" / "piper"
BERT = PIPER / "inputs" / "bert32a100.json"
TOY_A = PIPER / "toys" / "toy_a_knapsack.json"
GIB = 2**30


def toy() -> dict:
    return json.loads(TOY_A.read_text())


def mutate(fn):
    doc = toy()
    fn(doc)
    return doc


def opt(doc, node=1, j=0):
    return doc["nodes"][node]["TMPCs"]["1"][j]


BAD = {
    "maxDevices must be in": lambda d: d.update(maxDevices=0),
    "bandwidth must be": lambda d: d.update(bandwidth=0.0),
    "maxMemoryPerDevice must be": lambda d: d.update(maxMemoryPerDevice=0.0),
    "mbsInBatch must be": lambda d: d.update(mbsInBatch=0),
    "'nodes' is empty": lambda d: d.update(nodes=[], edges=[]),
    "'edges' is empty": lambda d: d.update(edges=[]),
    "negative communicationCost": lambda d: d["edges"][0].update(communicationCost=-1.0),
    "duplicate edge": lambda d: d["edges"].append(dict(d["edges"][0])),
    "does not exist": lambda d: d["edges"].append({"sourceId": 0, "destId": 7, "communicationCost": 0.0}),
    "cycle": lambda d: (d["edges"].append({"sourceId": 2, "destId": 0, "communicationCost": 0.0}),
                        [o["syncTimeFw"].update({"2": 0.0}) for o in d["nodes"][0]["TMPCs"]["1"]],
                        [o["syncTimeBw"].update({"0": 0.0}) for o in d["nodes"][2]["TMPCs"]["1"]]),
    "duplicate node id": lambda d: d["nodes"][1].update(id=0),
    "outside [1, 10000]": lambda d: d["nodes"][0]["TMPCs"].update({"0": []}),
    "listed twice": lambda d: opt(d, 1, 1).update(id="vanilla"),
    "non-empty string": lambda d: opt(d, 1, 1).update(id=""),
    "timePerSample must be >= 0": lambda d: opt(d).update(timePerSample=-1.0),
    "memoryUsageA must be >= 0": lambda d: opt(d).update(memoryUsageA=-1.0),
    "negative value": lambda d: opt(d)["syncTimeFw"].update({"0": -1.0}),
    "missing [0]": lambda d: opt(d)["syncTimeFw"].clear(),
    "extra [2]": lambda d: opt(d)["syncTimeFw"].update({"2": 0.0}),
    "at most 2 per (node, t)": lambda d: d["nodes"][1]["TMPCs"]["1"].append(dict(opt(d), id="third")),
    "missing field 'timePerSample'": lambda d: opt(d).pop("timePerSample"),
    "must be a number": lambda d: opt(d).update(parameterSize="big"),
}


@pytest.mark.parametrize("needle", sorted(BAD))
def test_validation_is_one_line(needle):
    with pytest.raises(InputError) as exc:
        parse_piper(mutate(BAD[needle]))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_recognised_by_tmpcs():
    assert is_piper_json(toy())
    assert not is_piper_json({"nodes": [{"id": 1, "fpgaLatency": 1.0}], "edges": []})


def test_round_trip():
    inst = load_piper(BERT)
    again = parse_piper(json.loads(json.dumps(piper_to_dict(inst))))
    assert again.edges == inst.edges and again.names == inst.names


def test_bert64_construction():
    b32 = load_piper(BERT)
    assert b32.n == 37 and len(b32.edges) == 67
    b = bert_l(b32, 64)
    assert b.n == 69 and len(b.edges) == 99
    # the chain after node 34: 37, 38, ..., 61, 63, ..., 68, 62, 35
    nxt = {}
    for u, v, _ in b.edges:
        if b.names[u] == TRANSFORMER and b.names[v] == TRANSFORMER:
            nxt[u] = v
    chain = [34]
    while chain[-1] in nxt:
        chain.append(nxt[chain[-1]])
    assert chain == [34, *range(37, 62), *range(63, 69), 62, 35]
    assert b.old_ids[37:] == list(range(123456790, 123456790 + 32))
    for x in range(37, 69):
        assert sum(1 for u, v, _ in b.edges if v == x) == 1  # no edge from the mask node
        for t, opts in b.tmpcs[x].items():
            for o, o34 in zip(opts, b32.tmpcs[34][t]):
                assert (o.p, o.w, o.a, o.b) == (o34.p, o34.w, o34.a, o34.b)
                assert list(o.fw.values()) == [o34.fw[33]] and list(o.bw.values()) == [o34.bw[35]]
    from dnnplace.models.piper.solvers.solver import build_arrays, tail_lattice

    assert tail_lattice(b, build_arrays(b), 10**6).n_ideals == 64 + 11


def test_bert_l_needs_bert32():
    with pytest.raises(InputError, match="bert32a100"):
        bert_l(load_piper(TOY_A), 40)


def cli(*args: str) -> Result:
    return run_cli(*args)


def test_cli_solve_simulate_report(tmp_path):
    plan = tmp_path / "plan.json"
    r = cli("solve", str(TOY_A), "-o", str(plan), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads(plan.read_text())
    assert doc["timePerSample"] == 5.0 and doc["status"] == "optimal" and doc["bound"] == 5.0
    assert doc["stages"][0]["tmpcs"] == {"0": "vanilla", "1": "activation recomp", "2": "vanilla"}
    r = cli("simulate", str(TOY_A), str(plan), "--json")
    assert r.returncode == 0, r.stderr
    sim = json.loads(r.stdout)
    assert sim["time_per_sample"] == 5.0 and sim["stages"][0]["recomputed"] == [1]
    r = cli("evaluate", str(TOY_A), str(plan), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["time_per_sample"] == 5.0
    bad = json.loads(plan.read_text())
    bad["stages"][0]["dataParallelDegree"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = cli("evaluate", str(TOY_A), str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "data-parallel degree 3" in r.stderr
    r = cli("report", str(TOY_A), str(plan), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert "in flight" in (tmp_path / "r.html").read_text()


def test_cli_overrides_and_bert64(tmp_path):
    r = cli("solve", str(BERT), "--bert-layers", "64", "-k", "64", "--memory", str(8 * GIB),
            "--bandwidth", str(25 * GIB), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["timePerSample"] == pytest.approx(0.04357126726, rel=1e-9)
    assert doc["instance"]["bertLayers"] == 64


@pytest.mark.parametrize("args,needle", [
    (["--bert-layers", "64", "-k", "8", "--memory", str(8 * GIB), "--bandwidth", str(25 * GIB)], "infeasible"),
    (["-k", "0"], "maxDevices"),
    (["--batch", "0"], "--batch"),  # the flag given, not the file field it overrides
    (["--bert-layers", "20"], "--bert-layers"),
])
def test_cli_bad_input_exit_2(args, needle):
    r = cli("solve", str(BERT), *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_cli_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    doc = copy.deepcopy(toy())
    opt(doc)["syncTimeFw"].clear()
    bad.write_text(json.dumps(doc))
    r = cli("solve", str(bad))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "syncTimeFw" in r.stderr
