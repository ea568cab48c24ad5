"""The real vLLM engine (its CPU build) started with a dnnplace vLLM export: planned layers, served tokens,
and the throughput order of two splits.

Why a real engine: the export is only right if vLLM takes it as it is. Each run parses the exported
``vllm serve`` line with vLLM's own server parser and sets the exported ``VLLM_PP_LAYER_PARTITION``,
then counts, on every pipeline rank, the decoder layers that are real modules rather than vLLM's
``PPMissingLayer`` placeholders (``collective_rpc``).

The model: a 6-layer Llama (hidden 1024, FFN 4096, vocabulary 2048) with random weights (vLLM's
dummy load of a config-only folder), prompts as token ids without a tokenizer. Two pipeline splits
of it on two ranks, 5+1 and 3+3; 5+1 is also the hand-pinned uneven split whose layers are checked.

What the plan prices with, and why its order is device-independent: the catalogue has no CPU entry
(no sourced CPU kernel table or roofline constants), so the plan is priced on two GPUs of one kind
(``2xl4``), and the test checks the same order on T4, A100 and H100. The order cannot depend on the
device: all six layers are identical, both stages are the same device, so a stage's time is (its
layers) x (one layer's time) plus the embedding on the first and the LM head on the last; the
pipeline advances at its slowest stage, and with a 2048-word vocabulary the head costs far less than
a layer (checked below on the plan's own stage times). So the 3-layer bottleneck of 3+3 beats the
5-layer bottleneck of 5+1 on any device, by about 5/3 when layers dominate (the plan: 1.61-1.64x). The
CPU engine shows less (1.2-1.5x): its scheduler and front-end processes share the two cores with the workers.

How it is measured: both engines start side by side, then run the same 16 prompts x 24 tokens in turn, 4
rounds; each round compares the two under the same background load (a 2-core machine shared with other
jobs: run one after the other, the order flipped from run to run). While measuring, the driver raises the
engine's priority where it may (root). Measured here (load 5-7), 3+3 over 5+1 per round: 1.33, 1.19, 1.48,
2.9x in one run, 1.48, 1.38, 1.29, 1.41x in the next (medians 1.4x); the plan says 1.61-1.64x.

Lanes: ``slow`` (engine start-up 25-50 s per split) and ``timing`` (it measures throughput, so it runs in
the timing lane of ``make test-all``, alone: no other test steals its two cores). It skips only when
``.venv-vllm`` is absent; ``make test-all`` (CI) builds it first.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dnnplace.models.serving.evaluation import evaluate
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.search import search
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, ServingProblem, Stage

pytestmark = [pytest.mark.slow, pytest.mark.timing]

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = Path(__file__).with_name("vllm_driver.py")
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096,
    "num_hidden_layers": 6, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 2048,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}
PROMPTS, PROMPT_LEN, MAX_TOKENS, REPEATS = 16, 16, 24, 4
# two micro-batches of 8 prompts: the token budget admits 8 prompts per scheduling step, so both pipeline
# stages have a micro-batch in flight (vLLM runs pp batches concurrently)
MAX_SEQS, BUDGET = PROMPTS, PROMPTS // 2 * PROMPT_LEN
SPLITS = ((5, 1), (3, 3))
GPU = "l4"

if not VLLM_PY.exists():
    pytest.skip("vLLM's CPU build is not installed: `make vllm-venv` builds .venv-vllm (make test-all does)",
                allow_module_level=True)


def plan_of(p: ServingProblem, split: tuple[int, ...], gpu: str = GPU) -> ServingPlan:
    """A pinned deployment (``--fix pp=2,layers=5+1`` style): one replica, one GPU per stage, in stage order."""
    stages = tuple(Stage(gpu, 0, (i,), n) for i, n in enumerate(split))
    return ServingPlan(ServingConfig((Replica(stages),), MAX_SEQS, BUDGET), status="fixed")


def exported_command(p: ServingProblem, plan: ServingPlan, model: Path) -> str:
    """The export step as a user runs it: ``dnnplace serve ... --fix`` writes the pinned plan file, then
    ``dnnplace export PLAN --to vllm`` writes the command the engine is started with."""
    r = plan.config.replicas[0]
    work = model.parent / ("plan-" + "-".join(map(str, r.partition())))
    work.mkdir(exist_ok=True)
    fix = (f"tp={r.tp},pp={r.pp},layers={'+'.join(map(str, r.partition()))},"
           f"max_num_seqs={plan.config.max_num_seqs},max_num_batched_tokens={plan.config.max_num_batched_tokens}")
    cli = [sys.executable, "-m", "dnnplace"]
    subprocess.run([*cli, "serve", str(model / "config.json"), "--gpus", f"{r.pp}x{r.stages[0].gpu}",
                    "--isl", str(PROMPT_LEN), "--osl", str(MAX_TOKENS), "--fix", fix, "-o", str(work / "plan.json")],
                   check=True, capture_output=True, text=True)
    subprocess.run([*cli, "export", str(work / "plan.json"), "--to", "vllm", "--model", str(model),
                    "-o", str(work / "vllm.sh")], check=True, capture_output=True, text=True)
    lines = [ln for ln in (work / "vllm.sh").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1, lines
    return lines[0]


def _engine_env(command: str, work: Path) -> dict[str, str]:
    """The export's ``VAR=value`` words (but CUDA's: no GPUs here) over a clean environment, plus the CPU build's."""
    env_words = dict(w.split("=", 1) for w in shlex.split(command) if "=" in w and w.split("=", 1)[0].isupper())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "VLLM_", "PYTHON"))}
    env.update({k: v for k, v in env_words.items() if not k.startswith("CUDA_")})
    env.update({"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CACHE_ROOT": str(work / "cache"),
                "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # collective_rpc ships count_layers by value
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"})
    return env


def _wait(proc: subprocess.Popen[str], path: Path, log: Path, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > end:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise AssertionError(f"vLLM exited {proc.returncode} before {path.name}:\n{tail}")
        time.sleep(0.2)
    return dict(json.loads(path.read_text()))


def run_engines(commands: dict[tuple[int, ...], str], model: Path, work: Path) -> dict[tuple[int, ...], Any]:
    """Start one vLLM per exported command in .venv-vllm, side by side; then measure them in turn, REPEATS
    rounds, so that the machine's other load falls on both alike (an idle engine sleeps after 1 s)."""
    shm = Path("/dev/shm")
    before = set(shm.glob("vllm_dist_*")) if shm.is_dir() else set()
    procs: dict[tuple[int, ...], tuple[subprocess.Popen[str], Path, Path]] = {}
    try:
        for split, command in commands.items():
            d = work / "-".join(map(str, split))
            d.mkdir()
            (d / "spec.json").write_text(json.dumps({"model": str(model), "command": command, "prompts": PROMPTS,
                                                     "prompt_len": PROMPT_LEN, "max_tokens": MAX_TOKENS}))
            log = d / "engine.log"
            with log.open("w") as out:
                proc = subprocess.Popen([str(VLLM_PY), str(DRIVER), str(d / "spec.json"), str(d)], env=_engine_env(
                    command, d), cwd=d, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True)
            procs[split] = (proc, d, log)
        runs = {s: {"command": commands[s], **_wait(p, d / "ready.json", log, 240)} for s, (p, d, log) in procs.items()}
        for s in runs:
            runs[s]["tokens_per_s"] = []
        for k in range(REPEATS):
            for s, (proc, d, log) in procs.items():
                time.sleep(1.5)  # the other engine's workers stop spinning 1 s after their last step
                assert proc.stdin is not None
                proc.stdin.write("measure\n")
                proc.stdin.flush()
                got = _wait(proc, d / f"measure-{k}.json", log, 60)
                runs[s]["tokens_per_s"].append(got["tokens_per_s"])
                runs[s]["boosted"] = got["boosted"]
        return runs
    finally:
        for proc, _, _ in procs.values():
            if proc.stdin is not None and not proc.stdin.closed:
                try:
                    proc.stdin.write("quit\n")
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # vLLM leaves its shared-memory broadcast files behind: remove those these runs made
        for f in (set(shm.glob("vllm_dist_*")) - before) if shm.is_dir() else ():
            f.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tiny-llama")
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


@pytest.fixture(scope="module")
def engine_runs(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, ...], Any]:
    p = problem(model_dir, gpus=f"2x{GPU}", isl=PROMPT_LEN, osl=MAX_TOKENS)
    commands = {split: exported_command(p, plan_of(p, split), model_dir) for split in SPLITS}
    return run_engines(commands, model_dir, tmp_path_factory.mktemp("vllm"))


@pytest.mark.parametrize("split", SPLITS)
def test_each_pipeline_rank_holds_exactly_the_planned_layers(engine_runs, split):
    run = engine_runs[split]
    assert run["env_partition"] == ",".join(map(str, split))
    kw = run["engine_kwargs"]  # the exported flags as vLLM's serve parser read them
    assert kw["pipeline_parallel_size"] == len(split) and kw.get("tensor_parallel_size", 1) == 1
    assert (kw["max_num_seqs"], kw["max_num_batched_tokens"]) == (MAX_SEQS, BUDGET)
    assert kw["max_model_len"] == CONFIG["max_position_embeddings"]
    start = 0
    for rank, (n, got) in enumerate(zip(split, run["layers"], strict=True)):
        assert got["rank"] == rank
        assert got["real"] == list(range(start, start + n)), got
        assert got["missing"] == CONFIG["num_hidden_layers"] - n
        assert (got["start"], got["end"]) == (start, start + n)
        assert got["embed"] == (rank == 0) and got["lm_head"] == (rank == len(split) - 1)
        start += n
    assert start == CONFIG["num_hidden_layers"]


@pytest.mark.parametrize("split", SPLITS)
def test_a_request_is_served(engine_runs, split):
    tokens = engine_runs[split]["served_tokens"]
    assert len(tokens) == MAX_TOKENS and all(0 <= t < CONFIG["vocab_size"] for t in tokens)


def test_the_split_does_not_change_what_is_served(engine_runs):
    """The dummy weights are seeded per parameter, so both splits run the same model: same greedy tokens."""
    assert engine_runs[SPLITS[0]]["served_tokens"] == engine_runs[SPLITS[1]]["served_tokens"]


def test_measured_throughput_orders_the_splits_as_the_plan_does(engine_runs, model_dir):
    ratio_predicted: dict[str, float] = {}
    for gpu in (GPU, "t4", "a100", "h100"):
        p = problem(model_dir, gpus=f"2x{gpu}", isl=PROMPT_LEN, osl=MAX_TOKENS)
        ev = {s: evaluate(p, plan_of(p, s, gpu).config) for s in SPLITS}
        predicted = {s: e.output_tokens_per_s for s, e in ev.items()}
        # the LM head (on the last stage with one layer in 5+1) is not what limits: stage 1 is the bottleneck
        five_one = ev[(5, 1)].replicas[0].stage_s
        assert five_one[0] > five_one[1], (gpu, five_one)
        assert predicted[(3, 3)] > predicted[(5, 1)], (gpu, predicted)
        ratio_predicted[gpu] = predicted[(3, 3)] / predicted[(5, 1)]
    # the planner's own split for this model on two GPUs is the one the engine runs fastest
    p = problem(model_dir, gpus=f"2x{GPU}", isl=PROMPT_LEN, osl=MAX_TOKENS)
    best = search(p, tp=1, pp=2, max_num_seqs=MAX_SEQS, max_num_batched_tokens=BUDGET)
    assert best.config.replicas[0].partition() == [3, 3]
    # measured: the two engines ran in turn, round by round; compare within each round (same background load)
    even, uneven = engine_runs[(3, 3)]["tokens_per_s"], engine_runs[(5, 1)]["tokens_per_s"]
    rounds = sorted(a / b for a, b in zip(even, uneven, strict=True))
    median = (rounds[(len(rounds) - 1) // 2] + rounds[len(rounds) // 2]) / 2
    ratios = ", ".join(f"{g} {r:.2f}x" for g, r in ratio_predicted.items())
    print(f"vLLM CPU tokens/s per round: 5+1 {[round(x) for x in uneven]}, 3+3 {[round(x) for x in even]} "
          f"(priority raised: {engine_runs[(3, 3)]['boosted']}); 3+3 over 5+1: measured median {median:.2f}x "
          f"(best of each {max(even) / max(uneven):.2f}x), plan {ratios}", file=sys.stderr)
    assert median > 1.0, (uneven, even)
