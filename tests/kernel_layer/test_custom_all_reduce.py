"""The engines' own TP all-reduce tables (``custom_allreduce_perf``): every kept row comes back verbatim and
says ``measured``; without a table the price is NCCL's ring (measured or roofline), said so."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.measured import family
from dnnplace.kernels.tables import FRAMEWORK_ORDER, SYSTEMS, data_root, read_columns

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")

DEVICE: dict[str, str] = {}
for _dev, _sys in SYSTEMS.items():
    DEVICE.setdefault(_sys, _dev)


@pytest.mark.parametrize("system", sorted(set(SYSTEMS.values())))
@pytest.mark.parametrize("framework", FRAMEWORK_ORDER)
def test_custom_all_reduce_points_come_back_exactly(system: str, framework: str) -> None:
    fam = family(system, "custom_all_reduce", framework)
    if fam is None:
        pytest.skip(f"{system} has no {framework} custom all-reduce table")
    kc = kernel_costs(DEVICE[system], framework)
    cols = read_columns(fam.table[4], ("framework", "kernel_source", "allreduce_dtype", "num_gpus", "message_size",
                                       "latency"))
    kept = dict(fam.sources)[framework]
    rows = np.flatnonzero(cols["kernel_source"] == kept)
    assert len(rows) >= 20
    nbytes = cols["message_size"][rows] * 2.0  # bfloat16 elements
    p = kc.all_reduce_custom(nbytes, cols["num_gpus"][rows])
    assert set(p.sources()) == {"measured"}
    assert p.seconds.tolist() == (cols["latency"][rows] * 1e-3).tolist()


def test_between_points_is_interpolated_and_monotone_in_size() -> None:
    kc = kernel_costs("h100", "vllm")
    sizes = np.geomspace(4096, 4e6, 40)
    p = kc.all_reduce_custom(sizes, 4)
    assert "interpolated" in p.sources()
    assert np.all(np.diff(p.seconds) >= -1e-12)
    assert kc.all_reduce_custom(1e6, 1).seconds.tolist() == 0.0  # one GPU: nothing to reduce


def test_without_a_table_the_price_is_nccls_ring() -> None:
    for kc in (kernel_costs("h100"), kernel_costs("l4", "vllm"), kernel_costs("h100", "vllm", measured=False)):
        own, ring = kc.all_reduce_custom([1e5, 1e7], 4), kc.collective("all_reduce", [1e5, 1e7], 4)
        assert own.seconds.tolist() == ring.seconds.tolist()
        assert own.sources() == ring.sources()
    across = kernel_costs("h100", "trtllm")
    assert across.all_reduce_custom(1e5, 4, "network").sources() == ["roofline"]


def test_small_messages_beat_nccl_on_h100() -> None:
    """The reason the family exists: the engines' one-shot kernels undercut NCCL's ring on small messages."""
    for fw in FRAMEWORK_ORDER:
        kc = kernel_costs("h100", fw)
        own = float(kc.all_reduce_custom(16384, 8).seconds)
        assert own < 0.5 * float(kc.collective("all_reduce", 16384, 8).seconds)
