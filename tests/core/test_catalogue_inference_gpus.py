"""The inference GPUs of the hardware catalogue: sourced figures, aliases, and the existing entries unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from dnnplace.core.catalogue import (
    CATALOGUE,
    DEVICE_ALIASES,
    MIB,
    ROOFLINE_DEFAULTS,
    DeviceSpec,
    device_names,
    device_spec,
)
from dnnplace.errors import DnnplaceError

NEW = ("a100-40g", "h100-pcie", "gh200", "l40s", "l4", "a10g", "a6000", "rtx-pro-6000", "rtx-5090", "rtx-4090",
       "rtx-3090", "rtx-3060", "mi300x", "b60")
FRACTIONS = ("gemm_fraction", "attn_fwd_fraction", "attn_bwd_fraction", "hbm_fraction", "nvlink_fraction",
             "internode_fraction")
PRECISIONS = {"fp16", "bf16", "fp8", "fp4", "int8", "int4"}


def _defaulted(spec: DeviceSpec, name: str) -> bool:
    f = next(f for f in dataclasses.fields(DeviceSpec) if f.name == name)
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return getattr(spec, name) == default


@pytest.mark.parametrize("name", NEW)
def test_every_new_figure_has_a_source(name: str) -> None:
    spec = device_spec(name)
    assert spec.name == name
    for f in dataclasses.fields(DeviceSpec):
        if f.name in ("name", "sources") or _defaulted(spec, f.name) or getattr(spec, f.name) is None:
            continue
        assert spec.sources.get(f.name), (name, f.name)
    for f in ("peak_flops", "hbm_bandwidth", "memory_bytes", "usable_memory_bytes", "sm_count", "gemm_tile",
              "pcie_bandwidth", "nvlink_bandwidth", "nvlink"):
        assert spec.sources.get(f), (name, f)


@pytest.mark.parametrize("name", NEW)
def test_new_figures_are_sane(name: str) -> None:
    spec = device_spec(name)
    assert spec.peak_flops and set(spec.peak_flops) <= PRECISIONS
    assert all(v > 0 for v in spec.peak_flops.values())
    assert spec.hbm_bandwidth > 0 and spec.memory_bytes > 0 and spec.sm_count > 0 and spec.pcie_bandwidth > 0
    assert 0 < spec.usable_memory_bytes <= spec.memory_bytes * 1.05
    if spec.nvlink == "":  # PCIe-only: collectives over PCIe
        assert spec.nvlink_bandwidth == 0.0
    else:
        assert spec.nvlink_bandwidth > 0
    for frac in FRACTIONS:  # a fraction only with its published source
        value = getattr(spec, frac)
        assert value is None or (0 < value <= 1 and spec.sources.get(frac)), (name, frac)


def test_key_datasheet_figures() -> None:
    l40s, l4, r4090, r5090, mi = (device_spec(n) for n in ("l40s", "l4", "rtx-4090", "rtx-5090", "mi300x"))
    assert (l40s.peak("fp16"), l40s.peak("fp8"), l40s.hbm_bandwidth) == (362.05e12, 733e12, 864e9)
    assert (l4.peak("fp16"), l4.peak("fp8"), l4.hbm_bandwidth) == (121e12, 242.5e12, 300e9)
    assert r4090.peak("bf16") == 165.2e12 and "FP32 accumulate" in r4090.sources["peak_flops"]
    assert (r5090.peak("bf16"), r5090.peak("fp4"), r5090.hbm_bandwidth) == (209.5e12, 1676e12, 1792e9)
    assert (mi.peak("bf16"), mi.hbm_bandwidth) == (1307.4e12, 5.3e12)
    assert mi.gemm_fraction is not None and mi.gemm_fraction * mi.peak("bf16") == pytest.approx(668.4e12)
    # the totals CUDA reports (what the engines size their budgets from), below nvidia-smi's
    assert device_spec("l40s").usable_memory_bytes == 44.31 * 2**30 < 46068 * MIB
    assert device_spec("l4").usable_memory_bytes == 22.05 * 2**30 < 23034 * MIB


def test_assumed_figures_say_so() -> None:
    for name in ("a10g", "rtx-3060"):
        assert device_spec(name).sources["peak_flops"].startswith("ASSUMPTION:")
    assert "ASSUMPTION" in ROOFLINE_DEFAULTS.sources["hbm_fraction"]


def test_aliases_resolve() -> None:
    assert device_spec("a100-80g") is CATALOGUE["a100"] is device_spec("A100")
    assert device_spec("h100-sxm") is CATALOGUE["h100"]
    for alias, key in DEVICE_ALIASES.items():
        assert device_spec(alias) is CATALOGUE[key] and alias not in CATALOGUE
    assert set(NEW) <= set(device_names()) and "a100-80g" in device_names(aliases=True)
    assert "a100-80g" not in device_names()


def test_unknown_device_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(DnnplaceError, match="unknown device 'tpu9'") as e:
        device_spec("tpu9")
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in device_names())


def test_existing_entries_keep_their_values() -> None:
    h100, a100 = CATALOGUE["h100"], CATALOGUE["a100"]
    assert h100.peak_flops == {"bf16": 989e12, "fp8": 1979e12}
    assert (h100.hbm_bandwidth, h100.memory_bytes, h100.usable_memory_bytes) == (3.35e12, 80e9, 81559 * MIB)
    assert (h100.nvlink_bandwidth, h100.sm_count, h100.plannable) == (450e9, 132, True)
    assert (a100.peak_flops, a100.memory_bytes, a100.usable_memory_bytes) == ({"bf16": 312e12}, 80e9, 79.15 * 2**30)
    assert CATALOGUE["b200"].peak("fp4") == 9e15 and CATALOGUE["v100"].peak("fp16") == 125e12
    assert h100.pcie_bandwidth == pytest.approx(63.0e9, rel=1e-3) and h100.nvlink == "nvlink4"


def test_roofline_defaults_are_sourced_and_fall_back() -> None:
    d = ROOFLINE_DEFAULTS
    for f in ("gemm_fraction", "hbm_fraction", "pcie_fraction", "pcie_copy_fraction"):
        assert 0 < getattr(d, f) < 1 and d.sources.get(f), f
    assert d.gemm_fraction == 0.781
    assert d.fraction("gemm_fraction", device_spec("l4")) == d.gemm_fraction
    assert d.fraction("gemm_fraction", device_spec("h100")) == CATALOGUE["h100"].gemm_fraction


def test_new_cards_without_measurements_are_not_plannable() -> None:
    assert device_spec("a100-40g").plannable  # every constant from a100's sources
    for name in NEW[1:]:
        assert not device_spec(name).plannable, name
