"""`run` and `run --training` with a factory returning keyword inputs: the stages take the traced graph's
flattened positional + keyword inputs; the reference is the unsplit ``model(*args, **kwargs)``."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from dnnplace.models.paper.split import Split  # noqa: E402

# op-level groups: 0 linear a, 1 tanh | 2 unsqueeze(mask), 3 assert, 4 to, 5 mul, 6 linear b, 7 add(bias)
KEYWORDS = """
import torch
from torch import nn


class KW(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x, attention_mask=None, bias=None):
        h = torch.tanh(self.a(x))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        out = self.b(h)
        if bias is not None:
            out = out + bias
        return out


def build():
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[:, 4:] = 0
    # keywords in another order than the signature's; a float keyword (changes per microbatch) and an int one
    return KW(), (torch.randn(4, 6, 16),), {"bias": torch.randn(8), "attention_mask": mask}
"""

SPLIT = Split.of([[0, 1], [2, 3, 4, 5, 6, 7]])


@pytest.fixture
def kw_model(tmp_path, monkeypatch):
    (tmp_path / "kw.py").write_text(KEYWORDS)
    monkeypatch.chdir(tmp_path)
    return "kw.py:build"


def test_forward_with_keyword_inputs(kw_model):
    from dnnplace.runtime.launch import run_pipeline

    res = run_pipeline(kw_model, SPLIT, microbatches=4, warmup=1, timeout_s=300)
    assert res["outputs_match"] and len(res["stages"]) == 2


def test_training_with_keyword_inputs(kw_model):
    from dnnplace.runtime.launch import run_training

    res = run_training(kw_model, SPLIT, schedule="1f1b", microbatches=4, steps=2, optimizer="sgd", lr=0.05,
                       timeout_s=300)
    assert res["loss_match"], (res["losses"], res["reference_losses"])
    assert res["params_match"] and res["max_param_rel_diff"] < 1e-5, res["max_param_rel_diff"]


def test_t5_tiny_trains_exactly():
    """Hugging Face T5 (keyword decoder inputs, the embedding shared by encoder, decoder and lm_head), cut in two:
    the shared weight is held by both stages."""
    pytest.importorskip("transformers")
    from dnnplace.runtime.launch import run_training

    # op-level groups 0-119 (encoder and the decoder's start) | 120-246
    split = Split.of([list(range(0, 120)), list(range(120, 247))])
    res = run_training(str(ROOT / "examples/hf_transformers.py:t5_tiny"), split, schedule="1f1b", microbatches=2,
                       steps=2, optimizer="sgd", lr=0.05, timeout_s=300)
    assert [s["stages"] for s in res["shared_parameters"]] == [[0, 1]]
    assert res["loss_match"], (res["losses"], res["reference_losses"])
    assert res["params_match"] and res["max_param_rel_diff"] < 1e-5, res["max_param_rel_diff"]
