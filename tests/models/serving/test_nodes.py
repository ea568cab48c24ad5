"""Replicas and nodes: a send over a network with no figure is never priced as if it were free or 1 byte/s,
``--within-nodes`` keeps every replica in one node with its own bound, and a plan whose replica crosses
nodes says the exports do not write that launch."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

from dnnplace.errors import DnnplaceError
from dnnplace.kernels import kernel_costs
from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, Stage
from dnnplace.models.serving.verdicts import unfit

ROOT = Path(__file__).resolve().parents[3]
M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"


def test_a_network_without_a_figure_is_unpriceable_not_one_byte_per_second():
    assert math.isinf(float(kernel_costs("l40s").p2p([1e6], "network").seconds[0]))
    t = float(kernel_costs("h100").p2p([1e6], "network").seconds[0])  # the datasheet's NDR link
    assert 0 < t < 1e-3
    t = float(kernel_costs("l40s").p2p([1e6], "network", bandwidth=12.5e9, latency=1e-5).seconds[0])
    assert t == pytest.approx(1e6 / 12.5e9 + 1e-5)


def test_a_replica_across_unknown_network_does_not_fit_and_says_why(llama8b):
    p = problem(llama8b, gpus="1xl40s;1xl40s", isl=256, osl=64)
    r = Replica((Stage("l40s", 0, (0,), 16), Stage("l40s", 1, (0,), 16)))
    ev = evaluate(p, ServingConfig((r,), 64, 4096))
    assert not ev.fits and "network" in ev.why and "--fleet" in ev.why
    assert np.isfinite(ev.output_tokens_per_s) and ev.output_tokens_per_s == 0


def test_the_unfit_line_names_the_missing_network(llama8b):
    p = problem(M70, gpus="1xl40s;1xl40s", precision="fp8", isl=256, osl=64)
    msg = str(unfit(p, {}))
    assert "in one node" in msg and "no network figure for l40s" in msg


def test_within_nodes_keeps_replicas_in_one_node_with_a_bound(llama8b):
    p = problem(llama8b, gpus="1xa100+1xl40s;1xh100", isl=256, osl=64)
    free = search(p, time_limit=30)
    kept = search(p, time_limit=30, within_nodes=True)
    for r in kept.config.replicas:
        assert len({s.node for s in r.stages}) == 1
    value = evaluate(p, kept.config).output_tokens_per_s
    assert kept.bound is not None and kept.bound >= value * (1 - 1e-9)
    # the free search ranges over a superset: within its own gap it is at least as good
    assert evaluate(p, free.config).output_tokens_per_s >= value * (1 - (free.gap or 0.0)) * (1 - 1e-9)
    assert "inside nodes" in kept.meta["note"]


def test_serve_notes_a_replica_across_nodes_and_within_nodes_refuses_cleanly(tmp_path):
    fleet = tmp_path / "f.toml"
    fleet.write_text('[[node]]\ngpus = "1xl40s"\n[[node]]\ngpus = "1xl40s"\n[network]\nbandwidth_gbps = 100\n'
                     'latency_us = 10\n')
    res = run_cli("serve", M70, "--fleet", fleet, "--precision", "fp8", "--isl", 256, "--osl", 64)
    assert res.returncode == 0, res.stderr
    assert "spans nodes 0, 1" in res.stdout and "--within-nodes" in res.stdout
    res = run_cli("serve", M70, "--fleet", fleet, "--precision", "fp8", "--isl", 256, "--osl", 64, "--within-nodes")
    assert res.returncode == 2 and "inside one node" in res.stderr and "Traceback" not in res.stderr


def test_unfit_is_a_dnnplace_error(llama8b):
    assert isinstance(unfit(problem(llama8b, gpus="1xl40s", isl=256, osl=64), {}), DnnplaceError)
