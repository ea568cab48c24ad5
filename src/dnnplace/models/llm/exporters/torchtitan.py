"""torchtitan: a TOML job config (``--job.config_file``) for a plan.

Targets the TOML ``JobConfig`` of torchtitan 0.2.x; torchtitan 0.3 replaced
TOML files by Python config registries and CLI overrides.  The layer split is
always written explicitly as ``module_fqns_per_model_part`` (llama module names:
``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``), one model part per
virtual stage in model order, which torchtitan's looped schedules place on rank
``i % pp`` exactly like the plan.  Strings are written as TOML basic strings
with every quote, backslash and control character escaped.

torchtitan builds the model named by ``[model] name`` and ``flavor`` from its
own registry (the default is llama3's ``debugmodel``), so the export names the
registry entry whose architecture is exactly the priced one (:data:`FLAVORS`,
copied from torchtitan 0.2.2's ``llama3_args`` and ``qwen3_args``; the tests
check the table against the installed package) and refuses a model that has
none, and a pipelined plan for a train spec without pipelining.  The plan is
checked by the planner's own rules first (:mod:`dnnplace.models.llm.exporters.checked`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.models.llm.exporters.checked import CheckedPlan, checked_plan, refuse
from dnnplace.models.llm.exporters.torchtitan_moe import MoEFlavor, moe_flavor_of, moe_parallelism
from dnnplace.models.llm.plan_file import stage_bounds
from dnnplace.models.llm.spec import LLMPlan, TransformerArch

_AC_MODE = {"none": "none", "full": "full"}  # selective is refused (sections)


@dataclass(frozen=True)
class Flavor:
    """One dense entry of a torchtitan train spec's model registry, as the sizes it builds."""

    name: str  # [model] name: the train spec
    flavor: str  # [model] flavor: the key in its model_args table
    num_layers: int
    hidden: int
    ffn_hidden: int  # the FeedForward width it computes (llama3: from ffn_dim_multiplier and multiple_of)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    rope_theta: float
    qk_norm: bool
    pipelining: bool  # whether the train spec has a pipelining_fn (qwen3 has none in 0.2.2)

    def differences(self, a: TransformerArch) -> dict[str, tuple[Any, Any]]:
        """Field -> (``a``'s value, this entry's) wherever they differ; both train specs fix the layer kind
        (SwiGLU, RMSNorm, RoPE, no biases, no dropout, full causal attention, dense)."""
        mine = {"num_layers": self.num_layers, "hidden": self.hidden, "ffn_hidden": self.ffn_hidden,
                "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim, "vocab": self.vocab,
                "tied_embeddings": self.tied_embeddings, "rope_theta": self.rope_theta, "qk_norm": self.qk_norm,
                "mlp": "swiglu", "norm": "rms", "position": "rope", "qkv_bias": False, "linear_bias": False,
                "dropout": False, "sliding_window": 0, "num_experts": 1}
        return {k: (getattr(a, k), v) for k, v in mine.items() if getattr(a, k) != v}

    def builds(self, a: TransformerArch) -> bool:
        """True when this entry is exactly ``a``."""
        return not self.differences(a)


def _l3(flavor: str, layers: int, dim: int, ffn: int, heads: int, kv: int, vocab: int = 128256) -> Flavor:
    return Flavor("llama3", flavor, layers, dim, ffn, heads, kv, dim // heads, vocab, False, 500000.0, False, True)


def _q3(flavor: str, layers: int, dim: int, ffn: int, heads: int, tied: bool, vocab: int = 151936) -> Flavor:
    return Flavor("qwen3", flavor, layers, dim, ffn, heads, 8, 128, vocab, tied, 1e6, True, False)


#: torchtitan 0.2.2's dense registry entries (the _flex/_varlen variants build the same model as their base).
FLAVORS: tuple[Flavor, ...] = (
    _l3("debugmodel", 6, 256, 768, 16, 16, vocab=2048),
    _l3("8B", 32, 4096, 14336, 32, 8),
    _l3("70B", 80, 8192, 28672, 64, 8),
    _l3("405B", 126, 16384, 53248, 128, 8),
    _q3("debugmodel", 8, 256, 3072, 16, True, vocab=2048),
    _q3("0.6B", 28, 1024, 3072, 16, True),
    _q3("1.7B", 28, 2048, 6144, 16, True),
    _q3("4B", 36, 2560, 9728, 32, True),
    _q3("8B", 36, 4096, 12288, 32, False),
    _q3("14B", 40, 5120, 17408, 40, False),
    _q3("32B", 64, 5120, 25600, 64, False),
)


def flavor_of(a: TransformerArch) -> Flavor:
    """The registry entry that builds exactly ``a``, or a one-line refusal naming how the nearest one differs
    (never torchtitan's default debugmodel)."""
    nearest = min(FLAVORS, key=lambda f: len(f.differences(a)))
    diff = nearest.differences(a)
    if not diff:
        return nearest
    shown = ", ".join(f"{k} {mine} (not {theirs})" for k, (mine, theirs) in list(diff.items())[:2])
    more = f" and {len(diff) - 2} more" if len(diff) > 2 else ""
    raise refuse("torchtitan", a, f"torchtitan 0.2.2 has no such model (nearest: {nearest.name} {nearest.flavor}, "
                                  f"which differs in {shown}{more})")


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


def model_parts(plan: CheckedPlan) -> list[list[str]]:
    """Module FQNs of each virtual stage: the embedding on the first, the norm and LM head on the last."""
    bounds = stage_bounds(plan.config["layers_per_stage"])
    parts = [[f"layers.{i}" for i in range(a, b)] for a, b in bounds]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def data_parallel(plan: CheckedPlan) -> bool:
    """Whether the data-parallel ranks shard (FSDP2, ZeRO-3: ``data_parallel_shard_degree``) or replicate (DDP,
    ZeRO-0: ``data_parallel_replicate_degree``); the stages between, and a bf16 gradient reduction, have no
    torchtitan 0.2.2 setting and are refused in one line."""
    c = plan.config
    zero = int(c.get("zero", 1 if c["distributed_optimizer"] else 0))
    if zero in (1, 2):
        raise refuse("torchtitan", plan.arch, f"zero={zero} (torchtitan shards parameters, gradients and "
                                              "optimizer state together with FSDP2, or replicates with DDP); "
                                              "re-plan with --fix zero=3 or zero=0")
    if c.get("grad_dtype", "fp32") != "fp32":
        raise refuse("torchtitan", plan.arch, "grad_dtype=bf16 (torchtitan 0.2.2 reduces gradients in float32 "
                                              "only: training.mixed_precision_reduce); re-plan with "
                                              "--fix grad_dtype=fp32")
    return zero == 3


def local_batch_size(c: dict[str, Any], j: dict[str, Any]) -> int:
    """``training.local_batch_size``: what one data-parallel rank runs per forward pass.

    torchtitan 0.2.2 (``train.py``, ``Trainer.__init__``) accumulates gradients over
    ``global_batch_size // (local_batch_size * dp)`` steps, and a pipeline splits its local batch into
    micro-batches of ``pipeline_parallel_microbatch_size``.  At pp = 1 the local batch is therefore the
    priced micro-batch (``mbs``, accumulated ``num_microbatches`` times): the whole per-rank batch in one
    forward would hold ``num_microbatches`` times the priced activations.  With pp > 1 it is the per-rank
    batch, which the schedule splits into the priced micro-batches.
    """
    return int(c["mbs"]) if c["pp"] == 1 else int(j["global_batch"]) // int(c["dp"])


def sections(plan: CheckedPlan) -> dict[str, dict[str, Any]]:
    """The TOML tables, section -> key -> value (bools, ints, strings and lists of them)."""
    a, c, j = plan.arch, plan.config, plan.job
    moe = plan.problem.moe
    flavor: Flavor | MoEFlavor = flavor_of(a) if moe is None else moe_flavor_of(moe)
    if c["pp"] > 1 and not flavor.pipelining:
        raise refuse("torchtitan", a, f"torchtitan 0.2.2's {flavor.name} train spec has no pipelining "
                                      f"(pp={c['pp']}); plan with --fix pp=1")
    model: dict[str, Any] = {"name": flavor.name, "flavor": flavor.flavor}
    if j["precision"] != "bf16":
        # torchtitan 0.2.2's float8 converter (components/quantization/float8.py) is torchao's Float8Linear:
        # current (tensorwise or rowwise) scaling with high-precision weights -- not the delayed scaling with
        # FP8 parameters the fp8 recipe prices (nor fp8-cs, which keeps FP8 parameters and BF16 end layers).
        raise refuse("torchtitan", a, f"precision {j['precision']} (torchtitan's float8 converter is torchao's "
                                      "current scaling with high-precision weights, another recipe); re-plan "
                                      "with --precision bf16")
    if plan.runs_recompute == "selective":
        # torchtitan's selective AC (ActivationCheckpoint.selective_ac_option) is op-level SAC ("op": every
        # second matmul) or every N-th layer: neither is Megatron's core-attention recompute, as priced.
        raise refuse("torchtitan", a, "recompute=selective (Megatron's core-attention recompute; torchtitan's "
                                      "selective AC recomputes ops or layers instead); re-plan with "
                                      "--fix recompute=none or recompute=full")
    sharded = data_parallel(plan)
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else c["dp"],
        "data_parallel_shard_degree": c["dp"] if sharded else 1,
        "tensor_parallel_degree": c["tp"],
        "context_parallel_degree": c["cp"],
        "pipeline_parallel_degree": c["pp"],
    }
    if moe is not None:  # the expert-parallel knobs (exporters/torchtitan_moe.py)
        par.update(moe_parallelism(plan, par))
    if c["pp"] > 1:
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if c["vp"] > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = c["mbs"]
        par["module_fqns_per_model_part"] = model_parts(plan)
    ac: dict[str, Any] = {"mode": _AC_MODE[plan.runs_recompute]}
    out: dict[str, dict[str, Any]] = {"job": {"description": a.name}, "model": model}
    out["training"] = {
        "local_batch_size": local_batch_size(c, j),
        "global_batch_size": j["global_batch"],
        "seq_len": j["seq_len"],
        "mixed_precision_param": "bfloat16",
        "mixed_precision_reduce": "float32",
    }
    out["parallelism"] = par
    out["activation_checkpoint"] = ac
    return out


def render(plan: dict[str, Any] | LLMPlan) -> str:
    """The TOML text; merge it with (or pass it as) the job's ``--job.config_file``."""
    checked = checked_plan(plan, "torchtitan")
    tables = sections(checked)
    c, cl = checked.config, checked.doc["cluster"]
    lines = [
        "# torchtitan job config written by dnnplace from an LLM plan (TOML JobConfig, torchtitan 0.2.x).",
        f"# {cl['gpus']} GPUs: tp={c['tp']} pp={c['pp']} vp={c['vp']} cp={c['cp']} dp={c['dp']};"
        " add the tokenizer, dataset and optimizer settings for your run.",
    ]
    for name, table in tables.items():
        lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
