"""hf_config against transformers.AutoConfig, and its one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_helpers import EXAMPLES

from dnnplace.arch.hf_config import arch_from_dict, load_arch
from dnnplace.errors import DnnplaceError

transformers = pytest.importorskip("transformers")

CASES = {
    "llama": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000),
    "mistral": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=3, num_attention_heads=8,
                    num_key_value_heads=4, vocab_size=1200),
    "qwen2": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=900),
    "gpt2": dict(n_embd=256, n_layer=3, n_head=4, vocab_size=800, n_positions=512),
    "nemotron": dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=6,
                     num_key_value_heads=2, vocab_size=700),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_parse_matches_autoconfig(model_type: str, tmp_path: Path) -> None:
    cfg = transformers.AutoConfig.for_model(model_type, **CASES[model_type])
    cfg.save_pretrained(tmp_path)
    a = load_arch(tmp_path)
    ref = transformers.AutoConfig.from_pretrained(tmp_path)
    if model_type == "gpt2":
        assert (a.hidden, a.num_layers, a.heads, a.kv_heads) == (ref.n_embd, ref.n_layer, ref.n_head, ref.n_head)
        assert a.ffn_hidden == (ref.n_inner or 4 * ref.n_embd)
        assert (a.mlp, a.position, a.norm, a.tied_embeddings) == ("gelu", "learned", "layer", True)
        assert a.max_position == ref.n_positions
    else:
        assert (a.hidden, a.num_layers, a.heads, a.ffn_hidden) == (
            ref.hidden_size, ref.num_hidden_layers, ref.num_attention_heads, ref.intermediate_size)
        assert a.kv_heads == ref.num_key_value_heads
        assert a.tied_embeddings == ref.tie_word_embeddings
        assert a.mlp == ("relu2" if model_type == "nemotron" else "swiglu")
    assert a.vocab == ref.vocab_size and a.family == model_type


def test_bundled_llama_configs() -> None:
    a = load_arch(EXAMPLES / "llama3.1-70b.json")
    assert (a.num_layers, a.hidden, a.ffn_hidden, a.heads, a.kv_heads, a.vocab) == (80, 8192, 28672, 64, 8, 128256)
    assert a.architecture == "LlamaForCausalLM" and a.mlp == "swiglu" and not a.tied_embeddings


def test_factory_spec(tmp_path: Path) -> None:
    f = tmp_path / "mk.py"
    f.write_text("import transformers\n"
                 "def cfg():\n    return transformers.LlamaConfig(hidden_size=256, intermediate_size=512,"
                 " num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=100)\n")
    assert load_arch(f"{f}:cfg").hidden == 256


BASE = dict(model_type="llama", hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=2, vocab_size=1000)


@pytest.mark.parametrize("change,msg", [
    ({"num_hidden_layers": None}, "missing required field 'num_hidden_layers'"),
    ({"model_type": "bogus"}, "unknown or missing model_type"),
    ({"hidden_size": -4}, "field 'hidden_size' -4 is outside 1.."),
    ({"vocab_size": 10.5}, "field 'vocab_size' must be a whole number"),
    ({"num_attention_heads": 7}, "does not divide hidden size"),
    ({"num_key_value_heads": 3}, "does not divide 8 heads"),
    ({"num_local_experts": 8}, "mixture-of-experts"),
    ({"model_type": "mixtral", "num_local_experts": 8}, "mixture-of-experts model \\(mixtral, 8 experts\\)"),
    ({"model_type": "qwen3_moe"}, "mixture-of-experts model"),
])
def test_hostile_configs(change: dict, msg: str, tmp_path: Path) -> None:
    doc = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DnnplaceError, match=msg) as info:
        load_arch(p)
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_unreadable_and_not_json(tmp_path: Path) -> None:
    with pytest.raises(DnnplaceError, match="cannot read"):
        load_arch(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DnnplaceError, match="not valid JSON"):
        load_arch(tmp_path / "bad.json")
    with pytest.raises(DnnplaceError, match="JSON object"):
        arch_from_dict([], "x.json")
