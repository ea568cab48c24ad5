"""The TP all-reduce priced the way each engine dispatches it (catalogue ``TP_ALL_REDUCE``, read in the
engines' sources): its own kernel inside its limits, NCCL's ring outside them and for engines without one."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.tables import data_root
from dnnplace.models.serving.catalogue import TP_ALL_REDUCE
from dnnplace.models.serving.cost import tp_all_reduce

MIB = 1024.0 * 1024.0


def test_vllm_rule_is_its_should_custom_ar() -> None:
    r = TP_ALL_REDUCE["vllm"]
    assert r.custom([MIB, 8 * MIB - 16, 8 * MIB], 4, True).tolist() == [True, True, False]
    assert not r.custom([MIB], 3, True).any()  # world size 3 is not supported
    assert r.custom([MIB], 2, False).all() and not r.custom([MIB], 4, False).any()  # PCIe: 2 GPUs only
    assert not r.custom([MIB], 1, True).any()


def test_trtllm_rule_falls_back_above_its_workspace() -> None:
    r = TP_ALL_REDUCE["trtllm"]
    assert r.custom([64 * MIB, 64 * MIB + 1], 8, True).tolist() == [True, False]
    assert not r.custom([MIB], 2, False).any()


def test_engines_without_a_rule_and_networks_take_nccl() -> None:
    nb = np.array([1e5, 4e6])
    ring = kernel_costs("h100").collective("all_reduce", nb, np.full(2, 4))
    assert tp_all_reduce(kernel_costs("h100"), nb, 4, "nvlink").seconds.tolist() == ring.seconds.tolist()
    net = kernel_costs("h100", "vllm")
    assert tp_all_reduce(net, nb, 4, "network").sources() == ["roofline", "roofline"]


@pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")
def test_h100_small_messages_take_the_engine_kernel_large_ones_nccl() -> None:
    kc = kernel_costs("h100", "vllm")
    nb = np.array([16384.0, 64 * MIB])
    got = tp_all_reduce(kc, nb, 8, "nvlink")
    own, ring = kc.all_reduce_custom(nb, 8), kc.collective("all_reduce", nb, 8)
    assert got.seconds.tolist() == [own.seconds[0], ring.seconds[1]]
    assert got.seconds[0] < ring.seconds[0]
    # an NVLink card on a PCIe-only node: its table (measured over NVLink) does not apply
    pcie = kc.collective("all_reduce", nb, 2, "pcie")
    assert tp_all_reduce(kc, nb, 2, "pcie").seconds.tolist() == pcie.seconds.tolist()
