"""The systems catalogue: datasheet figures, sources, and the DGX H100 parity with ``--device h100``."""

from __future__ import annotations

import dataclasses

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.model.catalogue import CATALOGUE, MIB
from dnnplace.model.systems import PENDING_DEVICES, SYSTEMS, system_device, system_spec

PRICED = [f.name for f in dataclasses.fields(CATALOGUE["h100"]) if f.name != "sources"]


@pytest.mark.parametrize("name,gpu", [("dgx-h100", "h100"), ("dgx-h200", "h200")])
def test_dgx_hopper_prices_like_the_catalogue_gpu(name: str, gpu: str) -> None:
    dev, cat = system_device(system_spec(name)), CATALOGUE[gpu]
    assert {f: getattr(dev, f) for f in PRICED} == {f: getattr(cat, f) for f in PRICED}


def test_nvl72_domain_is_the_rack_not_the_tray() -> None:
    s = system_spec("gb200-nvl72")
    assert (s.gpus_per_node, s.nvlink_domain, s.job_domain) == (4, 72, 64)  # 16 of the 18 trays per job
    assert system_spec("dgx-h100").job_domain == 8
    assert s.nvlink_bandwidth == 900e9  # 130 TB/s / 72 ~ 1.8 TB/s bidirectional, halved
    assert s.internode_bandwidth == 50e9  # one 400 Gb/s ConnectX-7 per GPU
    assert s.usable_memory_bytes == 189471 * MIB  # nvidia-smi on a GB200 tray


def test_gb200_stand_in_uses_its_own_clocks_and_says_so() -> None:
    dev = system_device(system_spec("gb200-nvl72"))
    assert dev.peak("bf16") == 2.5e15 and dev.peak("fp8") == 5e15 and dev.peak("fp4") == 10e15
    assert dev.hbm_bandwidth == 8e12 and dev.gemm_fraction == CATALOGUE["b200"].gemm_fraction
    assert "PENDING" in dev.sources["stand_in"]


def test_blackwell_ultra_nics_and_fp4() -> None:
    assert system_spec("dgx-b300").internode_bandwidth == 100e9  # ConnectX-8, 800 Gb/s
    assert system_spec("gb300-nvl72").internode_bandwidth == 100e9
    assert system_device(system_spec("gb300-nvl72")).peak("fp4") == 15e15  # 1,080 PF dense / 72
    assert system_device(system_spec("dgx-b300")).peak("fp4") == 13.5e15  # 108 PF dense / 8
    assert system_device(system_spec("dgx-b200")).peak("fp4") == 9e15  # 144 PF sparse / 8 / 2


def test_b200_usable_memory_is_the_cuda_total() -> None:
    assert system_spec("dgx-b200").usable_memory_bytes == 183359 * MIB


def test_every_figure_has_a_source() -> None:
    for s in SYSTEMS.values():
        for f in ("gpu", "gpus_per_node", "nvlink_domain", "nvlink_bandwidth", "nics_per_gpu", "nic_bandwidth",
                  "usable_memory_bytes", "segment_gpus"):
            assert s.sources.get(f), (s.name, f)
        assert s.gpu in CATALOGUE or s.gpu in PENDING_DEVICES
    for p in PENDING_DEVICES.values():
        assert set(p.sources) == {"peak_flops", "hbm_bandwidth", "memory_bytes"}


def test_unknown_system_is_one_line() -> None:
    with pytest.raises(DnnplaceError, match="unknown system 'dgx-a42'.*gb200-nvl72") as e:
        system_spec("dgx-a42")
    assert "\n" not in str(e.value)
    assert system_spec("GB200-NVL72").name == "gb200-nvl72"
