"""Activation CPU offloading (offload_layers): TE's copy schedule, memory, host memory, rules, search, output."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_helpers import EXAMPLES, llama, problem

import dnnplace
from dnnplace.core.catalogue import HOST_LINKS, device_spec, host_link
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.config import parse_pins
from dnnplace.models.llm.evaluation import evaluate, offload
from dnnplace.models.llm.evaluation.candidates import Candidates
from dnnplace.models.llm.evaluation.memory import FRAGMENTATION
from dnnplace.models.llm.evaluation.rules import check_config
from dnnplace.models.llm.evaluation.step import saved_layer_bytes
from dnnplace.models.llm.exporters import megatron
from dnnplace.models.llm.plan_file import read_llm_plan
from dnnplace.models.llm.published import config_path
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.solvers.search import search_with_runner_ups
from dnnplace.models.llm.spec import (
    RECOMPUTE,
    Cluster,
    LLMPlan,
    LLMProblem,
    ParallelConfig,
    TrainingJob,
    TransformerArch,
)


def _simulate(n: int, layers: int, c: float, t: float) -> float:
    """TE's default offload schedule step by step: layer i's copy is released when its compute ends, runs on
    one side stream in order, and must be done before layer layers - n + i computes; the main stream waits."""
    clock, stream, waited, done = 0.0, 0.0, 0.0, {}
    for layer in range(layers):
        for i in range(n):  # copies due before this layer
            if layers - n + i == layer:
                wait = max(0.0, done[i] - clock)
                waited, clock = waited + wait, clock + wait
        clock += t  # the layer's compute
        if layer < n:
            stream = max(stream, clock) + c
            done[layer] = stream
    return waited


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(2, 40), frac=st.floats(0, 1), c=st.floats(0.01, 5), t=st.floats(0.01, 5))
def test_exposed_copy_time_is_te_schedule(layers: int, frac: float, c: float, t: float) -> None:
    n = min(layers - 1, int(frac * layers))
    assert float(offload.exposed(np.array([n]), layers, np.array([c]), np.array([t]))[0]) == pytest.approx(
        _simulate(n, layers, c, t), abs=1e-9)


def test_exposed_hand_computed() -> None:
    # L 10, N 4: copy 1 s, layer 0.25 s -> the four copies (4 s) are due after 8 layers' time (2 s): 2 s wait;
    # copy 1 s, layer 0.5 s: each copy has 5 layers (2.5 s), the queue 8 x 0.5 = 4 s: no wait.
    got = offload.exposed(np.array([4, 4, 0, 9]), 10, np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.25, 0.5, 0.1, 2]))
    assert got.tolist() == pytest.approx([2.0, 0.0, 0.0, 9.0])  # N = L - 1: each copy is due at once


def test_catalogue_host_links_hand_computed() -> None:
    pcie = 32e9 * 16 * 128 / 130 / 8  # PCIe 5.0 x16, one direction
    assert HOST_LINKS["h100"].bandwidth == pytest.approx(pcie) and pcie == pytest.approx(63.0e9, rel=1e-3)
    assert HOST_LINKS["h100"].copy_bandwidth == pytest.approx(55.6e9)
    assert HOST_LINKS["b200"].memory_bytes == 2e12 / 8
    assert HOST_LINKS["gb200"].bandwidth == 225e9 and HOST_LINKS["gb300"].memory_bytes == 240e9
    assert host_link("a100") is None
    for link in HOST_LINKS.values():
        assert {"bandwidth", "fraction", "memory_bytes"} <= set(link.sources)


def _cfg(n: int = 0, tp: int = 8) -> ParallelConfig:
    return ParallelConfig(tp, 1, 1, 1, 8 // tp, 1, "none", tp > 1, True, (32,), offload_layers=n)


def _pr() -> LLMProblem:
    return problem(llama("8b"), 8, 64)


def test_memory_and_host_memory_hand_computed() -> None:
    pr = _pr()
    base, off = evaluate(pr, _cfg()), evaluate(pr, _cfg(30))
    layer = float(saved_layer_bytes(pr, Candidates.of([_cfg()]))[0])
    # Llama 3.1 8B, seq 8192, mbs 1, TP 8 + SP, no dropout, flash attention (evaluation/llm/memory.py):
    # LN1 in + QKV in 2 x 2sbh/t, Q K V 2sb(4096 + 2 x 1024)/t, LSE 4sba/t, O 2sb 4096/t, LN2 + fc1 in 2 x 2sbh/t,
    # SwiGLU in 2sb(2 x 14336)/t, fc2 in 2sb 14336/t.
    s, h, t = 8192, 4096, 8
    by_hand = (8 * s * h + 2 * s * (h + 2048) + 4 * s * 32 + 2 * s * h + 2 * s * 2 * 14336 + 2 * s * 14336) / t
    assert layer == pytest.approx(by_hand)
    assert base.memory_breakdown["activations"] - off.memory_breakdown["activations"] == pytest.approx(30 * layer)
    assert base.memory_per_gpu_bytes - off.memory_per_gpu_bytes == pytest.approx(30 * layer * (1 + FRAGMENTATION))
    assert off.host_memory_bytes == pytest.approx(30 * layer) and base.host_memory_bytes == 0.0
    assert off.host_capacity_bytes == 2e12 / 8  # DGX H100: 2 TB over 8 GPUs
    # the wait is the only time added, and the breakdown still sums to the step
    t_off = off.time_breakdown
    assert off.step_time_s == pytest.approx(base.step_time_s + t_off["offload_exposed"])
    assert sum(t_off.values()) == pytest.approx(off.step_time_s)


def test_host_memory_overflow_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    pr = _pr()
    small = dataclasses.replace(HOST_LINKS["h100"], memory_bytes=1e9)
    monkeypatch.setitem(HOST_LINKS, "h100", small)
    est = evaluate(pr, _cfg(30))
    assert not est.fits and est.overflow == "host_memory" and est.host_capacity_bytes == 1e9


def test_slow_link_exposes_copy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    pr = _pr()
    slow = dataclasses.replace(HOST_LINKS["h100"], bandwidth=1e9, fraction=1.0)
    monkeypatch.setitem(HOST_LINKS, "h100", slow)
    base, off = evaluate(pr, _cfg()), evaluate(pr, _cfg(20))
    layer = float(saved_layer_bytes(pr, Candidates.of([_cfg()]))[0])
    t = off.time_breakdown
    exposed = t["offload_exposed"]
    assert exposed > 0 and off.step_time_s == pytest.approx(base.step_time_s + exposed)
    assert sum(t.values()) == pytest.approx(off.step_time_s)
    # 20 copies of ``layer`` bytes at 1 GB/s each way take far longer than 30 layers' compute: the wait is the
    # queue's, N c - (L - 2) t per pass, so at least N c per micro-batch each way less the whole step's compute
    assert exposed >= off.num_microbatches * 2 * 20 * layer / 1e9 - base.step_time_s


@settings(max_examples=10, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), mbs=st.sampled_from([1, 2]), zero=st.sampled_from([1, 3]),
       bw=st.sampled_from([1e9, 2e10, 63e9]))
def test_time_non_decreasing_and_memory_decreasing_in_n(tp: int, mbs: int, zero: int, bw: float) -> None:
    """What the search's dominance rests on, over every N of one configuration and slow to fast links."""
    import unittest.mock

    pr = _pr()
    link = dataclasses.replace(HOST_LINKS["h100"], bandwidth=bw)
    with unittest.mock.patch.dict(HOST_LINKS, {"h100": link}):
        base = dataclasses.replace(_cfg(0, tp=tp), mbs=mbs, zero=zero)
        ests = [evaluate(pr, dataclasses.replace(base, offload_layers=n)) for n in range(32)]
    steps = [e.step_time_s for e in ests]
    mems = [e.memory_per_gpu_bytes for e in ests]
    hosts = [e.host_memory_bytes for e in ests]
    assert all(b >= a - 1e-12 * a for a, b in zip(steps, steps[1:]))
    assert all(b < a for a, b in zip(mems, mems[1:])) and all(b > a for a, b in zip(hosts, hosts[1:]))


def test_rules_name_the_offloading_limits() -> None:
    a100 = LLMProblem(llama("8b"), Cluster("a100", 8, 8), TrainingJob(4096, 64), device_spec("a100"))
    cfg = ParallelConfig(1, 1, 1, 1, 8, 1, "none", False, True, (32,), offload_layers=4)
    with pytest.raises(DnnplaceError, match=r"has no host link .*\(rule offload_host\)$"):
        check_config(a100, cfg)
    moe = dnnplace.load_llm(config_path("qwen3-30b-a3b"), gpus=16, seq_len=4096, global_batch=1024)
    mcfg = ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16, dispatcher="flex", offload_layers=2)
    with pytest.raises(DnnplaceError, match=r"\(rule offload_dense\)$"):
        check_config(moe, mcfg)
    assert parse_pins("offload_layers=40") == {"offload_layers": 40}
    with pytest.raises(DnnplaceError, match="offload_layers"):
        parse_pins("offload_layers=-1")


TINY = st.builds(
    lambda L, heads, ffn: TransformerArch("tiny", "llama", L, 64 * heads, ffn, heads, heads, 64, 1000),
    st.integers(3, 6), st.sampled_from([2, 4]), st.sampled_from([512, 2048]))


def _brute(pr: LLMProblem, tps: tuple[int, ...] = (1, 2), zeros: tuple[int, ...] = (0, 1, 2, 3)) -> tuple[float, int]:
    """The fastest fitting configuration over tp, pp (equal or first/last split), mbs, recompute, ZeRO -- and,
    only when none of those fits (offloading is the search's last resort), every offload N -- one by one through
    the evaluator; and the N it offloads."""
    L, n = pr.arch.num_layers, pr.cluster.gpus
    best, best_n = math.inf, -1
    kept = math.inf  # the fastest that fits without offloading
    for tp, pp in itertools.product(tps, range(1, L + 1)):
        if n % (tp * pp):
            continue
        dp = n // (tp * pp)
        splits = [(L,)] if pp == 1 else [s for s in itertools.product(range(1, L), repeat=pp) if sum(s) == L
                                         and len(set(s[1:-1])) <= 1]
        for lps, mbs, rc, zero in itertools.product(splits, range(1, pr.job.global_batch + 1), RECOMPUTE, zeros):
            for off in range(L if pp == 1 and rc == "none" else 1):
                cfg = ParallelConfig(tp, pp, 1, 1, dp, mbs, rc, tp > 1, zero >= 1, lps, zero=zero, offload_layers=off)
                try:
                    e = evaluate(pr, cfg)
                except DnnplaceError:
                    continue
                if e.fits and e.step_time_s < best:
                    best, best_n = e.step_time_s, off
                if e.fits and off == 0:
                    kept = min(kept, e.step_time_s)
    return (kept, 0) if kept < math.inf else (best, best_n)


@settings(max_examples=5, deadline=None)
@given(arch=TINY, gbs=st.sampled_from([2, 4]), squeeze=st.floats(0.1, 0.9))
def test_search_equals_brute_force_with_offloading(arch: TransformerArch, gbs: int, squeeze: float) -> None:
    """A GPU made small enough that the unpipelined configuration fits only without some of its activations
    (offloaded, recomputed, or spread over a pipeline)."""
    pr0 = problem(arch, 2, gbs, seq=1024, gpn=2)
    one = ParallelConfig(1, 1, 1, 1, 2, 1, "none", False, True, (arch.num_layers,))
    need = evaluate(pr0, one).memory_per_gpu_bytes
    layers = (arch.num_layers - 1) * float(saved_layer_bytes(pr0, Candidates.of([one]))[0]) * (1 + FRAGMENTATION)
    dev = dataclasses.replace(device_spec("h100"), usable_memory_bytes=need - squeeze * layers)
    pr = LLMProblem(arch, Cluster("h100", 2, 2), TrainingJob(1024, gbs), dev)
    narrow = ({"vp": 1, "cp": 1, "tp": 1, "zero": 0}, {"tps": (1,), "zeros": (0,)})  # offloading's rivals fewer
    for pins, space in (({"vp": 1, "cp": 1}, {}), narrow):
        best, _ = _brute(pr, **space)  # type: ignore[arg-type]
        try:
            plan = search(pr, pins)
        except DnnplaceError:
            assert best == math.inf
            continue
        assert plan.status == "optimal" and plan.estimate.step_time_s == pytest.approx(best, rel=1e-12)
        again = evaluate(pr, plan.config)
        assert again.fits and again.step_time_s == pytest.approx(plan.estimate.step_time_s, rel=1e-12)


def test_search_offloads_where_nothing_else_fits() -> None:
    """pp, recomputation and ZeRO pinned as the Bridge 70B recipe on GB200 set them: only offloading can make it
    fit, and the search takes the smallest N that does."""
    pr = _pr()
    fix = {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "recompute": "none", "mbs": 1, "zero": 1, "distributed_optimizer": True}
    assert not evaluate(pr, dataclasses.replace(_cfg(0, tp=1), sequence_parallel=False)).fits
    plan = search(pr, fix)
    n = plan.config.offload_layers
    assert n > 0 and plan.estimate.fits
    assert not evaluate(pr, dataclasses.replace(plan.config, offload_layers=n - 1)).fits
    assert plan.status == "fixed"
    pinned = search(pr, {**fix, "offload_layers": n + 5})
    assert pinned.config.offload_layers == n + 5


def test_search_never_trades_a_fitting_configuration_for_offloading() -> None:
    """Offloading is the last resort: where a configuration fits without it, the plan and its runner-ups offload
    nothing, even though an offloaded one is priced faster; where none does, the plan offloads."""
    big = problem(llama("70b"), 64, 128)
    pins = {"tp": 2, "pp": 1, "cp": 1}
    plan, others = search_with_runner_ups(big, pins, count=2)
    assert plan.estimate.fits and plan.config.offload_layers == 0
    assert others and all(o.config.offload_layers == 0 and o.estimate.fits for o in others)
    faster = search(big, {**pins, "recompute": "none", "mbs": 1, "zero": 3, "distributed_optimizer": True})
    assert faster.config.offload_layers > 0 and faster.estimate.fits  # the rival the policy passes over
    assert faster.estimate.step_time_s < plan.estimate.step_time_s
    pr = _pr()
    alone = search(pr, {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "recompute": "none", "mbs": 1, "zero": 1,
                        "distributed_optimizer": True})
    assert alone.config.offload_layers > 0 and alone.estimate.fits


def test_plan_file_round_trip_and_old_files() -> None:
    pr = _pr()
    cfg = _cfg(30)
    est = evaluate(pr, cfg)
    doc = LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0).to_dict()
    assert doc["version"] == 9 and doc["config"]["offload_layers"] == 30
    assert doc["prediction"]["host_memory_bytes"] == pytest.approx(est.host_memory_bytes)
    back = read_llm_plan(json.loads(json.dumps(doc)))
    assert back.config == cfg
    old = json.loads(json.dumps(LLMPlan(pr, _cfg(), evaluate(pr, _cfg()), "fixed", 1.0, 0.0, False, 0.0).to_dict()))
    old["version"] = 4
    del old["config"]["offload_layers"], old["prediction"]["host_memory_bytes"]
    del old["prediction"]["host_capacity_bytes"], old["prediction"]["time_breakdown"]["offload_exposed"]
    old["bound"] = old["prediction"]["step_time_s"]
    assert read_llm_plan(old).config.offload_layers == 0


def test_exports(tmp_path: Path) -> None:
    pr = _pr()
    cfg = _cfg(30)
    est = evaluate(pr, cfg)
    plan = LLMPlan(pr, cfg, est, "fixed", est.step_time_s, 0.0, False, 0.0)
    text = megatron.render(plan)
    assert "--cpu-offloading-num-layers 30" in text
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(plan.to_dict()))
    for target in ("torchtitan", "deepspeed"):
        res = run_cli("export", str(out), "--to", target)
        assert res.returncode == 2, res.stderr
        assert "offload_layers=30" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_plan_cli_fix_offload(tmp_path: Path) -> None:
    cfg = str(EXAMPLES / "llama3.1-8b.json")
    out = tmp_path / "plan.json"
    res = run_cli("plan", cfg, "--gpus", "8", "--seq-len", "8192", "--global-batch", "64", "--fix",
                  "tp=8,pp=1,mbs=1,recompute=none,zero=1,offload_layers=30", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["config"]["offload_layers"] == 30
    res = run_cli("plan", cfg, "--gpus", "8", "--seq-len", "8192", "--global-batch", "64", "--fix",
                  "pp=2,offload_layers=3")
    assert res.returncode == 2 and "offload_pp" in res.stderr and "Traceback" not in res.stderr
