"""The search against brute force over the same space, its statuses, and hostile requests."""

from __future__ import annotations

import importlib
import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_helpers import llama, problem, uniform

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation import evaluate
from dnnplace.models.llm.solvers import search
from dnnplace.models.llm.solvers.search import price_pins, search_with_runner_ups
from dnnplace.models.llm.spec import RECOMPUTE, ParallelConfig, TransformerArch


def layer_splits(L: int, pp: int, vp: int) -> list[tuple[int, ...]]:
    """Layers per virtual stage of Megatron's family, built stage by stage (independently of the search).

    vp = 1: first and last rank free, the middle ranks equal.  Interleaved: every virtual stage k
    layers, but the first and the last may hold fewer (at least one).
    """
    out = []
    if vp == 1:
        for first, last in itertools.product(range(1, L + 1), repeat=2):
            rest = L - first - last
            if pp == 1:
                if first == last == L:
                    out.append((L,))
            elif pp == 2:
                if rest == 0:
                    out.append((first, last))
            elif rest > 0 and rest % (pp - 2) == 0:
                out.append((first, *[rest // (pp - 2)] * (pp - 2), last))
        return out
    for k, f, e in itertools.product(range(1, L + 1), repeat=3):
        if f <= k and e <= k:
            stages = [f] + [k] * (pp * vp - 2) + [e]
            if sum(stages) == L:
                out.append(tuple(stages))
    return out


def brute_force(pr) -> float:  # noqa: ANN001
    """Every ParallelConfig of that family, tried one by one through the scalar evaluator."""
    a, n, gpn = pr.arch, pr.cluster.gpus, pr.cluster.gpus_per_node
    L, best = a.num_layers, math.inf
    for tp, pp, cp, vp in itertools.product(range(1, gpn + 1), range(1, L + 1), range(1, n + 1), range(1, L + 1)):
        if n % (tp * pp * cp) or (vp > 1 and pp < 2):
            continue
        dp = n // (tp * pp * cp)
        for lps in layer_splits(L, pp, vp):
            for mbs, rc, zero in itertools.product(range(1, pr.job.global_batch + 1), RECOMPUTE, range(4)):
                cfg = ParallelConfig(tp, pp, vp, cp, dp, mbs, rc, tp > 1, zero >= 1, lps, zero=zero)
                try:
                    e = evaluate(pr, cfg)
                except DnnplaceError:
                    continue
                if e.fits:
                    best = min(best, e.step_time_s)
    return best


SMALL = st.builds(
    lambda L, hd, heads, kvdiv, ffn, vocab: TransformerArch("tiny", "llama", L, hd * heads, ffn, heads,
                                                            heads // kvdiv, hd, vocab),
    st.integers(2, 6), st.sampled_from([64, 128]), st.sampled_from([2, 4]), st.sampled_from([1, 2]),
    st.sampled_from([512, 1536]), st.sampled_from([1000, 32000]))


@settings(max_examples=6, deadline=None)
@given(arch=SMALL, gpus=st.sampled_from([2, 4]), gbs=st.sampled_from([2, 4]), seq=st.sampled_from([256, 1024]))
def test_search_equals_brute_force(arch: TransformerArch, gpus: int, gbs: int, seq: int) -> None:
    pr = problem(arch, gpus, gbs, seq=seq, gpn=2)
    plan = search(pr)
    assert plan.status == "optimal" and plan.exhaustive
    assert plan.estimate.step_time_s == pytest.approx(brute_force(pr), rel=1e-12)
    assert evaluate(pr, plan.config).step_time_s == pytest.approx(plan.estimate.step_time_s, rel=1e-12)


def test_search_beats_or_matches_published_70b() -> None:
    a = llama("70b")
    pr = problem(a, 64, 128)
    published = evaluate(pr, uniform(a, 64, 4, 4, 2, vp=5)).step_time_s
    plan = search(pr)
    assert plan.estimate.fits and plan.estimate.step_time_s <= published + 1e-12
    assert plan.bound == pytest.approx(plan.estimate.step_time_s) and plan.gap == 0.0


def test_fixed_everything_is_status_fixed() -> None:
    a = llama("8b")
    pr = problem(a, 8, 128)
    fixed = {"tp": 1, "pp": 1, "vp": 1, "cp": 2, "mbs": 1, "recompute": "none", "zero": 1}
    plan = search(pr, fixed)
    assert plan.status == "fixed" and not plan.exhaustive and plan.gap == 0.0
    assert plan.estimate.step_time_s == pytest.approx(evaluate(pr, uniform(a, 8, 1, 1, 2)).step_time_s)


def test_time_limit_returns_best_so_far_with_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock runs out after some evaluated candidates: the best plan so far, a proven bound below it."""
    module = importlib.import_module("dnnplace.models.llm.solvers.search")

    a = llama("70b")
    pr = problem(a, 64, 128)
    evaluated: dict[str, Any] = {"rows": 0, "first_fit": None}
    real = module.evaluate_batch

    def counting(*args: Any) -> Any:
        res = real(*args)
        evaluated["rows"] += len(args[1])
        if evaluated["first_fit"] is None and res.fits.any():
            evaluated["first_fit"] = evaluated["rows"]
        return res
    monkeypatch.setattr(module, "evaluate_batch", counting)
    monkeypatch.setattr(module, "CHUNK_ROWS", 500)  # small rounds: the clock is read between them
    full = search(pr)
    first_fit = evaluated["first_fit"]
    assert first_fit is not None and first_fit < evaluated["rows"]  # the full search goes on past it
    evaluated["rows"] = 0
    # out as soon as a batch holding a fitting candidate was evaluated, however the search paces its batches
    monkeypatch.setattr(module._Clock, "over", lambda self: evaluated["rows"] >= first_fit)
    plan = search(pr, time_limit=1.0)
    assert plan.status == "time_limit" and not plan.exhaustive
    assert plan.bound <= full.estimate.step_time_s + 1e-12 <= plan.estimate.step_time_s + 1e-12
    assert plan.gap == pytest.approx((plan.estimate.step_time_s - plan.bound) / plan.estimate.step_time_s)


@pytest.mark.parametrize("checks", [1, 3, 5, 7])
def test_time_limit_before_any_plan_is_a_refusal(monkeypatch: pytest.MonkeyPatch, checks: int) -> None:
    """A clock that runs out while enumerating, bounding or before the first fitting plan: one line, no plan
    claimed (and never "optimal")."""
    module = importlib.import_module("dnnplace.models.llm.solvers.search")

    calls = {"n": 0}

    def over(self: object) -> bool:
        calls["n"] += 1
        return calls["n"] >= checks
    monkeypatch.setattr(module._Clock, "over", over)
    with pytest.raises(DnnplaceError, match="time limit of 1 s ran out"):
        search(problem(llama("70b"), 64, 128), time_limit=1.0)


def test_progress_is_reported() -> None:
    seen: list[tuple[float, float, str]] = []
    search(problem(llama("8b"), 8, 128), progress=lambda d, t, s: seen.append((d, t, s)))
    assert seen and seen[-1][0] <= seen[-1][1]


@pytest.mark.parametrize("gpus,gbs,fixed,msg", [
    (60, 128, None, "not a multiple of gpus_per_node"),
    (64, 1, {"dp": 64, "tp": 1, "pp": 1, "cp": 1}, r"rule batch_divisible \(global batch 1 not"),
    (64, 128, {"tp": 3, "pp": 7}, r"rule tp_heads \(tp=3 must divide the 64 attention heads"),
    (64, 128, {"tp": 8, "pp": 7}, r"rule world_size \(tp\*pp\*cp\*dp = 56 != 64 GPUs"),
    (64, 128, {"tp": 0}, "tp 0 is outside 1..1,048,576"),
    (64, 128, {"pp": 1.5}, "pp must be a whole number, got 1.5"),
    (64, 128, {"distributed_optimizer": "yes"}, "distributed_optimizer must be true or false"),
    (64, 128, {"bogus": 1}, "cannot fix bogus"),
    (64, 128, {"recompute": "some"}, "recompute must be"),
])
def test_hostile_requests(gpus: int, gbs: int, fixed: dict | None, msg: str) -> None:
    with pytest.raises(DnnplaceError, match=msg) as info:
        search(problem(llama("70b"), gpus, gbs), fixed)
    assert "\n" not in str(info.value)


def test_nothing_fits_names_the_memory() -> None:
    with pytest.raises(DnnplaceError, match="no configuration fits.*each needs at least .* GB for its model state"):
        search(problem(llama("70b"), 8, 8), {"tp": 1, "pp": 1, "cp": 1})


@pytest.mark.parametrize(("gpus", "seq", "fixed", "tp"), [(8, 2048, {}, 1), (16, 65536, {"cp": 1}, 8)])
def test_nothing_fits_says_how_far_the_leanest_layout_is(gpus: int, seq: int, fixed: dict, tp: int) -> None:
    """The shortfall is the leanest layout's, not the fastest's: Llama 3.1 70B on 8 H100s was refused with "the
    fastest, tp=1, ..., zero=0, needs 1,663.8 GB" where ZeRO-3 with full recomputation needs about 161; the
    figure said is a proven bound: above the GPU's memory, and no more than what a lean layout is priced at."""
    pr = problem(llama("70b"), gpus, 16, seq=seq)
    with pytest.raises(DnnplaceError) as info:
        search(pr, fixed)
    msg = str(info.value)
    assert "\n" not in msg and "the fastest" not in msg
    need = float(msg.split("needs at least ")[1].split(" GB")[0].replace(",", "")) * 1e9
    assert need > pr.device.usable_memory_bytes
    lean = price_pins(pr, {**fixed, "tp": tp, "pp": 1, "recompute": "full", "zero": 3})
    assert not lean.estimate.fits and need <= lean.estimate.memory_per_gpu_bytes * (1 + 1e-9)


def test_pruning_is_safe_on_a_memory_tight_problem() -> None:
    """Full-size and memory-bound: the branch and bound equals evaluating every (config, split) unpruned."""
    from dnnplace.models.llm.evaluation.step import evaluate_batch
    from dnnplace.models.llm.solvers.search import as_candidates, base_columns, splits

    a = llama("8b")
    pr = problem(a, 8, 16, seq=8192)
    plan = search(pr)
    best = math.inf
    cols = base_columns(pr, {})
    for k in range(len(cols["tp"])):
        s = splits(a.num_layers, int(cols["pp"][k]), int(cols["vp"][k])).astype(float)
        if not len(s):
            continue  # no layer split gives every virtual stage a layer
        res = evaluate_batch(pr, as_candidates(cols, np.full(len(s), k), s))
        if res.fits.any():
            best = min(best, float(res.step[res.fits].min()))
    assert plan.estimate.step_time_s == pytest.approx(best, rel=1e-12)


@pytest.mark.timing
@pytest.mark.parametrize("limit", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("shape", ["deep", "many-microbatches"])
def test_time_limit_is_honoured_on_a_long_search(limit: float, shape: str) -> None:
    """Searches of a minute or more stop within 10 % + 1 s of --time-limit and never say optimal; with no
    fitting plan yet, they say so in one line.  "deep": 1,024 layers, tens of thousands of configurations
    (long split lists: the bounding pass alone takes far longer than the limit); "many-microbatches":
    256 micro-batches, pp x vp up to 512, where one pricing of a single candidate used to take seconds."""
    import time

    a = TransformerArch("deep", "llama", 1024, 4096, 14336, 32, 8, 128, 128256)
    prob, fixed = ((problem(a, 128, 128, seq=4096), {"zero": 1}) if shape == "deep" else
                   (problem(a, 512, 4096, seq=2048), {"tp": 8, "cp": 1, "mbs": 1}))
    started = time.perf_counter()
    try:
        plan = search(prob, fixed, time_limit=limit)
        assert plan.status == "time_limit" and not plan.exhaustive
        assert plan.bound <= plan.estimate.step_time_s and 0 <= plan.gap <= 1
    except DnnplaceError as exc:
        assert "time limit" in str(exc)
    assert time.perf_counter() - started <= 1.1 * limit + 1.0


@pytest.mark.parametrize("change,key", [
    ({"num_layers": 2**70}, "num_layers"), ({"num_layers": 10**4}, "num_layers"),
    ({"num_layers": 10**6}, "num_layers"), ({"hidden": 2**40}, "hidden"), ({"vocab": 10**30}, "vocab"),
    ({"heads": 0}, "heads"), ({"head_dim": True}, "head_dim"), ({"rope_theta": float("inf")}, "rope_theta"),
])
def test_input_limits_are_checked_before_any_enumeration(change: dict, key: str) -> None:
    """10**4 layers was a 9999 x 9999 meshgrid (MemoryError), 2**70 a hang: now one line, at once."""
    import time
    from dataclasses import replace

    a = replace(llama("8b"), **change)
    started = time.perf_counter()
    with pytest.raises(DnnplaceError, match=key) as info:
        search(problem(a, 64, 128))
    assert time.perf_counter() - started < 3.0 and "\n" not in str(info.value)


@pytest.mark.parametrize("gpus,gbs,key", [(10**12, 128, "gpus"), (64, 2**40, "global_batch"), (2**21, 128, "gpus")])
def test_cluster_and_batch_limits(gpus: int, gbs: int, key: str) -> None:
    with pytest.raises(DnnplaceError, match=key):
        search(problem(llama("8b"), gpus, gbs))


def test_a_space_too_large_to_search_is_refused_before_it_is_built() -> None:
    a = TransformerArch("deep", "llama", 1024, 4096, 14336, 32, 8, 128, 128256)
    with pytest.raises(DnnplaceError, match="pin some knobs"):
        search(problem(a, 4096, 4096, seq=4096))


def test_a_long_schedule_evaluation_stops_at_the_deadline() -> None:
    """One pricing of a deep schedule can outlast a time limit: the recurrence reads the caller's clock."""
    import numpy as np

    from dnnplace.models.llm.evaluation import schedule

    fwd, bwd = np.ones((2, 32)), 2 * np.ones((2, 32))
    calls = {"n": 0}

    def over() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    with pytest.raises(schedule.OutOfTime), schedule.deadline(over):
        schedule.makespan(8, 4, 64, fwd, bwd, np.zeros(2))
    with schedule.deadline(None):
        assert np.isfinite(schedule.makespan(8, 4, 64, fwd, bwd, np.zeros(2))).all()


_VALUE = st.integers(-3, 3) | st.sampled_from([0, 2**21, 2**40, -(2**40)])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.lists(st.lists(_VALUE, min_size=n, max_size=n), min_size=1,
                                                     max_size=12)))
def test_row_groups_equal_numpy_unique_rows(cols: list[list[int]]) -> None:
    """The search's grouping of rows by their knobs is np.unique(axis=0): the same first rows and groups, in
    the same (lexicographic) order, through the re-ranking its mixed-radix code does near overflow."""
    from dnnplace.models.llm.solvers.grid import row_groups

    arrays = [np.asarray(c, dtype=np.int64) for c in cols]
    _, first, back = np.unique(np.stack(arrays, axis=1), axis=0, return_index=True, return_inverse=True)
    got_first, got_back = row_groups(arrays)
    assert got_first.tolist() == first.tolist()
    assert got_back.tolist() == back.reshape(-1).tolist()


def test_a_model_no_layout_can_hold_is_refused_by_memory_not_sent_to_pin_knobs() -> None:
    """Qwen3-Coder-480B-A35B on 32 GB200s: the search could not expand every expert layout and said "pin some
    knobs (--fix ep=...,etp=...)", though its gradients and optimizer state alone need 240 GB per GPU whatever
    the layout: the refusal names that floor instead."""
    from pathlib import Path

    import aiconfigurator_core

    import dnnplace

    cfg = Path(aiconfigurator_core.__file__).parent / "model_configs" / \
        "Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json"
    pr = dnnplace.load_llm(cfg, gpus=32, seq_len=4096, global_batch=256, device="gb200", precision="fp8-cs")
    with pytest.raises(DnnplaceError, match=r"each needs at least 24\d\.\d GB for its gradients and optimizer state "
                                            r"alone") as info:
        search(pr)
    assert "\n" not in str(info.value) and "pin some knobs" not in str(info.value)


@pytest.mark.parametrize(("path", "gpus", "device"), [("examples/llm/llama3.1-70b.json", 64, "h100"),
                                                      ("src/dnnplace/models/llm/published/qwen3-30b-a3b.json", 16,
                                                       "h100"),
                                                      ("src/dnnplace/models/llm/published/deepseek-v3.json", 256,
                                                       "b200")])
def test_the_state_floor_is_below_every_plan(path: str, gpus: int, device: str) -> None:
    """The floor the refusal proves is a bound: no plan (nor runner-up) the search finds needs less."""
    from pathlib import Path

    import dnnplace
    from dnnplace.models.llm.evaluation import memory
    from dnnplace.models.llm.solvers.bounds import state_floor

    root = Path(__file__).resolve().parents[3]
    pr = dnnplace.load_llm(root / path, gpus=gpus, seq_len=4096, global_batch=256, device=device)
    plan, runners = search_with_runner_ups(pr, time_limit=20, count=3)
    floor = state_floor(pr, memory.GRAD_BYTES)
    assert runners and 0 < floor <= plan.estimate.memory_per_gpu_bytes
    assert all(floor <= r.estimate.memory_per_gpu_bytes for r in runners)
