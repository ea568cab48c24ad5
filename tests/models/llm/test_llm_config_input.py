"""config.json as a careless or hostile user writes it: one line naming the culprit, exit 2 (issue 33, 15, 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnnplace.arch.hf_config import arch_from_dict, load_arch
from dnnplace.errors import DnnplaceError

BASE: dict[str, Any] = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
PLAN = ("--gpus", "1", "--seq-len", "128", "--global-batch", "2")


@pytest.mark.parametrize("key,value", [("hidden_size", 1e200), ("vocab_size", 1e306), ("hidden_size", 4096.0),
                                       ("num_hidden_layers", 2**70), ("intermediate_size", 10**400),
                                       ("num_attention_heads", "4"), ("vocab_size", -3), ("head_dim", 2**40),
                                       ("max_position_embeddings", [1]), ("num_key_value_heads", True)])
def test_huge_or_wrong_counts_are_refused_naming_the_field(key: str, value: Any) -> None:
    with pytest.raises(DnnplaceError, match=f"field '{key}'") as info:
        arch_from_dict({**BASE, key: value}, "c.json")
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_sliding_window_beyond_the_limits_is_refused() -> None:
    with pytest.raises(DnnplaceError, match="sliding_window"):
        arch_from_dict({**BASE, "model_type": "mistral", "sliding_window": 2**70}, "c.json")


def _one_line_refusal(res: Any) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    err = res.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err and "internal error" not in err, err


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "dnnplace", "plan", str(fifo), *PLAN], capture_output=True,
                          text=True, timeout=60)
    _one_line_refusal(proc)
    assert "not a regular file" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dnnplace", "plan", str(tmp_path), *PLAN], capture_output=True,
                          text=True, timeout=60)  # the folder's config.json is the FIFO
    _one_line_refusal(proc)


@pytest.mark.parametrize("kind", ["zero", "deep", "binary", "empty", "missing"])
def test_unreadable_configs_are_one_line(kind: str, tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    if kind == "zero":
        p = Path("/dev/zero")
    elif kind == "deep":
        p.write_text("[" * 200_000)
    elif kind == "binary":
        p.write_bytes(b"\xff\xfe\x00garbage")
    elif kind == "empty":
        p.write_text("")
    _one_line_refusal(run_cli("plan", p, *PLAN))


def test_a_very_long_name_is_one_line() -> None:
    with pytest.raises(DnnplaceError) as info:
        load_arch("/tmp/" + "a" * 5000)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=False)
                    | st.text(max_size=8), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                              max_size=3),
                    max_leaves=6)
FIELDS = st.sampled_from(sorted(BASE) + ["head_dim", "max_position_embeddings", "tie_word_embeddings",
                                         "sliding_window", "rope_theta", "attention_bias", "layer_types",
                                         "num_local_experts", "hidden_act"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(FIELDS, JSON, max_size=3), dropped=st.sets(st.sampled_from(sorted(BASE)), max_size=2),
       garbage=st.one_of(st.none(), st.binary(max_size=40)))
def test_fuzzed_configs_plan_or_refuse_in_one_line(changes: dict, dropped: set, garbage: bytes | None,
                                                   tmp_path: Path) -> None:
    cfg = {k: v for k, v in {**BASE, **changes}.items() if k not in dropped}
    p = tmp_path / "config.json"
    p.write_bytes(garbage if garbage is not None else json.dumps(cfg).encode())
    res = run_cli("plan", p, *PLAN)
    if res.returncode != 0:
        _one_line_refusal(res)
