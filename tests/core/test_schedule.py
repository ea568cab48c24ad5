"""The one schedule representation: its generators reproduce the orders the simulators ran before it, and it is
validated, printed and saved the same way for every user."""

from __future__ import annotations

import json

import pytest

from dnnplace.core.schedule import (
    Action,
    Schedule,
    by_name,
    gpipe,
    interleaved_1f1b,
    one_f_one_b,
)
from dnnplace.errors import DnnplaceError


def legacy_device_order(schedule: str, n: int, training: bool, after: int) -> list[tuple[str, int]]:
    """The paper simulator's per-device order before the shared representation (kept as the oracle)."""
    if not training:
        return [("F", m) for m in range(n)]
    if schedule == "gpipe":
        return [("F", m) for m in range(n)] + [("B", m) for m in range(n)]
    warm = min(after, n)
    seq = [("F", m) for m in range(warm)]
    for m in range(n - warm):
        seq += [("F", warm + m), ("B", m)]
    seq += [("B", m) for m in range(n - warm, n)]
    return seq


def legacy_rank_order(rank: int, pp: int, vp: int, m: int) -> list[tuple[bool, int, int]]:
    """The LLM simulator's Megatron issue order before the shared representation (kept as the oracle)."""
    total = m * vp
    warmup = min((pp - rank - 1) * 2 + (vp - 1) * pp, total) if vp > 1 else min(pp - rank - 1, total)

    def forward(k: int) -> tuple[bool, int, int]:
        group, within = divmod(k, pp * vp)
        return False, group * pp + within % pp, within // pp

    def backward(k: int) -> tuple[bool, int, int]:
        group, within = divmod(k, pp * vp)
        return True, group * pp + within % pp, vp - 1 - within // pp

    order = [forward(k) for k in range(warmup)]
    for i in range(total - warmup):
        order.append(forward(warmup + i))
        order.append(backward(i))
    order.extend(backward(k) for k in range(total - warmup, total))
    return order


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("training", [True, False])
def test_paper_generators_reproduce_the_old_device_order(schedule, training):
    for ranks in range(1, 6):
        for n in range(1, 11):
            after = [(3 * r + n) % 7 for r in range(ranks)]  # DAG depths need not be a chain's
            s = by_name(schedule, ranks, n, after=after, training=training).validate()
            for r in range(ranks):
                got = [(a.kind, a.microbatch) for a in s.ranks[r]]
                assert got == legacy_device_order(schedule, n, training, after[r]), (schedule, ranks, n, r)
                assert all(a.chunk == 0 for a in s.ranks[r])


def test_interleaved_generator_reproduces_the_old_rank_order():
    for pp in range(1, 7):
        for vp in range(1, 5):
            for m in range(1, 13):
                if vp > 1 and m % pp:
                    continue
                s = interleaved_1f1b(pp, vp, m).validate()
                for r in range(pp):
                    got = [(a.kind == "B", a.microbatch, a.chunk) for a in s.ranks[r]]
                    assert got == legacy_rank_order(r, pp, vp, m), (pp, vp, m, r)


def test_the_llm_evaluator_and_simulator_read_the_shared_order():
    from dnnplace.models.llm.evaluation.schedule import megatron_order
    from dnnplace.models.llm.interleaved import rank_order

    for pp, vp, m in [(1, 1, 3), (3, 1, 5), (2, 2, 4), (4, 3, 8), (3, 4, 9)]:
        s = interleaved_1f1b(pp, vp, m)
        for r in range(pp):
            expected = [(a.kind == "B", a.microbatch, a.chunk) for a in s.ranks[r]]
            assert rank_order(r, pp, vp, m) == megatron_order(r, pp, vp, m) == expected
            assert expected == legacy_rank_order(r, pp, vp, m)


def test_one_f_one_b_is_interleaved_with_one_chunk():
    for pp in range(1, 6):
        for m in range(1, 9):
            assert one_f_one_b(pp, m).ranks == interleaved_1f1b(pp, 1, m).ranks


def test_in_flight_is_what_the_schedule_keeps():
    assert [gpipe(3, 5).in_flight(r) for r in range(3)] == [5, 5, 5]
    assert [one_f_one_b(4, 8).in_flight(r) for r in range(4)] == [4, 3, 2, 1]
    assert [one_f_one_b(4, 2).in_flight(r) for r in range(4)] == [2, 2, 2, 1]
    assert one_f_one_b(2, 4, training=False).in_flight(0) == 0


def test_text_and_json_round_trip():
    s = interleaved_1f1b(2, 2, 4)
    back = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    lines = s.text().splitlines()
    assert lines[0] == "interleaved 1f1b: 2 ranks, 4 micro-batches, 2 chunks"
    assert lines[1].split()[2:6] == ["F0", "F1", "F0.1", "F1.1"]
    assert len(lines) == 3
    assert str(Action("B", 3, 1)) == "B3.1" and Action.parse("W12") == Action("W", 12, 0)


@pytest.mark.parametrize(("ranks", "message"), [
    ([["F0", "B0", "F1"]], "never runs B1"),
    ([["B0", "F0", "F1", "B1"]], "runs B0 before F0"),
    ([["F0", "F0", "F1"]], "runs F0 twice"),
    ([["F0", "F2"]], "outside 2 micro-batches"),
    ([["F0", "F1", "B0", "B1"], ["F0", "F1"]], "rank 1 never runs B0"),
    ([["F0", "F1", "B1", "W0"]], "runs W0 before B0"),
    ([["F0", "X1"]], "written like F3"),
    ([[3]], "written like F3"),
])
def test_malformed_schedules_are_refused_in_one_line(ranks, message):
    with pytest.raises(DnnplaceError, match=message) as e:
        Schedule.from_dict({"name": "s", "microbatches": 2, "chunks": 1, "ranks": ranks})
    assert "\n" not in str(e.value)


def test_generators_refuse_what_no_pipeline_runs():
    with pytest.raises(DnnplaceError, match="multiple of pp"):
        interleaved_1f1b(4, 2, 6)
    with pytest.raises(DnnplaceError, match="microbatches of at least 1"):
        one_f_one_b(2, 0)
    with pytest.raises(DnnplaceError, match="unknown schedule"):
        by_name("zb", 2, 2)
    with pytest.raises(DnnplaceError, match="each of the 2 ranks"):
        one_f_one_b(2, 2, after=[1])
    for bad in (None, {"ranks": "F0"}, {"ranks": [], "microbatches": True}, {"ranks": ["F0"], "microbatches": 1}):
        with pytest.raises(DnnplaceError):
            Schedule.from_dict(bad)


def chain_makespan(s: Schedule, fwd: list[float], bwd: list[float]) -> float:
    """Time ``s`` on a chain of its ranks: each action waits for its rank and for its input's producer."""
    done: dict[tuple[int, Action], float] = {}
    position, free = [0] * len(s.ranks), [0.0] * len(s.ranks)
    last = len(s.ranks) - 1
    while any(p < len(seq) for p, seq in zip(position, s.ranks)):
        for r, seq in enumerate(s.ranks):
            while position[r] < len(seq):
                a = seq[position[r]]
                deps = [(r - 1, a)] if a.kind == "F" and r > 0 else []
                if a.kind == "B":
                    deps = [(r, a._replace(kind="F"))] + ([(r + 1, a)] if r < last else [])
                if any(d not in done for d in deps):
                    break
                start = max([free[r]] + [done[d] for d in deps])
                free[r] = done[(r, a)] = start + (fwd[r] if a.kind == "F" else bwd[r])
                position[r] += 1
    return max(free)


def test_piper_stream_is_one_f_one_b_over_its_stages():
    """Piper's in-flight counts are the shared 1F1B order's, and its closed-form makespan is that order timed
    with each stage's time per sample as one pass."""
    from pathlib import Path

    import dnnplace
    from dnnplace.models.piper.piper_json import load_piper
    from dnnplace.models.piper.simulation import simulate_piper
    from dnnplace.models.piper.spec import PiperPlan, PiperStage

    inst = load_piper(Path(dnnplace.__file__).parent / "data" / "piper" / "inputs" / "bert32a100.json")
    inst = inst.with_overrides(devices=8, memory=64 * 2**30)
    cuts = [0, 3, 9, 14, 20, 24, 29, 33, inst.n]  # contiguous in the node order, uneven on purpose
    plan = PiperPlan([PiperStage(list(range(a, b)), 1, 1, {v: inst.tmpcs[v][1][0].id for v in range(a, b)})
                      for a, b in zip(cuts, cuts[1:])])
    for m in (1, 5, 16):
        sim = simulate_piper(inst, plan, microbatches=m)
        assert sim.evaluation.feasible
        order = sim.order.validate()
        assert len(order.ranks) == len(plan.stages)
        if m >= len(plan.stages):
            assert [order.in_flight(i) for i in range(len(sim.stages))] == [r["in_flight"] for r in sim.stages]
        times = [r["time_per_sample"] for r in sim.stages]
        assert chain_makespan(order, times, [0.0] * len(times)) == pytest.approx(sim.makespan, rel=1e-12)
