"""Training a real transformers model on a plan matches unsplit training, parameters included (issue #22 item 14)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

import dnnplace
from dnnplace.runtime.train import compare_params

pytestmark = pytest.mark.slow  # spawns worker processes or profiles real models

BERT = f"{ROOT / 'examples' / 'hf_transformers.py'}:bert_nomask_4"


def test_a_parameter_left_at_zero_is_compared_with_a_floor_not_as_noise_over_noise():
    # a zero-initialised key bias gets an analytically zero gradient (softmax ignores a shift common to all keys):
    # both runs leave float noise of ~1e-10, which is not a 100 % difference
    ref = {"k.bias": np.full(256, 1e-10, dtype=np.float32), "w": np.ones(4, dtype=np.float32)}
    stage = {"k.bias": np.full(256, -2e-10, dtype=np.float32), "w": np.ones(4, dtype=np.float32) * (1 + 1e-7)}
    ok, worst, missing, name = compare_params([stage], ref)
    assert ok and worst < 1e-5 and not missing and name in ref
    stage["w"] = np.array([1.0, 1.0, 1.0, 1.1], dtype=np.float32)
    ok, worst, _, name = compare_params([stage], ref)
    assert not ok and name == "w" and worst == pytest.approx(0.05, rel=1e-3)


def test_bert_trains_exactly_on_a_two_stage_plan():
    w = dnnplace.profile(BERT, training=True, granularity="module", device="a100", accelerators=2, repeats=1)
    split = dnnplace.solve(w).split
    res = dnnplace.run(BERT, split, workload=w, training=True, schedule="1f1b", microbatches=16, steps=3)
    assert res is not None and "params_match" in res
    assert res["loss_match"] and res["params_match"], (res["max_param_rel_diff"], res["max_param_rel_diff_name"])
    assert res["max_param_rel_diff"] < 1e-5
    assert (res["max_param_rel_diff_name"] is None) == (res["max_param_rel_diff"] == 0.0)
