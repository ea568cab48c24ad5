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


# ---------------------------------------------------------------------------------------------------------
# More architecture families (issue #20), at the size the issue tried them: hidden 128, 4 layers (Jamba 4,
# its attention every other layer), batch 2 x 64 tokens, random initialisation.  Each keeps what makes its
# family hard to place: MoE routers and experts, Gemma's alternating local/global attention, DeBERTa's
# disentangled relative-position attention, the state-space scans with their conv/gate branches, ALBERT's
# one set of weights shared by every layer.

FAMILY_BATCH, FAMILY_SEQ, FAMILY_WIDTH, FAMILY_LAYERS = 2, 64, 128, 4


def _family_ids(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (FAMILY_BATCH, FAMILY_SEQ), generator=g)


def _decoder(config_cls, model_cls, **fields):
    """A decoder LM of the family's config class with the common tiny shape (no cache, sdpa attention)."""
    base = dict(hidden_size=FAMILY_WIDTH, num_hidden_layers=FAMILY_LAYERS, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=2 * FAMILY_WIDTH, vocab_size=VOCAB,
                max_position_embeddings=FAMILY_SEQ, use_cache=False, attn_implementation="sdpa")
    base.update(fields)
    return model_cls(config_cls(**base)).eval(), (_family_ids(),)


def mixtral_4():
    """Mixtral: 4 experts, top-2 routing, sliding-window attention off (the default grouped experts)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    return _decoder(MixtralConfig, MixtralForCausalLM, num_local_experts=4, num_experts_per_tok=2)


def qwen2_moe_4():
    """Qwen2-MoE: 4 routed experts (top-2) plus a gated shared expert in every layer."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    return _decoder(Qwen2MoeConfig, Qwen2MoeForCausalLM, num_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=FAMILY_WIDTH, shared_expert_intermediate_size=2 * FAMILY_WIDTH,
                    decoder_sparse_step=1)


def qwen3_moe_4():
    """Qwen3-MoE: 4 experts (top-2), q/k norms, no shared expert."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return _decoder(Qwen3MoeConfig, Qwen3MoeForCausalLM, num_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=FAMILY_WIDTH, head_dim=FAMILY_WIDTH // 4, decoder_sparse_step=1)


def olmoe_4():
    """OLMoE: 4 experts (top-2) in every layer, q/k norms."""
    from transformers import OlmoeConfig, OlmoeForCausalLM

    return _decoder(OlmoeConfig, OlmoeForCausalLM, num_experts=4, num_experts_per_tok=2, bos_token_id=0,
                    eos_token_id=0, pad_token_id=0)


def deepseek_v3_4():
    """DeepSeek-V3: multi-head latent attention, one dense layer then MoE layers (4 routed, 1 shared expert)."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    return _decoder(DeepseekV3Config, DeepseekV3ForCausalLM, num_key_value_heads=4, n_routed_experts=4,
                    num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=FAMILY_WIDTH,
                    first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=64, kv_lora_rank=32,
                    qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32)


def jamba_4():
    """Jamba: Mamba layers with an attention layer every other layer and MoE every other layer."""
    from transformers import JambaConfig, JambaForCausalLM

    return _decoder(JambaConfig, JambaForCausalLM, num_experts=4, num_experts_per_tok=2, attn_layer_period=2,
                    attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8,
                    mamba_d_conv=4, mamba_expand=2)


def gemma2_4():
    """Gemma 2: alternating sliding-window (local) and global attention, logit soft-capping."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return _decoder(Gemma2Config, Gemma2ForCausalLM, head_dim=FAMILY_WIDTH // 4, sliding_window=16,
                    attn_implementation="eager")  # transformers refuses sdpa for Gemma 2 (soft-capping)


def gemma3_4():
    """Gemma 3 (text): local/global attention pattern, q/k norms, two rotary bases."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return _decoder(Gemma3TextConfig, Gemma3ForCausalLM, head_dim=FAMILY_WIDTH // 4, sliding_window=16,
                    sliding_window_pattern=2)


def deberta_v2_4():
    """DeBERTa-v2: disentangled attention with relative-position (content-to-position) branches."""
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = DebertaV2Config(num_hidden_layers=FAMILY_LAYERS, hidden_size=FAMILY_WIDTH, num_attention_heads=4,
                          intermediate_size=4 * FAMILY_WIDTH, vocab_size=VOCAB, max_position_embeddings=FAMILY_SEQ,
                          relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"])
    return DebertaV2Model(cfg).eval(), (_family_ids(),)


def albert_4():
    """ALBERT: one transformer layer's weights shared by all 4 layers, factorised embeddings."""
    from transformers import AlbertConfig, AlbertModel

    cfg = AlbertConfig(num_hidden_layers=FAMILY_LAYERS, hidden_size=FAMILY_WIDTH, num_attention_heads=4,
                       intermediate_size=4 * FAMILY_WIDTH, embedding_size=64, vocab_size=VOCAB,
                       max_position_embeddings=FAMILY_SEQ, attn_implementation="sdpa")
    return AlbertModel(cfg, add_pooling_layer=False).eval(), (_family_ids(),)


def _ssm(config_cls, model_cls, **fields):
    base = dict(hidden_size=FAMILY_WIDTH, num_hidden_layers=FAMILY_LAYERS, vocab_size=VOCAB, use_cache=False)
    base.update(fields)
    return model_cls(config_cls(**base)).eval(), (_family_ids(),)


def mamba_4():
    """Mamba: selective state-space scan beside its causal conv and gate (the slow torch path, no kernels)."""
    from transformers import MambaConfig, MambaForCausalLM

    return _ssm(MambaConfig, MambaForCausalLM, state_size=8, conv_kernel=4, expand=2)


def mamba2_4():
    """Mamba-2: chunked state-space duality scan, grouped heads."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    return _ssm(Mamba2Config, Mamba2ForCausalLM, state_size=16, num_heads=8, head_dim=32, n_groups=1,
                expand=2, chunk_size=16)


def falcon_mamba_4():
    """Falcon-Mamba: Mamba with RMS-normalised B, C and dt."""
    from transformers import FalconMambaConfig, FalconMambaForCausalLM

    return _ssm(FalconMambaConfig, FalconMambaForCausalLM, state_size=8, conv_kernel=4, expand=2)
