"""Models built on the meta device: shapes and dtypes only, no weights, no memory, nothing to execute.

``dnnplace profile`` prices them for a catalogue device exactly as the same
models built on the CPU (fake tensors; see docs/catalogue.md) and refuses them
for ``--device host``/``cuda``, which time real kernels:

    dnnplace profile examples/meta_models.py:llama3_8b --device h100 -k 8 -o llama3_8b.json

Each factory is one of the other examples' factories called inside
``torch.device("meta")``, so everything it creates -- parameters, buffers and
the example inputs -- lives on the meta device.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch


def on_meta(factory: Callable[[], tuple]) -> tuple:
    """What ``factory()`` returns, every tensor it creates on the meta device."""
    with torch.device("meta"):
        return factory()


def _example(name: str):
    """An example module of this folder by file (this file is loaded by path, not as a package)."""
    spec = importlib.util.spec_from_file_location(f"dnnplace_example_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def transformer_encoder() -> tuple:
    return on_meta(_example("transformer_encoder").build)


def tied_lm() -> tuple:
    return on_meta(_example("tied_lm").build)


def llama_tiny() -> tuple:
    return on_meta(_example("hf_transformers").llama_tiny)


def gpt2_small() -> tuple:
    """GPT-2 small at its real shape (see ``hf_transformers.gpt2_small``), on meta."""
    return on_meta(_example("hf_transformers").gpt2_small)


def llama3_8b(seq: int = 2048) -> tuple:
    """LLaMA-3-8B's shape (32 layers, 4096 wide, GQA 32/8 heads, vocab 128,256), one sequence, on meta.

    16 GB of bf16 weights on the CPU; nothing at all here.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                      use_cache=False, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
        return model, (torch.zeros(1, seq, dtype=torch.long),)
