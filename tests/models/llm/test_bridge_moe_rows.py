"""benchmarks/llm_bridge_moe_rows.py: every Megatron-Bridge MoE row parses and evaluates (no assertion on the
errors: the table is a check, not a target), and its helpers against hand-computed values."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from dnnplace.models.llm.evaluation.moe import expert_memory

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "llm_bridge_moe_rows.py"
_SPEC = importlib.util.spec_from_file_location("llm_bridge_moe_rows", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules["llm_bridge_moe_rows"] = bench
_SPEC.loader.exec_module(bench)


def test_every_row_parses_and_evaluates() -> None:
    results = [bench.price(r) for r in bench.BRIDGE_ROWS]
    assert len(results) == 129
    for res in results:
        if bench.unpriced_reason(res.row) is None:  # only the declared rows (25.09: token drop, no precision)
            assert res.predicted_s is not None and res.predicted_s > 0, (res.row, res.reason)
            assert res.fits is not None
        else:
            assert res.predicted_s is None and res.reason
    assert sum(res.predicted_s is None for res in results) == 9
    for name, a, b, _ in bench.order_checks(results):
        assert name and a.row.release == b.row.release
    for _name, a, b, _ in bench.cross_release_checks(results):
        assert abs(bench.RELEASES.index(a.row.release) - bench.RELEASES.index(b.row.release)) == 1
        assert (a.row.model, a.row.system, a.row.gpus, a.row.global_batch) == (b.row.model, b.row.system, b.row.gpus,
                                                                                b.row.global_batch)


def test_measured_step_is_tokens_over_throughput() -> None:
    r = next(r for r in bench.BRIDGE_ROWS if r.release == "26.08" and r.model == "deepseek-v3" and r.system == "gb200")
    assert r.measured_s == pytest.approx(4096 * 4096 / (4912 * 256))  # 13.343 s


def test_recipe_pipeline_splits() -> None:
    r = next(r for r in bench.BRIDGE_ROWS if r.release == "26.06" and r.model == "deepseek-v3" and r.system == "gb300")
    assert bench.layers_per_stage(r, 61) == ((4,) * 15 + (1,), False)  # Et*4|(t*4|)*14tmL
    q = next(r for r in bench.BRIDGE_ROWS if r.release == "26.06" and r.model == "qwen3-235b-a22b"
             and r.system == "gb200")  # PP8 VP3: 96 slots (94 layers + embedding + loss) / 24 = 4
    assert bench.layers_per_stage(q, 94) == ((3,) + (4,) * 22 + (3,), False)
    g = next(r for r in bench.BRIDGE_ROWS if r.model == "gpt-oss-120b" and r.pp == 4)
    assert bench.layers_per_stage(g, 36) == ((9,) * 4, False)


def test_expert_gradients_take_the_buffer_dtype() -> None:
    params, edp = np.array([1e9]), np.array([4.0])
    assert expert_memory(params, edp, np.array([True]))["gradients"][0] == 4e9  # fp32 main grads
    assert expert_memory(params, edp, np.array([True]), grad_bytes=2.0)["gradients"][0] == 2e9
