"""torchtitan: a TOML job config (``--job.config_file``) for a plan.

Targets the TOML ``JobConfig`` of torchtitan 0.2.x; torchtitan 0.3 replaced
TOML files by Python config registries and CLI overrides.  The layer split is
always written explicitly as ``module_fqns_per_model_part`` (llama module names:
``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``), one model part per
virtual stage in model order, which torchtitan's looped schedules place on rank
``i % pp`` exactly like the plan.  Strings are written as TOML basic strings
with every quote, backslash and control character escaped.
"""

from __future__ import annotations

from typing import Any

from dnnplace.frontends.llm_plan import stage_bounds

_AC_MODE = {"none": "none", "selective": "selective", "full": "full"}
_MODEL_NAME = {"llama": "llama3"}  # families whose torchtitan train spec uses the llama FQNs


def toml_string(s: str) -> str:
    """``s`` as a TOML basic string: quotes, backslashes and control characters escaped, the rest literal."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o if o < 0xD800 else 0xFFFD:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")  # pragma: no cover - only the types above are built


def model_parts(plan: dict[str, Any]) -> list[list[str]]:
    """Module FQNs of each virtual stage: the embedding on the first, the norm and LM head on the last."""
    bounds = stage_bounds(plan["config"]["layers_per_stage"])
    parts = [[f"layers.{i}" for i in range(a, b)] for a, b in bounds]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def sections(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The TOML tables, section -> key -> value (bools, ints, strings and lists of them)."""
    m, c, j = plan["model"], plan["config"], plan["job"]
    model: dict[str, Any] = {}
    if m["family"] in _MODEL_NAME:
        model["name"] = _MODEL_NAME[m["family"]]
    if j["precision"] == "fp8":
        model["converters"] = ["float8"]
    sharded = c["distributed_optimizer"]
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else c["dp"],
        "data_parallel_shard_degree": c["dp"] if sharded else 1,
        "tensor_parallel_degree": c["tp"],
        "context_parallel_degree": c["cp"],
        "pipeline_parallel_degree": c["pp"],
    }
    if c["pp"] > 1:
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if c["vp"] > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = c["mbs"]
        par["module_fqns_per_model_part"] = model_parts(plan)
    ac: dict[str, Any] = {"mode": _AC_MODE[c["recompute"]]}
    if c["recompute"] == "selective":
        ac["selective_ac_option"] = "op"
    out: dict[str, dict[str, Any]] = {"job": {"description": m["name"]}}
    if model:
        out["model"] = model
    out["training"] = {
        "local_batch_size": j["global_batch"] // c["dp"],
        "global_batch_size": j["global_batch"],
        "seq_len": j["seq_len"],
        "mixed_precision_param": "bfloat16",
    }
    out["parallelism"] = par
    out["activation_checkpoint"] = ac
    return out


def render(plan: dict[str, Any]) -> str:
    """The TOML text; merge it with (or pass it as) the job's ``--job.config_file``."""
    c, cl = plan["config"], plan["cluster"]
    lines = [
        "# torchtitan job config written by dnnplace from an LLM plan (TOML JobConfig, torchtitan 0.2.x).",
        f"# {cl['gpus']} GPUs: tp={c['tp']} pp={c['pp']} vp={c['vp']} cp={c['cp']} dp={c['dp']};"
        " add [model] flavor, tokenizer, dataset and optimizer settings for your run.",
    ]
    for name, table in sections(plan).items():
        lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
