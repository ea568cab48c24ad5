"""The roofline's prefill-attention fraction for cards without tables is recomputed here from the measured
tables it cites (catalogue_inference.ATTN_TABLE_EFFICIENCY): a constant that says it is a measurement must be
that measurement."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.core.catalogue import ROOFLINE_DEFAULTS, device_spec
from dnnplace.core.catalogue_inference import ATTN_TABLE_EFFICIENCY
from dnnplace.kernels import roofline as rl
from dnnplace.kernels.costs import kernel_costs
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import SYSTEMS


@pytest.mark.parametrize("gpu", sorted(ATTN_TABLE_EFFICIENCY))
def test_each_systems_efficiency_is_its_tables(gpu: str) -> None:
    fam = family(SYSTEMS[gpu], "context_attention")
    if fam is None:
        pytest.skip(f"{gpu}: no context-attention table in this aiconfigurator-core")
    grid = next(g for k, g in fam.grids.items() if k[0] == 128 and k[1] == 0 and k[2] == "bfloat16"
                and k[3] == "bfloat16")
    idx = np.argwhere(np.isfinite(grid.values))
    b, s, h, kvh = (grid.axes[j][idx[:, j]] for j in range(4))
    eff = rl.sol_attention_context(b, s, h, kvh, 128, device_spec(gpu), 0, 2.0) / grid.values[tuple(idx.T)]
    assert round(float(np.median(eff[s >= 4096])), 3) == ATTN_TABLE_EFFICIENCY[gpu]


def test_the_default_is_their_median_and_cards_without_a_figure_take_it() -> None:
    v = sorted(ATTN_TABLE_EFFICIENCY.values())
    assert ROOFLINE_DEFAULTS.attn_fraction == round((v[4] + v[5]) / 2, 3) == 0.466
    assert kernel_costs("l4").spec.attn_fwd_fraction == 0.466
    assert kernel_costs("rtx-4090").spec.attn_bwd_fraction == ROOFLINE_DEFAULTS.gemm_fraction
    assert kernel_costs("h100").spec.attn_fwd_fraction == device_spec("h100").attn_fwd_fraction  # its own figure
