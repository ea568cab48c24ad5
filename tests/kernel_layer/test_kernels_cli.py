"""`dnnplace kernels`: coverage, one kernel's price with its source, roofline devices, one-line refusals; and
`import dnnplace` stays free of pandas, pyarrow and aiconfigurator."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from cli_runner import run_cli

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.tables import data_root

needs_tables = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")


def test_import_loads_no_table_stack() -> None:
    code = ("import sys, dnnplace, dnnplace.kernels, dnnplace.api, dnnplace.cli.app; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pandas', 'pyarrow', 'aiconfigurator_core')]; "
            "print(','.join(bad))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == ""


@needs_tables
def test_coverage_and_one_gemm_say_measured() -> None:
    res = run_cli(*["kernels", "h100", "--json"])
    assert res.returncode == 0
    doc = json.loads(res.stdout)
    assert doc["system"] == "h100_sxm"
    assert doc["families"]["gemm"]["source"] == "measured" and doc["families"]["p2p"]["source"] == "roofline"
    res = run_cli(*["kernels", "h100", "--gemm", "4096,4096,4096,bf16", "--json"])
    assert res.returncode == 0
    assert json.loads(res.stdout)["source"] == "measured"


@needs_tables
@pytest.mark.parametrize("framework", ["trtllm", "vllm", "sglang"])
def test_every_framework_lists_its_families_on_screen(framework: str) -> None:
    """The engines' own all-reduce has no categorical key: the listing once indexed the first key field of every
    family and stopped there with an internal error."""
    res = run_cli(*["kernels", "h100", "--framework", framework])
    assert res.returncode == 0, res.stderr
    assert "custom_all_reduce: measured" in res.stdout and "fp8_compute_scale: measured" in res.stdout


@pytest.mark.parametrize("device", ["rtx-4090", "l4", "t4", "a10g", "a6000", "rtx-3090", "rtx-5090", "v100",
                                    "mi300x"])
def test_devices_without_tables_are_priced_by_roofline(device: str) -> None:
    kc = kernel_costs(device)
    for p in (kc.gemm([1, 4096], 4096, 4096, "fp16"), kc.decode_attention(8, 4096, 32, 8, 128),
              kc.context_attention(1, 2048, 32, 8, 128), kc.collective("all_reduce", 1e6, 2), kc.p2p(1e6),
              kc.moe(512, 4096, 1024, 2, 8)):
        assert p.worst == "roofline"
        assert np.all(np.isfinite(p.seconds)) and np.all(p.seconds > 0)
    res = run_cli(*["kernels", device])
    assert res.returncode == 0 and "roofline only" in res.stdout


@pytest.mark.parametrize("args, culprit", [
    (["kernels", "h1000"], "unknown device 'h1000'"),
    (["kernels", "h100", "--gemm", "1,2"], "--gemm"),
    (["kernels", "h100", "--gemm", "1,2,-3"], "k must be"),
    (["kernels", "h100", "--gemm", "1,2,3,fp7"], "unknown dtype"),
    (["kernels", "h100", "--collective", "broadcast,10,2"], "unknown op"),
    (["kernels", "h100", "--framework", "tgi"], "--framework"),
])
def test_bad_input_is_one_line(args: list[str], culprit: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2
    assert culprit in res.stderr and len(res.stderr.strip().splitlines()) == 1
    if culprit.startswith("unknown device"):
        assert "h100" in res.stderr and "rtx-4090" in res.stderr


@needs_tables
def test_extrapolation_holds_efficiency_and_interpolation_is_monotone() -> None:
    kc = kernel_costs("h100")
    m = np.array([8192.0, 16384.0, 32768.0, 65536.0, 131072.0])
    p = kc.gemm(m, 8192, 8192)
    assert p.sources()[-1] == "extrapolated" and p.sources()[2] == "measured"
    assert np.all(np.diff(p.seconds) > 0)
    # beyond the table the efficiency of the last measured m is held: time scales with the FLOPs
    assert p.seconds[-1] / p.seconds[2] == pytest.approx(4.0, rel=1e-9)
    seq = np.linspace(1024, 16384, 61)
    s = kc.context_attention(1, seq, 32, 8, 128).seconds
    assert np.all(np.diff(s) >= 0)
