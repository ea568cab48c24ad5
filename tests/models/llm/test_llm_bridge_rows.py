"""benchmarks/llm_bridge_rows.py: every published Megatron-Bridge row parses and is priced or refused in one line.

No assertion on the errors: the rows are a check of the model, not held in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dnnplace.errors import DnnplaceError

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "llm_bridge_rows.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llm_bridge_rows", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("llm_bridge_rows", mod)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


def test_rows_are_unique_and_well_formed() -> None:
    keys = [(r.release, r.system, r.model, r.precision, r.tp, r.pp, r.cp, r.vp, r.mbs) for r in BENCH.ROWS]
    assert len(keys) == len(set(keys)) == len(BENCH.ROWS) >= 80
    for r in BENCH.ROWS:
        assert r.gpus % (r.tp * r.pp * r.cp) == 0 and r.recipe and r.measured_s > 0


def test_measured_step_hand_computed() -> None:
    row = next(r for r in BENCH.ROWS if r.release == "26.04.01" and r.system == "GB200" and r.model == "70b"
               and r.precision == "MXFP8")
    assert row.measured_s == pytest.approx(256 * 8192 / (3712 * 64))  # 8.83 s


@pytest.mark.parametrize("row", BENCH.ROWS, ids=lambda r: f"{r.release}-{r.system}-{r.model}-{r.precision}")
def test_every_row_is_priced_or_refused_in_one_line(row: object) -> None:
    try:
        _, est = BENCH.price(row)
    except DnnplaceError as exc:
        assert "\n" not in str(exc)
    else:
        assert est.step_time_s > 0 and est.memory_per_gpu_bytes > 0
    line, _, _ = BENCH.run_row(row)
    assert line.startswith("|") and "\n" not in line


def test_recipe_of_each_release() -> None:
    # FP8 / FP8-CS: current scaling, every layer; NVFP4: every layer, FP4 parameters from 26.04.01 (#3364).
    recipes = {(r.release, r.precision): r.recipe for r in BENCH.ROWS}
    assert recipes[("26.06", "FP8")] == recipes[("25.11", "FP8-CS")] == "fp8-cs-all"
    assert recipes[("26.04.01", "NVFP4")] == recipes[("26.06", "NVFP4")] == "nvfp4-fp4p"
    assert recipes[("26.04", "NVFP4")] == recipes[("26.02", "NVFP4")] == "nvfp4-all"
    assert recipes[("25.09", "FP8-MX")] == recipes[("26.04.01", "MXFP8")] == "mxfp8"


def test_405b_pp16_vp8_leaves_its_ends_to_embedding_and_loss() -> None:
    row = next(r for r in BENCH.ROWS if r.model == "405b" and r.pp == 16 and r.vp == 8)
    split = BENCH.config_of(row, BENCH.arch_of("405b")).layers_per_stage
    assert split == (0,) + (1,) * 126 + (0,)
