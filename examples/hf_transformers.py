"""Real model families from Hugging Face ``transformers``, tiny random-initialised configs (no weights).

Each factory returns ``(model, args)`` or ``(model, args, kwargs)`` for ``dnnplace profile``:

    dnnplace profile examples/hf_transformers.py:gpt2_6 --device a100 -k 4 -o gpt2_6.json

The configs keep the real architectures (GPT-2's fused QKV and causal mask,
BERT's token types and attention mask, LLaMA's grouped-query attention and
rotary embeddings, T5's relative position buckets and keyword decoder inputs)
at a width small enough to trace and time on a laptop CPU.
"""

from __future__ import annotations

import torch

BATCH, SEQ, VOCAB = 4, 128, 1024


def _ids(seed: int = 0, vocab: int = VOCAB, seq: int = SEQ) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (BATCH, seq), generator=g)


def gpt2(blocks: int = 6, width: int = 256):
    """GPT-2 (decoder-only, learned positions, fused QKV), no KV cache."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=blocks, n_embd=width, n_head=4, n_positions=SEQ, vocab_size=VOCAB, use_cache=False,
                     bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    return GPT2LMHeadModel(cfg).eval(), (_ids(),)


def bert(layers: int = 4, width: int = 256):
    """BERT encoder with its pooler, token types and a padding mask."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=4, intermediate_size=4 * width,
                     vocab_size=VOCAB, max_position_embeddings=SEQ, attn_implementation="sdpa")
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[:, -8:] = 0
    return BertModel(cfg).eval(), (ids,), {"attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def llama(blocks: int = 4, width: int = 256):
    """LLaMA-style decoder: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention (4 heads, 2 KV heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=blocks, hidden_size=width, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=2 * width + width // 2, vocab_size=VOCAB, max_position_embeddings=SEQ,
                      use_cache=False, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval(), (_ids(),)


def t5(layers: int = 2, width: int = 256):
    """T5 encoder-decoder; the decoder's inputs are a keyword argument, as in every seq2seq model."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(num_layers=layers, num_decoder_layers=layers, d_model=width, d_kv=width // 4, d_ff=4 * width,
                   num_heads=4, vocab_size=VOCAB, use_cache=False, attn_implementation="sdpa")
    return T5ForConditionalGeneration(cfg).eval(), (_ids(),), {"decoder_input_ids": _ids(1, seq=SEQ // 2)}


def vit(layers: int = 4, width: int = 256):
    """Vision Transformer on 64x64 images in 8x8 patches."""
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=4, intermediate_size=4 * width,
                    image_size=64, patch_size=8, attn_implementation="sdpa")
    return ViTModel(cfg, add_pooling_layer=False).eval(), (torch.randn(BATCH, 3, 64, 64),)


# MODULE:FACTORY names for the command line (a factory takes no arguments)
def gpt2_1():
    return gpt2(1)


def gpt2_6():
    return gpt2(6)


def gpt2_12():
    return gpt2(12)


def bert_4():
    return bert(4)


def bert_nomask_4():
    """BERT (4 layers, width 256) without a padding mask or token types: issue #22's training case."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                     vocab_size=VOCAB, max_position_embeddings=SEQ, attn_implementation="sdpa")
    return BertModel(cfg).eval(), (_ids(),)


def bert_12():
    return bert(12)


def llama_4():
    return llama(4)


def llama_16():
    return llama(16)


def t5_2():
    return t5(2)


def vit_4():
    return vit(4)


def gpt2_cached():
    """GPT-2 with its default ``use_cache=True``: its output holds a cache object (``profile`` says what to do)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=1, n_embd=64, n_head=2, n_positions=SEQ, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval(), (_ids(),)


# tiny configs for the test suite (seconds to trace and profile)
def gpt2_tiny():
    return gpt2(1, width=64)


def bert_tiny():
    return bert(1, width=64)


def llama_tiny():
    return llama(1, width=64)


def t5_tiny():
    return t5(1, width=64)


def gpt2_small():
    """GPT-2 small at its real shape: 12 blocks x 768, 12 heads, vocab 50,257, 1,024 tokens (random init)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257, use_cache=False,
                     bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    return GPT2LMHeadModel(cfg).eval(), (_ids(vocab=50257, seq=1024),)
