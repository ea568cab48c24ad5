"""The systems catalogue: datasheet figures, sources, and the DGX H100 parity with ``--device h100``."""

from __future__ import annotations

import dataclasses

import pytest

from dnnplace.core.catalogue import CATALOGUE, MIB
from dnnplace.core.systems import SYSTEMS, system_device, system_spec
from dnnplace.errors import DnnplaceError

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


def test_every_system_prices_like_its_catalogue_gpu() -> None:
    for s in SYSTEMS.values():
        dev, cat = system_device(s), CATALOGUE[s.gpu]
        assert {f: getattr(dev, f) for f in PRICED} == {f: getattr(cat, f) for f in PRICED}, s.name


def test_gb200_has_its_own_clocks_mamf_and_attention() -> None:
    dev = system_device(system_spec("gb200-nvl72"))
    assert dev.peak("bf16") == 2.5e15 and dev.peak("fp8") == 5e15 and dev.peak("fp4") == 10e15
    assert dev.hbm_bandwidth == 8e12  # 576 TB/s / 72
    assert dev.gemm_fraction == pytest.approx(1822.0 / 2500)  # Bekman's MAMF table, GB200 SXM BF16 row
    assert dev.gemm_fraction_for("fp8") == pytest.approx(3615.6 / 5000)  # its FP8 row
    assert dev.attention is not None and "GB200" in dev.sources["attention"]
    assert dev.sm_count == CATALOGUE["b200"].sm_count and "ASSUMPTION" in dev.sources["sm_count"]


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
        assert s.gpu in CATALOGUE


def test_unknown_system_is_one_line() -> None:
    with pytest.raises(DnnplaceError, match="unknown system 'dgx-a42'.*gb200-nvl72") as e:
        system_spec("dgx-a42")
    assert "\n" not in str(e.value)
    assert system_spec("GB200-NVL72").name == "gb200-nvl72"


def test_domain_for_a_job() -> None:
    nvl = system_spec("gb200-nvl72")
    assert (nvl.domain_for(8), nvl.domain_for(72), nvl.domain_for(128)) == (72, 72, 64)
    assert system_spec("dgx-h100").domain_for(2048) == 8


def test_plan_system_matches_device_and_refuses_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from cli_runner import run_cli
    from llm_helpers import EXAMPLES

    base = [EXAMPLES / "llama3.1-8b.json", "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
            "--fix", "tp=1,pp=1,cp=2,mbs=1,recompute=none", "--json"]
    docs = []
    for extra in ([], ["--system", "dgx-h100"]):
        r = run_cli("plan", *base, *extra)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        doc.pop("runtime_s")
        docs.append(doc)
    assert docs[0] == docs[1]
    r = run_cli("plan", *base, "--system", "gb200-nvl72", "--device", "h100")
    assert r.returncode == 2 and "not both" in r.stderr and "Traceback" not in r.stderr
    out = tmp_path / "p.json"
    r = run_cli("plan", *base[:-1], "--system", "gb200-nvl72", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert (doc["cluster"]["device"], doc["cluster"]["gpus_per_node"]) == ("gb200", 72)
    r = run_cli("evaluate", out, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["step_time_s"] == pytest.approx(
        doc["prediction"]["step_time_s"])
