"""A catalogue-device profile runs no kernel on real data, and costs exactly what running the graph would give."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, example_module

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402
from torch._subclasses.functional_tensor import FunctionalTensor  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from dnnplace.frontends.torch_model import values as values_mod  # noqa: E402
from dnnplace.frontends.torch_model.capture import capture  # noqa: E402
from dnnplace.frontends.torch_model.profile import build_workload_dict  # noqa: E402

hf = example_module("hf_transformers")


def _mixtral_1():
    import transformers as tr

    return hf._decoder(tr.MixtralConfig, tr.MixtralForCausalLM, num_local_experts=4, num_experts_per_tok=2,
                       num_hidden_layers=1)


def _holds_data(t: torch.Tensor) -> bool:
    """A tensor with real data: not fake, not meta, not empty -- looking through functionalization's wrappers
    (``capture`` functionalizes graphs with in-place writes on fake tensors, the wrappers reach this mode)."""
    if isinstance(t, FunctionalTensor):
        t = torch._from_functional_tensor(t.elem)
    return not isinstance(t, FakeTensor) and not t.is_meta and t.numel() > 0


class _RealKernels(TorchDispatchMode):
    """Records every operator that reaches a kernel with a real (data-holding) tensor among its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(t, torch.Tensor) and _holds_data(t) for t in tree_leaves((args, kwargs))):
            self.ran.append(str(func))
        return func(*args, **kwargs)


def _profile(built, training: bool) -> dict:
    cap = capture(built[0], built[1], quiet=True)
    return build_workload_dict(cap, cap.inputs, training=training, device="a100", accelerators=2, cpus=1,
                               repeats=1)


@pytest.mark.parametrize("factory", [hf.gpt2_tiny, pytest.param(_mixtral_1, marks=pytest.mark.slow)],
                         ids=["gpt2", "mixtral"])
@pytest.mark.parametrize("training", [False, True])
def test_no_kernel_runs_on_real_data_and_the_costs_are_those_of_running_it(factory, training, monkeypatch):
    built = factory()
    with _RealKernels() as spy:
        estimated = _profile(built, training)
    assert spy.ran == []  # every operator ran on fake tensors only
    with _RealKernels() as spy:
        with torch.no_grad():
            built[0](*built[1])
    assert spy.ran  # the spy does see a real forward pass

    # the executed path: estimate_values' fallback runs the graph for real (kept for data-dependent shapes)
    real_fake_values = values_mod.fake_values

    def no_fake_forward(gm, inputs, grad=False):
        if not grad:
            raise RuntimeError("fake forward refused by the test")
        return real_fake_values(gm, inputs, grad)

    monkeypatch.setattr(values_mod, "fake_values", no_fake_forward)
    with _RealKernels() as spy:
        executed = _profile(built, training)
    assert spy.ran
    assert estimated["nodes"] == executed["nodes"] and estimated["edges"] == executed["edges"]


@pytest.mark.slow
@pytest.mark.parametrize("training", [False, True])
def test_gpt2_small_profiles_in_the_memory_its_weights_take(training):
    """GPT-2 small at its real shape (124 M parameters, 4 x 1,024 tokens): profiling adds no memory to what
    building the model took -- running it would add its 0.8 GB logits alone -- and takes a few CPU seconds."""
    script = (
        "import importlib.util, json, resource, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('hf', {str(EXAMPLES / 'hf_transformers.py')!r})\n"
        "hf = importlib.util.module_from_spec(spec); spec.loader.exec_module(hf)\n"
        "from dnnplace.frontends.torch_model.capture import capture\n"
        "from dnnplace.frontends.torch_model.profile import build_workload_dict\n"
        "model, args = hf.gpt2_small()\n"
        "built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "t0 = time.process_time()\n"
        "cap = capture(model, args, quiet=True)\n"
        f"doc = build_workload_dict(cap, cap.inputs, training={training}, device='a100', accelerators=4, cpus=1)\n"
        "cpu = time.process_time() - t0\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'built_kb': built, 'peak_kb': peak, 'cpu_s': cpu, 'n': len(doc['nodes'])}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["n"] > 200
    logits = 4 * 1024 * 50257 * 4
    assert (got["peak_kb"] - got["built_kb"]) * 1024 < logits / 4
    assert got["cpu_s"] < 20  # about 2 s when the machine is idle: trace, fake forward, FLOP count
