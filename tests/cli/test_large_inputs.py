"""Huge graphs are answered in seconds: counted or solved, never enumerated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hostile import SRC, invoke, write, write_chain


@pytest.mark.slow
def test_a_hundred_thousand_isolated_nodes_are_solved_not_enumerated(tmp_path):
    n = 100_000
    doc = {"maxSizePerFPGA": 1e9, "maxFPGAs": 4, "maxCPUs": 1, "edges": [],
           "nodes": [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 2.0, "supportedOnFpga": 1, "isBackwardNode": 0,
                      "size": 1.0} for i in range(n)]}
    out = tmp_path / "split.json"
    code, stdout, err = invoke("solve", write(tmp_path / "iso.json", doc), "-o", out, "-q")
    assert code == 0, err
    split = json.loads(out.read_text())
    assert split["status"] == "bounded" and split["bound"] <= split["maxLoad"] <= 1.01 * n / 4.5


def test_series_count_matches_brute_force():
    import random

    from dnnplace.models.paper.solvers.dp.lattice_info import count_ideals_series

    rng = random.Random(1)
    for _ in range(500):
        n = rng.randint(1, 8)
        edges = sorted({tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(0, 2 * n))} if n > 1
                       else set())
        if rng.random() < 0.3:
            edges = sorted(set(edges) | {(i, i + 1) for i in range(n - 1)})
        brute = sum(all(not mask >> b & 1 or mask >> a & 1 for a, b in edges) for mask in range(1 << n))
        got = count_ideals_series(n, [a for a, _ in edges], [b for _, b in edges], 10**9)
        assert got == brute, (n, edges)


def test_info_on_a_60k_chain(tmp_path):
    """Large enough for the compiled loops and the series count (over 50,000 units), fast enough for every run."""
    code, out, err = invoke("info", write_chain(tmp_path / "chain.json", 60_000))
    assert code == 0, err
    assert out.count("60000 units, 60,001 ideals") == 3, out


@pytest.mark.slow
def test_info_on_a_2m_chain(tmp_path):
    """The issue's case: 2 M nodes (under the 256 MiB input cap) in at most 60 s of CPU and 2 GiB."""
    from dnnplace.utils.files import MAX_FILE_BYTES

    path = write_chain(tmp_path / "chain.json", 2_000_000)
    assert path.stat().st_size <= MAX_FILE_BYTES
    # a parent of its own, so that its children's usage is this command's alone
    meter = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]);"
             " u = resource.getrusage(resource.RUSAGE_CHILDREN);"
             " print('usage', u.ru_utime + u.ru_stime, u.ru_maxrss); sys.exit(r.returncode)")
    r = subprocess.run([sys.executable, "-c", meter, sys.executable, "-m", "dnnplace", "info", str(path)],
                       text=True, capture_output=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("2000000 units, more than 1,000,000 ideals") == 3, r.stdout
    cpu_s, rss_kib = map(float, r.stdout.split("usage ")[-1].split())
    assert cpu_s <= 60 and rss_kib <= 2 * 2**20, (cpu_s, rss_kib)
