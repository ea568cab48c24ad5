"""Collectives from NCCL's measured sweep under the ``measured_kernels`` switch, and the kernel sources every
training plan reports (evaluation/llm/kernel_ledger.py, plan_doc.kernel_sources_doc, the report)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.models.llm.evaluation import comm, evaluate
from dnnplace.models.llm.evaluation.kernel_ledger import FAMILIES, NAMES, ledger_doc, ledger_lines, note, recording
from dnnplace.models.llm.plan_doc import kernel_sources_doc, plan_document
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.report import render_llm_report
from dnnplace.models.llm.spec import LLMPlan, LLMProblem
from tests.models.llm.llm_helpers import llama, problem, uniform


def _measured(pr: LLMProblem, on: bool = True) -> LLMProblem:
    return dataclasses.replace(pr, device=dataclasses.replace(pr.device, measured_kernels=on))


def _plan(pr: LLMProblem, cfg: object) -> LLMPlan:
    est = evaluate(pr, cfg)  # type: ignore[arg-type]
    return LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0)  # type: ignore[arg-type]


def test_collective_from_the_sweep_inside_a_node_ring_elsewhere() -> None:
    dev = _measured(problem(llama("8b"), 8, 8)).device
    kc = kernel_costs("h100")
    nbytes, n = np.array([64e6, 64e6, 64e6, 64e6]), np.array([4.0, 8.0, 16.0, 4.0])
    inside = np.array([True, True, True, False])
    bw, lat = np.full(4, 300e9), np.full(4, 3e-6)
    got = comm.collective_time("reduce_scatter", nbytes, n, bw, lat, inside, dev)
    ring = comm.ring_time(nbytes, n, bw, lat)
    table = kc.collective("reduce_scatter", nbytes[:2], n[:2]).seconds
    assert kc.collective_gpus("reduce_scatter") == 8  # the H100 sweep: 2, 4 and 8 GPUs of one node
    np.testing.assert_allclose(got[:2], table)  # in the sweep: its value
    np.testing.assert_allclose(got[2:], ring[2:])  # 16 GPUs (beyond the sweep) and across nodes: the ring model
    # an all-reduce is two ring passes in the catalogue, the all-reduce curve in the sweep
    ar = comm.collective_time("all_reduce", nbytes, n, bw, lat, inside, dev)
    assert ar[0] == pytest.approx(float(kc.collective("all_reduce", 64e6, 4).seconds))
    assert ar[3] == pytest.approx(2 * ring[3])
    # switch off: the ring model, bit for bit
    off = dataclasses.replace(dev, measured_kernels=False)
    np.testing.assert_array_equal(comm.collective_time("reduce_scatter", nbytes, n, bw, lat, inside, off), ring)


def test_tp_collective_of_a_step_by_hand() -> None:
    # the embedding rank's forward TP term under SP is one ring step: the mean of an all-gather and a
    # reduce-scatter of the micro-batch's activation (2 x 8192 tokens x 8192 hidden bytes over 4 GPUs)
    from dnnplace.models.llm.evaluation.candidates import Candidates
    from dnnplace.models.llm.evaluation.step import stage_costs

    arch = llama("70b")
    pr = problem(arch, 64, 128)
    c = Candidates.of([uniform(arch, 64, 4, 2, 1)])
    nbytes = 2.0 * 8192 * 8192
    kc = kernel_costs("h100")
    ag, rs = (float(kc.collective(op, nbytes, 4).seconds) for op in ("all_gather", "reduce_scatter"))
    want = 0.5 * (ag + rs)
    assert stage_costs(_measured(pr), c).first["tp"][1][0] == pytest.approx(want)
    # switch off: the catalogue's ring step on the node's NVLink, as before
    dev = pr.device
    bw = dev.nvlink_bandwidth * float(dev.nvlink_fraction or 0.0)
    ring = 3 / 4 * nbytes / bw + 3 * dev.nvlink_latency_s
    assert stage_costs(pr, c).first["tp"][1][0] == pytest.approx(ring, rel=1e-12)


def test_ledger_counts_and_shares() -> None:
    with recording() as led:
        note("dense_gemm", np.array([1.0, 3.0]), np.array([0, 1]))
        note("collectives", np.array([2.0, 5.0]), where=np.array([True, False]))
    note("attention", 1.0)  # outside a recording: nothing kept
    doc = ledger_doc(led, True)
    assert doc["families"]["dense_gemm"] == {"counts": {"measured": 1, "interpolated": 1},
                                             "seconds_share": {"measured": 0.25, "interpolated": 0.75}}
    assert doc["families"]["collectives"]["counts"] == {"catalogue": 1}
    assert doc["families"]["attention"]["counts"] == {}
    assert ledger_lines(doc) == ["kernel sources (measured kernel tables on): dense GEMMs 75 % interpolated, "
                                 "25 % measured; collectives 100 % catalogue"]


def test_every_plan_says_where_its_costs_came_from() -> None:
    arch = llama("70b")
    cfg = uniform(arch, 64, 4, 2, 1)
    pr = problem(arch, 64, 128)
    off = kernel_sources_doc(_plan(pr, cfg))
    assert off["measured_kernels"] is False
    for fam in ("dense_gemm", "attention", "collectives"):
        assert set(off["families"][fam]["counts"]) == {"catalogue"}, fam
    assert off["families"]["expert_gemm"]["counts"] == {}  # a dense model has none
    plan = _plan(_measured(pr), cfg)
    on = kernel_sources_doc(plan)
    assert on["measured_kernels"] is True
    for fam in ("dense_gemm", "attention", "collectives"):  # cp 1: attention from the table too
        assert set(on["families"][fam]["counts"]) - {"catalogue"}, (fam, on["families"][fam])
        assert sum(on["families"][fam]["seconds_share"].values()) == pytest.approx(1.0)
    assert set(FAMILIES) == set(on["families"]) and "catalogue" in NAMES
    # the JSON plan carries it, a reader drops it as a claim it recomputes; the report prints it
    doc = plan_document(plan)
    assert doc["kernel_sources"] == on
    assert read_llm_plan(doc).config == cfg
    page = render_llm_report(plan, "t")
    assert "kernel sources" in page and "interpolated" in page


def test_moe_all_to_all_from_the_sweep_when_the_group_is_on_nvlink() -> None:
    from dnnplace.arch.moe_config import load_moe
    from dnnplace.models.llm.evaluation.moe_dispatch import measured_all_to_all
    from dnnplace.models.llm.published import config_path

    m = load_moe(config_path("qwen3-30b-a3b"))
    dev = _measured(problem(llama("8b"), 8, 8)).device
    t, ep = np.array([4096.0, 4096.0]), np.array([8.0, 8.0])
    ring = np.array([1e-3, 1e-3])
    got = measured_all_to_all(m, t, ep, np.array([0.0, 1.0]), ring, dev)
    want = kernel_costs("h100").collective("all_to_all", 2.0 * m.arch.hidden * 4096 * m.moe.top_k, 8).seconds
    assert got[0] == pytest.approx(float(want))
    assert got[1] == ring[1]  # NIC bytes: the group crosses nodes, the catalogue's dispatch time


def test_tables_for_narrows_the_switch_to_some_families() -> None:
    from dnnplace.models.llm.evaluation.kernel_ledger import tables_for, uses_tables

    dev = _measured(problem(llama("8b"), 8, 8)).device
    assert uses_tables(dev, "dense_gemm") and uses_tables(dev, "collectives")
    with tables_for(["collectives"]):
        assert uses_tables(dev, "collectives") and not uses_tables(dev, "dense_gemm")
        arch = llama("70b")
        pr = _measured(problem(arch, 64, 128))
        doc = kernel_sources_doc(_plan(pr, uniform(arch, 64, 4, 2, 1)))
        assert set(doc["families"]["dense_gemm"]["counts"]) == {"catalogue"}
    assert not uses_tables(dataclasses.replace(dev, measured_kernels=False), "dense_gemm")


def test_the_screen_says_where_the_costs_came_from(tmp_path: object) -> None:
    from pathlib import Path

    from tests.cli_runner import run_cli

    out = Path(str(tmp_path)) / "plan.json"
    res = run_cli("plan", Path(__file__).resolve().parents[3] / "examples" / "llm" / "llama3.1-8b.json", "--gpus", 8,
                  "--seq-len", 4096, "--global-batch", 32, "-o", out)
    assert res.returncode == 0, res.stdout + res.stderr
    text = " ".join(res.stdout.split())
    assert "kernel sources (catalogue; measured kernel tables off): dense GEMMs 100 % catalogue" in text
    import json

    assert json.loads(out.read_text())["kernel_sources"]["measured_kernels"] is False
