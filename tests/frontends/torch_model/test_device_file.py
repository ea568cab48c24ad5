"""A device file's rates divide the work: zero, infinite or NaN rates are one-line refusals, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnplace.errors import DnnplaceError
from dnnplace.frontends.torch_model.devices import load_catalogue

GOOD = {"peak_flops": 1e12, "mem_bw": 1e11, "memory": 8e9, "link_bw": 1e9}


@pytest.mark.parametrize("key,value", [("peak_flops", 0), ("mem_bw", 0.0), ("link_bw", 0), ("peak_flops", -1),
                                       ("mem_bw", float("inf")), ("memory", float("nan")), ("link_bw", 1e300)])
def test_a_zero_or_unbounded_rate_is_refused_in_one_line(tmp_path: Path, key: str, value: float) -> None:
    path = tmp_path / "devices.json"
    path.write_text(json.dumps({"slowgpu": {**GOOD, key: value}}))
    with pytest.raises(DnnplaceError, match=f"'{key}' must be a") as info:
        load_catalogue(path)
    assert "\n" not in str(info.value)


def test_zero_memory_and_latency_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "devices.json"
    path.write_text(json.dumps({"slowgpu": {**GOOD, "memory": 0, "link_latency_ms": 0}}))
    assert load_catalogue(path)["slowgpu"]["memory"] == 0.0
