"""The whole deployment search equals brute force over every deployment on random fleets of <= 6 GPUs.

Brute force: every TP size, every replica as any ordered sequence of same-TP stages (kinds
interleaved or not, TP differing between replicas) that the engine can launch (across nodes: one equal
run of stages per node, vLLM and SGLang only), every contiguous split of the layers, every set
of replicas (GPUs may idle), each priced by ``evaluate_replica``; replicas add.  The search may
restrict its space only where that loses nothing: its plan must reach the brute-force optimum
within the gap it reports, and its bound must hold it.
"""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.models.serving.evaluation import evaluate, evaluate_replica
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.pipeline import launch_refusal
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingProblem, Stage

KINDS = ("t4", "rtx-3060", "l4", "a10g", "a100-40g")
TMP = Path(tempfile.mkdtemp(prefix="dnnplace-brute-"))
#: every problem stays alive: evaluation's layer-time cache keys on id(model), and a freed model's id may be
#: reused by the next example's different model
KEEP: list[ServingProblem] = []


def _model(hidden: int, layers: int) -> Path:
    path = TMP / f"m{hidden}x{layers}.json"
    path.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": hidden * 7 // 2, "num_hidden_layers": layers, "num_attention_heads": hidden // 128,
        "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}))
    return path


def brute_force(p: ServingProblem, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> float:
    """The best deployment by enumeration at ``max_num_seqs`` and ``max_num_batched_tokens`` (the engine's
    defaults when None)."""
    n = p.model.num_layers
    mns, mbt = max_num_seqs or p.engine.max_num_seqs, max_num_batched_tokens or p.engine.max_num_batched_tokens
    keys = sorted({(g.node, g.name) for g in p.fleet.gpus})
    counts = tuple(sum(1 for g in p.fleet.gpus if (g.node, g.name) == k) for k in keys)

    @cache
    def replica_value(seq: tuple[int, ...], tp: int) -> float:
        if launch_refusal(p, [keys[k][0] for k in seq]):  # a layout the engine cannot start is no deployment
            return 0.0
        used = [0] * len(keys)
        stages = []
        for k in seq:
            node, gpu = keys[k]
            stages.append((gpu, node, tuple(range(used[k], used[k] + tp))))
            used[k] += tp
        best = 0.0
        for cuts in itertools.combinations(range(1, n), len(seq) - 1):
            b = (0, *cuts, n)
            r = Replica(tuple(Stage(g, nd, ix, b[i + 1] - b[i]) for i, (g, nd, ix) in enumerate(stages)))
            ev = evaluate_replica(p, r, mns, mbt)
            if ev.fits:
                best = max(best, ev.tokens_per_s)
        return best

    replicas: list[tuple[tuple[int, ...], float]] = []  # (GPUs used per key, value)
    for tp in (1, 2, 4, 8):
        units = [c // tp for c in counts]
        for length in range(1, min(sum(units), n) + 1):
            for seq in itertools.product(range(len(keys)), repeat=length):
                if any(seq.count(k) > units[k] for k in range(len(keys))):
                    continue
                v = replica_value(seq, tp)
                if v > 0:
                    replicas.append((tuple(seq.count(k) * tp for k in range(len(keys))), v))

    @cache
    def best(left: tuple[int, ...]) -> float:
        out = 0.0
        for use, v in replicas:
            if all(u <= c for u, c in zip(use, left)):
                out = max(out, v + best(tuple(c - u for c, u in zip(left, use))))
        return out

    return best(counts)


def fleet_spec(fleet: list[list[tuple[int, str]]], engine: str) -> str:
    """A drawn fleet in --gpus syntax, the T4s swapped for A10Gs where the engine does not run on a T4
    (TensorRT-LLM: Ampere and newer)."""
    swap = {"t4": "a10g"} if engine == "trtllm" else {}
    return ";".join("+".join(f"{c}x{swap.get(k, k)}" for c, k in node) for node in fleet)


fleets = st.lists(st.lists(st.tuples(st.integers(1, 3), st.sampled_from(KINDS)), min_size=1, max_size=2),
                  min_size=1, max_size=2).filter(lambda f: sum(c for node in f for c, _ in node) <= 6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets, st.sampled_from((4096, 8192, 12288)), st.integers(2, 5), st.sampled_from(((512, 128), (2048, 256))),
       st.sampled_from(("vllm", "trtllm", "llama.cpp")))
def test_search_equals_brute_force_on_random_fleets_of_up_to_6_gpus(fleet, hidden, layers, lengths, engine):
    # SGLang is left out: its world-minimum KV rule is priced by evaluate but not by the DP's per-stage check;
    # llama.cpp runs a step through its stages in turn (the DP's sum of stage times, not the slowest one's)
    spec = fleet_spec(fleet, engine)
    isl, osl = lengths
    p = problem(_model(hidden, layers), gpus=spec, isl=isl, osl=osl, max_model_len=4096, engine=engine)
    KEEP.append(p)
    plan = search(p, time_limit=60)
    # the search chooses max_num_seqs and max_num_batched_tokens too: its split, TP and replicas are held against
    # brute force at the limits it chose, and the limits against the engine's defaults (never worse)
    want = brute_force(p, plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
    default = brute_force(p)
    if want <= 0:
        assert plan.status == "infeasible" and not plan.config.replicas
        return
    got = evaluate(p, plan.config).output_tokens_per_s
    assert plan.bound is not None and plan.gap is not None
    assert plan.bound >= want * (1 - 1e-9), (spec, plan.bound, want)
    assert got >= want * (1 - plan.gap) * (1 - 1e-9), (spec, got, want, plan.gap)
    if plan.status == "optimal":
        assert math.isclose(got, want, rel_tol=1e-9), (spec, got, want)
        assert got >= default * (1 - 1e-9), (spec, got, default)
