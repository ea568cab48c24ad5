"""A solution says ``optimal`` only with a zero gap."""

from __future__ import annotations

import json

import pytest
from hostile import GNMT, invoke

import dnnplace


@pytest.mark.slow
@pytest.mark.parametrize("args", [["-m", "ip", "--gap", "0.5"], ["-m", "ip-noncontig", "--gap", "0.3"],
                                  ["-m", "ip-noncontig"], ["-m", "ip", "--gap", "0"], ["--gap", "0.5"]])
def test_optimal_only_with_a_zero_gap(args):
    code, out, err = invoke("solve", GNMT, *args, "--time-limit", "20", "--json")
    assert code == 0, err
    doc = json.loads(out)
    gap = doc.get("gap")
    if doc["status"] == "optimal":
        assert gap is None or gap <= 1e-9, doc
    elif gap is not None and gap > 1e-9:
        assert doc["status"] in ("bounded", "time_limit"), doc
    code, out, err = invoke("solve", GNMT, *args, "--time-limit", "20")
    title = out.splitlines()[0]
    assert ("optimal" not in title) or ("gap 0.00 %" in title), title


def test_api_ip_with_a_gap_says_bounded():
    w = dnnplace.load(GNMT)
    sol = dnnplace.solve(w, "ip", gap=0.5, time_limit=20)
    assert sol.gap is not None
    assert (sol.status == "optimal") == (sol.gap <= 1e-9), (sol.status, sol.gap)
    assert sol.split.meta["status"] == sol.status
