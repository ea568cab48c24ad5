"""Catalogue devices price operators on fake tensors: nothing executes, meta-built models cost what CPU-built do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, example_module

torch = pytest.importorskip("torch")

from dnnplace.errors import DnnplaceError  # noqa: E402
from dnnplace.frontends.torch_model.capture import capture  # noqa: E402
from dnnplace.frontends.torch_model.profile import build_workload_dict  # noqa: E402


def _factory(file: str, name: str):
    return getattr(example_module(file), name)


def _profile(built: tuple, device: str = "a100", training: bool = False, **kw) -> dict:
    model, args = built[0], built[1]
    cap = capture(model, args, kwargs=built[2] if len(built) > 2 else None)
    return build_workload_dict(cap, cap.inputs, training=training, device=device, accelerators=4, cpus=1,
                               repeats=1, **kw)


def _costs(doc: dict) -> dict:
    """Everything a solver reads (and the per-node figures behind it); not the names of hoisted fx nodes."""
    return {"nodes": doc["nodes"], "edges": doc["edges"], "memory": doc["maxSizePerFPGA"]}


@pytest.mark.parametrize(("file", "name", "training", "views"), [
    ("transformer_encoder", "build", False, True),
    ("tied_lm", "build", True, False),  # embedding, layer norms and linears only
    ("hf_transformers", "llama_tiny", False, True),
    ("hf_transformers", "llama_tiny", True, True),
])
def test_a_meta_model_costs_what_the_cpu_model_costs(file, name, training, views):
    if file == "hf_transformers":
        pytest.importorskip("transformers")
    factory = _factory(file, name)
    torch.manual_seed(0)
    on_cpu = _profile(factory(), training=training)
    with torch.device("meta"):
        built = factory()
    assert all(p.is_meta for p in built[0].parameters())
    on_meta = _profile(built, training=training)
    assert _costs(on_meta) == _costs(on_cpu)
    fwd = [n for n in on_meta["nodes"] if not n["isBackwardNode"]]
    # views are still recognised without data pointers (a meta tensor's are all 0), and only views: free nodes,
    # or replicated into their readers (which only views are)
    assert views == bool(any(n["metadataOnly"] for n in fwd) or on_meta["dnnplace"]["replicatedViews"])
    assert not all(n["metadataOnly"] for n in fwd)
    assert all(n["fpgaLatency"] > 0 and n["flops"] > 0 for n in fwd if n["name"].startswith(("linear", "addmm")))


@pytest.mark.slow  # a whole dnnplace process that imports torch
def test_host_refuses_a_meta_model_in_one_line(tmp_path):
    out = tmp_path / "w.json"
    proc = subprocess.run([sys.executable, "-m", "dnnplace", "profile", "examples/meta_models.py:tied_lm",
                           "--device", "host", "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "meta device" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


@torch.library.custom_op("dnnplace_test::refuse_to_run", mutates_args=())
def refuse_to_run(x: torch.Tensor) -> torch.Tensor:
    """A kernel that fails if it ever runs: profiling for a catalogue device must not run it."""
    raise RuntimeError("a kernel was executed")


@refuse_to_run.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Guarded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(refuse_to_run(self.fc1(x)).view(-1, 64))


@pytest.mark.parametrize("training", [False, True])
def test_a_catalogue_profile_executes_no_kernel(training):
    doc = _profile((Guarded(), (torch.randn(16, 64),)), training=training)
    names = [n["name"] for n in doc["nodes"] if not n["isBackwardNode"]]
    assert names == ["linear", "refuse_to_run", "linear_1"] and doc["dnnplace"]["replicatedViews"] == ["view"]
    fc = [n for n in doc["nodes"] if n["name"] == "linear"][0]
    assert fc["flops"] == 2 * 16 * 64 * 64 and fc["fpgaLatency"] > 0 and fc["cpuLatency"] > 0
    if training:  # the activation stashed for backward is counted without running anything
        assert fc["size"] == 4 * fc["paramBytes"] + fc["outputBytes"]
    with pytest.raises(RuntimeError, match="a kernel was executed"):
        _profile((Guarded(), (torch.randn(16, 64),)), device="host", link=(0.1, 1e9))


def test_cpu_latency_is_the_roofline_of_the_cpu_entry(tmp_path):
    built = (torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()), (torch.randn(32, 256),))
    default = _profile(built)
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps({"cpu": {"peak_flops": 1e9, "mem_bw": 1e9}}))
    slow = _profile(built, devices_file=str(devices))
    assert [n["fpgaLatency"] for n in slow["nodes"]] == [n["fpgaLatency"] for n in default["nodes"]]
    lin = slow["nodes"][0]
    assert lin["cpuLatency"] == pytest.approx(1e3 * lin["flops"] / (1e9 * 0.6) + 0.005)
    assert lin["cpuLatency"] > 10 * default["nodes"][0]["cpuLatency"]
    with pytest.raises(DnnplaceError, match="unknown device 'cpu'"):
        _profile(built, device="cpu")
