"""``dnnplace profile --format piper``: a training profile as Piper's TMPC JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES

from dnnplace.frontends.torch_model.piper_export import paper_training_to_piper
from dnnplace.models.piper.piper_json import parse_piper
from dnnplace.models.piper.solvers.solver import solve_piper

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models


def paper_doc():
    fwd = [{"id": g, "name": f"n{g}", "module": f"m{g}", "fpgaLatency": 2.0 + g, "isBackwardNode": 0,
            "colorClass": g, "outputBytes": 100 * (g + 1), "paramBytes": 10 * g} for g in range(3)]
    bwd = [{"id": 3 + g, "name": f"n{g}_grad", "fpgaLatency": 4.0, "isBackwardNode": 1, "colorClass": g}
           for g in range(3)]
    edges = [{"sourceId": 0, "destId": 1, "cost": 1.0}, {"sourceId": 1, "destId": 2, "cost": 1.0},
             {"sourceId": 4, "destId": 3, "cost": 1.0}, {"sourceId": 0, "destId": 3, "cost": 1.0}]
    return {"maxSizePerFPGA": 1000.0, "maxFPGAs": 2, "maxCPUs": 0, "nodes": fwd + bwd, "edges": edges,
            "dnnplace": {"linkBandwidth": 1e6}}


def test_conversion():
    doc = paper_training_to_piper(paper_doc(), batch=4)
    inst = parse_piper(doc)
    assert inst.n == 3 and [(u, v) for u, v, _ in inst.edges] == [(0, 1), (1, 2)]
    van, rec = inst.tmpcs[1][1]
    assert van.p == pytest.approx((3.0 + 4.0) / 1e3) and rec.p == pytest.approx((2 * 3.0 + 4.0) / 1e3)
    assert van.a == 200 and rec.a == 0 and van.b == rec.b == 40 and van.w == 10
    assert inst.edges[0][2] == 100 and inst.bandwidth == 1e6 and inst.batch == 4
    assert solve_piper(inst).tps > 0


def test_cli_profile_piper(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "dnnplace", "profile", f"{EXAMPLES / 'mlp_skip.py'}:build",
                        "--granularity", "module", "--format", "piper", "--device", "a100", "--repeats", "1",
                        "-k", "4", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    inst = parse_piper(doc)
    assert all(set(o.id for o in tm[1]) == {"vanilla", "activation recomp"} for tm in inst.tmpcs)
    r = subprocess.run([sys.executable, "-m", "dnnplace", "solve", str(out), "--memory", "1e9", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "optimal"
