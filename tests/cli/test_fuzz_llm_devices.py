"""Fuzz the inputs round 1's fuzz test does not reach: LLM config.json files and plan files
(``plan``, ``evaluate``, ``simulate``, ``export --to megatron|torchtitan|deepspeed``) and the device
catalogue of ``profile --devices-file``.  Same rules (issue #22): exit 0 or 2, at most one line on
stderr, no traceback, nothing written but the declared output, and nothing at all on an error."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT
from hostile import contents, invoke, snapshot, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

LLM_CONFIG = json.loads((ROOT / "examples" / "llm" / "llama3.1-8b.json").read_text())
CONFIG_PATHS = [[k] for k in LLM_CONFIG] + [["architectures", 0], ["num_local_experts"], ["head_dim"]]
DEVICES = {"slowgpu": {"peak_flops": 1e12, "mem_bw": 1e11, "memory": 8e9, "link_bw": 1e9}}
DEVICE_PATHS = [["slowgpu"], ["cpu"], ["slowgpu", "peak_flops"], ["slowgpu", "mem_bw"], ["slowgpu", "memory"],
                ["slowgpu", "link_bw"], ["slowgpu", "link_latency_ms"], ["slowgpu", "x"], ["cpu", "peak_flops"]]
PLAN_ARGS = ["--gpus", "16", "--seq-len", "4096", "--global-batch", "32"]


@pytest.fixture(scope="module")
def llm_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    code, _, err = invoke("plan", ROOT / "examples" / "llm" / "llama3.1-8b.json", *PLAN_ARGS, "-o", out)
    assert code == 0, err
    return json.loads(out.read_text())


def _plan_paths(plan: dict) -> list[list]:
    """Every key path of the plan file down to two levels (and into lists' first element)."""
    paths: list[list] = []
    for k, v in plan.items():
        paths.append([k])
        if isinstance(v, dict):
            paths += [[k, k2] for k2 in v]
        elif isinstance(v, list) and v:
            paths.append([k, 0])
    return paths


COMMANDS = {
    "plan": (["plan", "{w}", *PLAN_ARGS, "-o", "{out}"], "config"),
    "plan-fix": (["plan", "{w}", *PLAN_ARGS, "--fix", "tp=2,pp=2", "--json"], "config"),
    "llm-evaluate": (["evaluate", "{w}", "--json"], "plan"),
    "llm-simulate": (["simulate", "{w}", "--trace", "{out}"], "plan"),
    "llm-report": (["report", "{w}", "-o", "{out}"], "plan"),
    "export-megatron": (["export", "{w}", "--to", "megatron", "-o", "{out}"], "plan"),
    "export-torchtitan": (["export", "{w}", "--to", "torchtitan", "-o", "{out}"], "plan"),
    "export-deepspeed": (["export", "{w}", "--to", "deepspeed", "-o", "{out}"], "plan"),
    "profile-devices": (["profile", str(ROOT / "examples" / "mlp_skip.py") + ":build", "--device", "slowgpu",
                         "--devices-file", "{w}", "--repeats", "1", "-o", "{out}"], "devices"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=int(os.environ.get("DNNPLACE_FUZZ_EXAMPLES", examples(25))), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_llm_and_device_inputs(command, llm_plan, data):
    args, kind = COMMANDS[command]
    base, paths = {"config": (LLM_CONFIG, CONFIG_PATHS), "plan": (llm_plan, _plan_paths(llm_plan)),
                   "devices": (DEVICES, DEVICE_PATHS)}[kind]
    blob = data.draw(contents(base, paths), label="content")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = {"w": d / "w.json", "out": d / "out.file"}
        write(files["w"], base)
        files["w"].write_bytes(blob)
        before = snapshot(d)
        code, out, err = invoke(*(a.format(**files) for a in args))
        assert code in (0, 2), (code, out, err)
        assert len(err.strip().splitlines()) <= 1, err
        assert "Traceback" not in out + err and "internal error" not in err
        after = snapshot(d)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert changed <= {str(files["out"])}, changed
        if code == 2:
            assert not changed


@pytest.mark.parametrize("args, culprit", [
    (["solve", "w.json", "--bogus"], "No such option: --bogus"),
    (["plan", "c.json", "-q"], "No such option: -q"),
    (["solve"], "Missing argument 'workload'"),
    (["solve", "w.json", "--time-limit", "abc"], "Invalid value for '--time-limit'"),
    (["nocommand"], "No such command 'nocommand'"),
])
def test_usage_mistakes_are_one_line(args, culprit):
    code, out, err = invoke(*args)
    assert code == 2 and culprit in err and len(err.strip().splitlines()) == 1 and "Usage" not in err, (out, err)


@pytest.mark.parametrize("key, value", [("bound", None), ("gap", "0"), ("runtime_s", float("nan")),
                                        ("status", 3)])
@pytest.mark.parametrize("command", ["llm-report", "llm-evaluate"])
def test_a_plans_claims_must_be_numbers(llm_plan, tmp_path, key, value, command):
    """The fuzz test's find: a plan whose "bound" is null crashed the report (``None:.4g``); such a file is
    refused in one line naming the field."""
    args, _ = COMMANDS[command]
    files = {"w": tmp_path / "w.json", "out": tmp_path / "out.file"}
    files["w"].write_text(json.dumps({**llm_plan, key: value}))
    code, _, err = invoke(*(a.format(**files) for a in args))
    assert code == 2 and key in err and len(err.strip().splitlines()) == 1, err
    assert not files["out"].exists()
