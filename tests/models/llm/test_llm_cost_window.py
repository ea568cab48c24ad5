"""Sliding-window attention priced with min(window, causal span) keys (issue 33, item 9)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from llm_helpers import problem, uniform

from dnnplace.arch.hf_config import arch_from_dict
from dnnplace.models.llm.evaluation import evaluate, model_flops_per_step
from dnnplace.models.llm.evaluation.flops import attention_fwd_flops
from dnnplace.models.llm.spec import TransformerArch

MISTRAL = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "sliding_window": 4096}


def test_mistral_v01_window_hand_computed() -> None:
    a = arch_from_dict(MISTRAL, "mistral.json")
    assert (a.sliding_window, a.windowed_layers) == (4096, 32)
    # seq 8192: query i sees min(i, 4096) keys, on average 4096 - 4096^2 / (2 * 8192) = 3072 (full causal: 4096)
    got = float(attention_fwd_flops(a, np.array(8192.0), 8192, np.array(1.0)))
    assert got == pytest.approx(2 * 2 * 8192 * 3072 * 4096)
    full = replace(a, sliding_window=0)
    assert float(attention_fwd_flops(full, np.array(8192.0), 8192, np.array(1.0))) == pytest.approx(
        2 * 2 * 8192 * 4096 * 4096)
    # model FLOPs: the attention term 12 s q per token and layer counts min(window, s) = 4096 keys, not 8192
    diff = model_flops_per_step(full, 8192, 8) - model_flops_per_step(a, 8192, 8)
    assert diff == pytest.approx(8 * 8192 * 32 * 12 * (8192 - 4096) * 4096)
    # a window at least the sequence changes nothing
    assert model_flops_per_step(a, 4096, 8) == model_flops_per_step(full, 4096, 8)
    assert float(attention_fwd_flops(a, np.array(4096.0), 4096, np.array(2.0))) == pytest.approx(
        float(attention_fwd_flops(full, np.array(4096.0), 4096, np.array(2.0))))


def test_gemma2_alternating_layers_average_their_keys() -> None:
    a = TransformerArch("g2", "gemma2", 4, 2304, 9216, 8, 4, 256, 256000, mlp="geglu", sliding_window=4096,
                        global_every=2)
    assert a.windowed_layers == 2
    got = float(attention_fwd_flops(a, np.array(8192.0), 8192, np.array(1.0)))
    assert got == pytest.approx(4 * 8192 * (2 * 4096 + 2 * 3072) / 4 * a.q_width)


def test_windowed_attention_makes_the_step_faster() -> None:
    a = arch_from_dict(MISTRAL, "mistral.json")
    pr = problem(a, 8, 32, seq=16384)
    cfg = uniform(a, 8, 8, 1, 1)
    windowed, full = evaluate(pr, cfg), evaluate(problem(replace(a, sliding_window=0), 8, 32, seq=16384), cfg)
    assert windowed.step_time_s < 0.95 * full.step_time_s
    assert windowed.model_flops_per_step < full.model_flops_per_step
