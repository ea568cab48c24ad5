"""The messages and limits of issue 45's "Also" paragraph, each with its exact case: a trace near the task limit
streams in bounded memory, an MoE memory shortfall says so, --compare / --calibrate failures name themselves,
--fix pp=80 on 64 GPUs says what does not divide, a 144-GPU NVL72 job is not refused for a gpus-per-node never
given, no negative bubble, refusals list every device and model family."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from cli_runner import run_cli
from llm_helpers import EXAMPLES

import dnnplace
from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.interleaved import simulate_schedule
from dnnplace.models.llm.load import machine
from dnnplace.models.llm.published import CONFIGS
from dnnplace.models.llm.solvers.search import search
from dnnplace.utils.files import write_chunks_atomic

LLAMA8B, LLAMA70B = EXAMPLES / "llama3.1-8b.json", EXAMPLES / "llama3.1-70b.json"


# ------------------------------------------------------------ simulate --trace near the task limit


def test_streamed_trace_is_the_trace(tmp_path: Path) -> None:
    run = simulate_schedule(3, 2, 6, [1.0, 2.0, 1.5, 1.0, 0.5, 2.0], [2.0] * 6, p2p=0.25)
    out = tmp_path / "trace.json"
    write_chunks_atomic(out, run.trace_chunks())
    assert json.loads(out.read_text()) == run.chrome_trace()


def test_the_simulation_keeps_tasks_in_flat_arrays() -> None:
    # issue 45: 1.92 M tasks peaked at 6.4 GB (objects: ~3.3 kB a task with the trace); arrays take ~30 bytes
    pp, vp, m = 8, 10, 640  # 102,400 tasks
    tracemalloc.start()
    try:
        run = simulate_schedule(pp, vp, m, [1.0] * (pp * vp), [2.0] * (pp * vp))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(run.tasks) == 2 * pp * vp * m
    assert peak / len(run.tasks) < 150, peak  # bytes a task at the peak (the per-rank orders included)
    t = run.tasks[5]
    assert (t.end - t.start) in (1.0, 2.0) and run.tasks[-1] == list(run.tasks)[-1]


def test_writing_the_trace_does_not_hold_it(tmp_path: Path) -> None:
    run = simulate_schedule(8, 10, 640, [1.0] * 80, [2.0] * 80)
    out = tmp_path / "trace.json"
    tracemalloc.start()
    try:
        write_chunks_atomic(out, run.trace_chunks())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.stat().st_size > 4 * peak  # 14 MB written through a few MB (a chunk of events at a time)
    assert len(json.loads(out.read_text())["traceEvents"]) == len(run.tasks)


# ------------------------------------------------------------ no negative bubble


def test_no_negative_bubble() -> None:
    # Llama 3.1 8B, 8 GPUs, tp=4 pp=1 mbs=2: the bubble was -1.8e-15 (two equal sums in another order)
    pr = dnnplace.load_llm(LLAMA8B, gpus=8, seq_len=8192, global_batch=128)
    plan = search(pr, {"tp": 4, "pp": 1, "mbs": 2})
    assert plan.estimate.time_breakdown["bubble"] == 0.0
    run = simulate_schedule(1, 1, 3, [0.1], [0.2])
    assert run.bubble_fraction == 0.0


# ------------------------------------------------------------ MoE memory shortfalls are memory shortfalls


@pytest.mark.parametrize("config,gpus", [("deepseek-v3.json", 16), ("qwen3-30b-a3b.json", 1)])
def test_moe_memory_shortfall_is_said_as_one(config: str, gpus: int) -> None:
    pr = dnnplace.load_llm(CONFIGS / config, gpus=gpus, seq_len=4096, global_batch=64)
    with pytest.raises(DnnplaceError) as info:
        search(pr)
    text = str(info.value)
    assert text.startswith("no configuration fits in 85.5 GB per GPU on h100") and "\n" not in text
    assert " GB" in text.split(";", 1)[-1] and "vp_needs_pp" not in text and "rule" not in text


# ------------------------------------------------------------ --fix pp=80 on 64 GPUs


def test_fix_pp_beyond_the_gpus_says_what_does_not_divide() -> None:
    res = run_cli("plan", str(LLAMA70B), "--gpus", "64", "--seq-len", "8192", "--global-batch", "512",
                  "--fix", "pp=80")
    assert res.returncode == 2
    line = res.stderr.strip()
    assert line == ("error: --fix: pp=80: pp = 80 does not divide the 64 GPUs (tp*pp*cp*dp must be the number "
                    "of GPUs; rule world_size)")
    assert "= 0 !=" not in line


# ------------------------------------------------------------ NVL72: whole racks, said of the system


def test_nvl72_whole_racks_and_partial_jobs() -> None:
    assert machine("gb200-nvl72", None, None, 144) == ("gb200", 72)  # two whole racks
    assert machine("gb200-nvl72", None, None, 128) == ("gb200", 64)  # two 64-GPU segments
    assert machine("gb200-nvl72", None, None, 7) == ("gb200", 72)  # within one domain: 7 and 70 alike
    assert machine("gb200-nvl72", None, None, 70) == ("gb200", 72)
    with pytest.raises(DnnplaceError, match=r"^--system gb200-nvl72: 150 GPUs .*multiple of 64 or 72$"):
        machine("gb200-nvl72", None, None, 150)


def test_a_144_gpu_nvl72_job_is_planned() -> None:
    res = run_cli("plan", str(LLAMA70B), "--gpus", "144", "--system", "gb200-nvl72", "--seq-len", "8192",
                  "--global-batch", "144", "--runner-ups", "0", "--json", "--fix", "tp=4,pp=4,cp=1")
    assert res.returncode == 0, res.stderr
    assert "gpus_per_node" not in res.stderr
    assert json.loads(res.stdout)["config"]["dp"] == 9


# ------------------------------------------------------------ refusals list every device and family


def test_plannable_device_refusal_lists_every_plannable_device() -> None:
    from dnnplace.core.catalogue import device_names, device_spec

    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--device", "mi300x")
    assert res.returncode == 2
    for d in device_names():
        if device_spec(d).plannable:
            assert d in res.stderr, d
    assert {"gb200", "b300", "gb300"} <= set(res.stderr.replace(",", " ").split())


def test_unknown_family_refusal_lists_the_moe_families(tmp_path: Path) -> None:
    from dnnplace.arch.moe_config import MOE_FAMILIES

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64}))
    res = run_cli("plan", str(cfg), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128")
    assert res.returncode == 2 and "\n" not in res.stderr.strip()
    assert all(f in res.stderr for f in (*MOE_FAMILIES, "llama", "gpt2"))


# ------------------------------------------------------------ --compare / --calibrate failures name themselves


def test_compare_of_an_moe_layout_too_large_is_fits_false_beside_the_plan() -> None:
    # its experts unsharded (ep=etp=1) need 231 GB of static memory: an answer about it, not a plan failure
    res = run_cli("plan", str(CONFIGS / "qwen3-30b-a3b.json"), "--gpus", "8", "--seq-len", "4096",
                  "--global-batch", "64", "--runner-ups", "0", "--fix", "tp=1,pp=1,cp=1,ep=1", "--json",
                  "--compare", "tp=1,pp=1,cp=1,ep=1,etp=1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["prediction"]["fits"] and doc["compared"]["fits"] is False
    assert (doc["compared"]["config"]["ep"], doc["compared"]["config"]["etp"]) == (1, 1)


def test_calibrate_failures_name_calibrate(tmp_path: Path) -> None:
    m = tmp_path / "measured.json"
    m.write_text(json.dumps({"runs": [{"config": {"tp": 3}, "step_time_s": 9.0}]}))
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--calibrate", str(m))
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --calibrate: runs[0]:")
    assert "\n" not in res.stderr.strip()


def test_compare_empty_is_one_line() -> None:
    res = run_cli("plan", str(LLAMA8B), "--gpus", "8", "--seq-len", "8192", "--global-batch", "128",
                  "--compare", "")
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: --compare: give the configuration to compare as KEY=VALUE pins (as --fix),"
                                  " got none")


# ------------------------------------------------------------ recompute_modules=none under selective on MoE


def _megatron_args(text: str, tmp_path: Path) -> list[str]:
    import subprocess

    f = tmp_path / "args.sh"
    f.write_text(text)
    out = subprocess.run(["bash", "-c", 'source "$1" && printf "%s\\0" "${DNNPLACE_MEGATRON_ARGS[@]}"', "_", str(f)],
                         capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


def test_selective_with_no_module_is_priced_and_exported_as_no_module(tmp_path: Path) -> None:
    from dataclasses import replace

    from dnnplace.models.llm.evaluation import evaluate
    from dnnplace.models.llm.exporters import export
    from dnnplace.models.llm.spec import LLMPlan, ParallelConfig

    pr = dnnplace.load_llm(CONFIGS / "qwen3-30b-a3b.json", gpus=16, seq_len=4096, global_batch=1024)
    base = ParallelConfig(1, 1, 1, 1, 16, 1, "none", False, True, (48,), ep=16)
    none, empty, core = (evaluate(pr, replace(base, recompute=r, recompute_modules=m))
                         for r, m in (("none", "none"), ("selective", "none"), ("selective", "core_attn")))
    assert empty.step_time_s == none.step_time_s and empty.memory_per_gpu_bytes == none.memory_per_gpu_bytes
    assert core.step_time_s > none.step_time_s and core.memory_per_gpu_bytes < none.memory_per_gpu_bytes
    plan = search(pr, {"tp": 1, "pp": 1, "cp": 1, "ep": 16, "recompute": "selective", "recompute_modules": "none"})
    assert plan.config.recompute_modules == "none"
    assert plan.estimate.step_time_s == evaluate(pr, replace(plan.config, recompute="none")).step_time_s
    args = _megatron_args(export(plan, "megatron"), tmp_path)
    i = args.index("--recompute-modules")
    assert args[args.index("--recompute-granularity") + 1] == "selective"
    assert i + 1 == len(args) or args[i + 1].startswith("--")  # an empty list: Megatron's [] (no module)
    core_plan = LLMPlan(pr, replace(plan.config, recompute_modules="core_attn"), core, "fixed", core.step_time_s, 0.0,
                        False, 0.0)
    core_args = _megatron_args(export(core_plan, "megatron"), tmp_path)
    assert core_args[core_args.index("--recompute-modules") + 1] == "core_attn"
    # a version-6 file meant Megatron's default by "none": read back as core_attn
    from dnnplace.models.llm.plan_file import read_llm_plan

    old = core_plan.to_dict()
    old["version"], old["config"]["recompute_modules"] = 6, "none"
    assert read_llm_plan(old).config.recompute_modules == "core_attn"
    try:
        from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError:
        pytest.skip("megatron-core is not installed (pip install '.[trainers]')")
    cfg = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, recompute_granularity="selective",
                            recompute_modules=[], num_moe_experts=8, moe_grouped_gemm=True)
    assert cfg.recompute_modules == []  # an empty list is kept: nothing recomputed, not core_attn


def test_whole_nodes_names_where_the_node_size_came_from() -> None:
    res = run_cli("plan", str(LLAMA8B), "--gpus", "70", "--seq-len", "8192", "--global-batch", "140")
    assert res.returncode == 2 and "\n" not in res.stderr.strip()
    assert "gpus_per_node 8" in res.stderr and "8 unless given" in res.stderr
    assert machine("dgx-h100", None, None, 7) == ("h100", 8)  # within one node, as 7 or 70 on an NVL72 rack


@pytest.mark.slow
def test_simulate_trace_at_the_task_limit_stays_small(tmp_path: Path) -> None:
    """The exact case: 1.92 M tasks (Llama 3.1 70B, 64 H100s, tp=8 pp=8 vp=10, GBS 12,000) peaked at 6.4 GB
    with a 363 MB trace; the command's own peak RSS now stays under 1 GB (0.16 GB measured)."""
    import os
    import subprocess
    import sys

    from dnnplace.utils.files import write_json_atomic

    pr = dnnplace.load_llm(LLAMA70B, gpus=64, seq_len=8192, global_batch=12_000)
    plan = dnnplace.solve(pr, tp=8, pp=8, vp=10, cp=1, mbs=1, runner_ups=0).plan
    plan_file, trace = tmp_path / "plan.json", tmp_path / "trace.json"
    write_json_atomic(plan_file, plan.to_dict())
    code = ("import runpy, sys\n"
            f"sys.argv = ['dnnplace', 'simulate', {str(plan_file)!r}, '--trace', {str(trace)!r}]\n"
            "try:\n    runpy.run_module('dnnplace', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            # VmHWM: this process's own peak. ru_maxrss is not: Linux carries the forking parent's high-water
            # mark across exec (a pytest worker's 1.3 GB read as the command's in CI)
            "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')))\n")
    src = Path(dnnplace.__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr[-2000:]
    peak_kb = int(out.stdout.strip().splitlines()[-1])
    assert peak_kb * 1024 < 1e9, peak_kb
    with trace.open() as fh:
        assert fh.read(16) == '{"traceEvents": '
    assert trace.stat().st_size > 250e6
