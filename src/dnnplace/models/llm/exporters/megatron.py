"""Megatron-LM: the ``pretrain_gpt.py`` arguments of a plan, as a bash array.

Option names and their constraints follow ``megatron/training/arguments.py`` and
the ``TransformerConfig`` / ``ModelParallelConfig`` fields it turns into options
(see docs/exporters.md for the commit they were read from).  The layer split is
written the cheapest way Megatron reads it exactly:

* the even split, with ``--num-virtual-stages-per-pipeline-rank`` when vp > 1
  (unlike ``--num-layers-per-virtual-pipeline-stage`` it also combines with
  uneven first/last stages);
* ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  when only the first and/or last pipeline rank differ;
* otherwise ``--pipeline-model-parallel-layout``, which names every virtual
  stage (``E`` embedding, ``t`` decoder layer, ``L`` loss, stages split by ``|``).

The model is the one the plan priced, spelled out flag by flag wherever
Megatron's default differs or could (dropout, biases, RoPE base, head width,
query/key norm, sliding window, position table size): a model its command line
cannot build exactly (Gemma's gated GELU: Megatron has only SiLU-gated
``--swiglu`` and a different ``--quick-geglu``) is refused in one line rather
than exported as another model.  The plan is checked by the planner's own rules
first (:mod:`dnnplace.models.llm.exporters.checked`).

Every value is an integer checked by the plan validator or a word from a fixed
table; the array is still built with :func:`shlex.quote` so that nothing in it
can be read by bash as anything but one argument.
"""

from __future__ import annotations

import shlex
from typing import Any

from dnnplace.models.llm.exporters.checked import CheckedPlan, checked_plan, refuse
from dnnplace.models.llm.exporters.megatron_moe import moe_model_args, moe_parallel_args
from dnnplace.models.llm.plan_file import rank_layers
from dnnplace.models.llm.spec import LLMPlan, TransformerArch

ARRAY = "DNNPLACE_MEGATRON_ARGS"

_NORM = {"rms": "RMSNorm", "layer": "LayerNorm"}
_POSITION = {"rope": "rope", "learned": "learned_absolute"}
_MLP_FLAGS = {"swiglu": ["--swiglu"], "relu2": ["--squared-relu"], "gelu": []}  # no flag: Megatron's GELU
_RECOMPUTE: dict[str, list[list[str]]] = {
    "none": [],
    "selective": [["--recompute-activations"]],
    "full": [["--recompute-granularity", "full"], ["--recompute-method", "uniform"], ["--recompute-num-layers", "1"]],
}


def megatron_split(num_layers: int, pp: int, vp: int, first: int | None, last: int | None) -> list[int] | None:
    """Decoder layers per virtual stage that Megatron builds for these options, or None if it refuses them.

    Mirrors Megatron's rule: the first/last rank take the given counts, the other
    ranks share the rest evenly, and each rank splits its layers evenly over its
    ``vp`` chunks; any remainder is an error there, so None here.
    """
    per_rank = [0] * pp
    rest, left = num_layers, pp
    if first is not None:
        rest, left = rest - first, left - 1
    if last is not None:
        rest, left = rest - last, left - 1
    if rest < 0 or (left > 0 and rest % left) or (left == 0 and rest):
        return None
    for r in range(pp):
        per_rank[r] = rest // left if left else 0
    if first is not None:
        per_rank[0] = first
    if last is not None:
        per_rank[pp - 1] = last
    if any(n % vp for n in per_rank):
        return None
    return [per_rank[i % pp] // vp for i in range(pp * vp)]


def layout_string(layers_per_stage: list[int], mtp: int = 0) -> str:
    """``--pipeline-model-parallel-layout`` for an arbitrary split: one ``|``-separated entry per virtual stage
    (``m``: an MTP layer, on the last stage before the loss, as the evaluator prices it)."""
    last = len(layers_per_stage) - 1
    return "|".join(("E" if i == 0 else "") + "t" * n + ("m" * mtp + "L" if i == last else "")
                    for i, n in enumerate(layers_per_stage))


def pipeline_args(plan: CheckedPlan) -> list[str]:
    """The pipeline options that make Megatron build exactly ``config.layers_per_stage``."""
    c, n = plan.config, plan.arch.num_layers
    pp, vp, lps = c["pp"], c["vp"], c["layers_per_stage"]
    args = ["--pipeline-model-parallel-size", str(pp)]
    if pp == 1:
        return args
    mtp = plan.problem.moe.moe.mtp_layers if plan.problem.moe is not None else 0
    if mtp:  # the MTP layers' place is written out
        return args + ["--pipeline-model-parallel-layout", layout_string(lps, mtp)]
    first, last = sum(rank_layers(lps, pp, 0)), sum(rank_layers(lps, pp, pp - 1))
    for f, l in ((None, None), (first, None), (None, last), (first, last)):
        if megatron_split(n, pp, vp, f, l) == lps:
            if f is not None:
                args += ["--decoder-first-pipeline-num-layers", str(f)]
            if l is not None:
                args += ["--decoder-last-pipeline-num-layers", str(l)]
            if vp > 1:
                args += ["--num-virtual-stages-per-pipeline-rank", str(vp)]
            return args
    return args + ["--pipeline-model-parallel-layout", layout_string(lps)]


def max_position_embeddings(a: TransformerArch, seq_len: int) -> int:
    """``--max-position-embeddings``: the model's position table, never sized by the run.

    Learned positions are a table of ``max_position`` rows, so a longer run is
    refused.  With RoPE the value sizes nothing in Megatron's model (only the
    learned table reads it), but ``validate_args`` asserts it is at least
    ``--seq-length``, so a RoPE run longer than the model's nominal context
    writes the run's length, which builds the same model.
    """
    if a.position == "learned":
        if seq_len > a.max_position:
            raise refuse("megatron", a, f"its learned position table holds {a.max_position} positions and the "
                                        f"plan runs sequences of {seq_len}")
        return a.max_position
    return max(a.max_position, seq_len)


def model_args(a: TransformerArch, seq_len: int) -> list[list[str]]:
    """The architecture flags, each written wherever Megatron's default is not the priced model's."""
    if a.mlp == "geglu":
        raise refuse("megatron", a, "its MLP is a gated GELU (geglu); Megatron-LM's command line gates only "
                                    "SiLU (--swiglu) or quick-GELU (--quick-geglu), a different activation")
    if a.mlp not in _MLP_FLAGS:
        raise refuse("megatron", a, f"its MLP kind {a.mlp!r} has no Megatron-LM flag")
    groups = [
        ["--num-layers", str(a.num_layers)],
        ["--hidden-size", str(a.hidden)],
        ["--ffn-hidden-size", str(a.ffn_hidden)],
        ["--num-attention-heads", str(a.heads)],
        ["--kv-channels", str(a.head_dim)],  # Megatron's default is hidden / heads
    ]
    if a.kv_heads != a.heads:
        groups += [["--group-query-attention"], ["--num-query-groups", str(a.kv_heads)]]
    groups += [[f] for f in _MLP_FLAGS[a.mlp]]
    if a.parallel_residual:
        raise refuse("megatron", a, "its attention and MLP add to one residual in parallel (GPT-NeoX's "
                                    "use_parallel_residual); Megatron-Core's layer runs them in sequence")
    groups.append(["--position-embedding-type", _POSITION[a.position]])
    if a.position == "rope" and a.rotary_fraction < 1.0:
        groups.append(["--rotary-percent", f"{a.rotary_fraction:g}"])  # Megatron's default rotates every channel
    if a.position == "rope":
        if a.rope_theta != int(a.rope_theta):
            raise refuse("megatron", a, f"its RoPE base {a.rope_theta} is not an integer and --rotary-base takes "
                                        "integers only")
        groups.append(["--rotary-base", str(int(a.rope_theta))])  # Megatron's default is 10000
    groups += [["--max-position-embeddings", str(max_position_embeddings(a, seq_len))],
               ["--normalization", _NORM[a.norm]]]  # Megatron's default is LayerNorm
    if a.qk_norm:
        groups.append(["--qk-layernorm"])  # the norm above, per head, on queries and keys
    if not a.linear_bias:  # Megatron's default puts a bias on every linear layer
        groups.append(["--disable-bias-linear"])
        if a.qkv_bias:
            groups.append(["--add-qkv-bias"])
    if not a.dropout:  # Megatron's default is 0.1 for both
        groups += [["--attention-dropout", "0"], ["--hidden-dropout", "0"]]
    if a.sliding_window:
        # Megatron (like Transformer Engine) lets query i see keys i-left .. i+right: a causal window of
        # sliding_window keys, the query's own included, is (sliding_window - 1, 0).
        groups.append(["--window-size", f"{a.sliding_window - 1},0"])
        if a.global_every:  # 1-based layer n is global when n % freq == 0, i.e. 0-based layers k-1, 2k-1, ...
            groups.append(["--window-attn-skip-freq", str(a.global_every)])
    if not a.tied_embeddings:
        groups.append(["--untie-embeddings-and-output-weights"])
    return groups


#: Megatron-FSDP's --data-parallel-sharding-strategy of each ZeRO stage above the distributed optimizer.
_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def sharding_args(c: dict[str, Any]) -> list[list[str]]:
    """The data-parallel sharding and gradient dtype as priced.

    ZeRO-1 is the distributed optimizer; ZeRO-2/3 are Megatron-FSDP (``--use-megatron-fsdp`` with its sharding
    strategy, plus what its README requires: the distributed optimizer for FSDP v1, no fused gradient
    accumulation, the ``fsdp_dtensor`` checkpoint format) with its main-gradient and gradient-communication
    dtypes written out (their default 'auto' is the model's bf16, not what the plan priced).  Below ZeRO-2 a
    bf16 gradient buffer is ``--grad-reduce-in-bf16`` (Megatron's bf16 default accumulates and reduces in fp32).
    """
    zero = int(c.get("zero", 1 if c["distributed_optimizer"] else 0))
    groups: list[list[str]] = [["--use-distributed-optimizer"]] if zero >= 1 else []
    grad = str(c.get("grad_dtype", "fp32"))
    if zero >= 2:
        groups += [["--use-megatron-fsdp"], ["--data-parallel-sharding-strategy", _FSDP_STRATEGY[zero]],
                   ["--megatron-fsdp-main-grads-dtype", grad], ["--megatron-fsdp-grad-comm-dtype", grad],
                   ["--no-gradient-accumulation-fusion"], ["--ckpt-format", "fsdp_dtensor"]]
    elif grad == "bf16":
        groups.append(["--grad-reduce-in-bf16"])
    return groups


def overlap_args(plan: CheckedPlan) -> list[list[str]]:
    """The communication overlaps the step time prices, all off by default in Megatron-LM.

    ``evaluation/step.py`` prices the data-parallel gradient reduce-scatter overlapped with the backward pass
    (``--overlap-grad-reduce``), the distributed optimizer's parameter all-gather overlapped with the next
    forward (``--overlap-param-gather``, which validate_args allows only with the distributed optimizer and
    the gradient overlap), and, with sequence parallelism and a recipe that keeps it, the TP collectives
    overlapped chunk-wise with their GEMMs (``--tp-comm-overlap``: Transformer Engine's userbuffers).
    """
    from dnnplace.models.llm.evaluation.precision import recipe

    c = plan.config
    zero = int(c.get("zero", 1 if c["distributed_optimizer"] else 0))
    groups: list[list[str]] = []
    if c["tp"] > 1 and c["sequence_parallel"] and recipe(plan.job["precision"]).tp_overlap:
        groups.append(["--tp-comm-overlap"])
    if c["dp"] * c["cp"] > 1:
        groups.append(["--overlap-grad-reduce"])
        if zero >= 1:
            groups.append(["--overlap-param-gather"])
    return groups


def cuda_graph_args(scope: str) -> list[list[str]]:
    """The CUDA-graph scope as priced, spelled as megatron-core 0.16.1's TransformerConfig takes it
    (``cuda_graph_impl``, ``cuda_graph_scope``: CudaGraphScope names).  Module scopes and the whole layer are
    Transformer Engine's captures (``make_graphed_callables``; an empty scope is the whole layer), the whole
    iteration the local implementation's (TE's refuses it); TE's captures run with TE's RNG tracker, as
    Megatron-MoE-ModelZoo's commands set it (``--te-rng-tracker``)."""
    if scope == "none":
        return []
    if scope == "full_iteration":
        return [["--cuda-graph-impl", "local"], ["--cuda-graph-scope", "full_iteration"]]
    groups = [["--cuda-graph-impl", "transformer_engine"], ["--te-rng-tracker"]]
    if scope != "layer":
        groups.append(["--cuda-graph-scope", *scope.split("+")])
    return groups


def arguments(plan: CheckedPlan) -> list[list[str]]:
    """The arguments, grouped one option (with its values) per list."""
    c, j = plan.config, plan.job
    groups: list[list[str]] = [
        ["--tensor-model-parallel-size", str(c["tp"])],
    ]
    pipe = pipeline_args(plan)
    groups += [pipe[i:i + 2] for i in range(0, len(pipe), 2)]
    groups += [
        ["--context-parallel-size", str(c["cp"])],
        ["--micro-batch-size", str(c["mbs"])],
        ["--global-batch-size", str(j["global_batch"])],
        ["--seq-length", str(j["seq_len"])],
    ]
    if c["sequence_parallel"] and c["tp"] > 1:
        groups.append(["--sequence-parallel"])
    moe = plan.problem.moe
    modules = [] if c.get("recompute_modules", "none") == "none" else str(c["recompute_modules"]).split("+")
    # MoE selective recompute: the modules priced, an empty list included (recompute_modules=none: nothing)
    groups += [] if moe is not None and c["recompute"] == "selective" else _RECOMPUTE[c["recompute"]]
    groups += sharding_args(c)
    groups += overlap_args(plan)
    if j.get("cross_entropy", "megatron") == "te":  # Transformer Engine's fused cross entropy, as priced
        groups += [["--cross-entropy-loss-fusion"], ["--cross-entropy-fusion-impl", "te"]]
    if int(c.get("offload_layers", 0)):
        # Activation CPU offloading: Megatron-LM's arguments.py makes --cpu-offloading-num-layers N > 0 turn
        # cpu_offloading on (TransformerConfig's cpu_offloading itself has no command-line flag); activations
        # only (cpu_offloading_activations=True, cpu_offloading_weights=False: the defaults).
        groups.append(["--cpu-offloading-num-layers", str(int(c["offload_layers"]))])
    groups += cuda_graph_args(str(c.get("cuda_graphs", "none")))
    groups += model_args(plan.arch, j["seq_len"])
    if moe is not None:  # the experts and their parallel layout (exporters/megatron_moe.py)
        groups += moe_model_args(moe) + moe_parallel_args(
            ep=c["ep"], etp=c["etp"], dispatcher=c["dispatcher"],
            recompute_modules=modules if c["recompute"] == "selective" else (), a2a_overlap=c["a2a_overlap"],
            selective=c["recompute"] == "selective", routing=str(c.get("routing", "balanced")),
            flex_backend=flex_backend(plan))
    groups.append(["--bf16"])
    if j["precision"] == "fp8":
        # the fp8 recipe is priced with FP8 parameters (NeMo's bf16_with_fp8_mixed: fp8_param_gather=True)
        groups.append(["--fp8-format", "hybrid"])
        groups.append(["--fp8-param-gather"])
    return groups


def flex_backend(plan: CheckedPlan) -> str:
    """The flex dispatcher's backend as priced: HybridEP on a device whose HybridEP kernels the catalogue
    measured (``HYBRIDEP_NVLINK``: Megatron-Bridge's Blackwell recipes), DeepEP elsewhere."""
    from dnnplace.core.catalogue_moe import HYBRIDEP_NVLINK

    return "hybridep" if plan.problem.device.name in HYBRIDEP_NVLINK else "deepep"


def render(plan: dict[str, Any] | LLMPlan) -> str:
    """A bash snippet defining the array ``DNNPLACE_MEGATRON_ARGS`` (source it, then pass ``"${...[@]}"``)."""
    checked = checked_plan(plan, "megatron")
    body = ["    " + " ".join(shlex.quote(a) for a in g) for g in arguments(checked)]
    m, cl, c = checked.arch, checked.doc["cluster"], checked.config
    head = [
        "# Megatron-LM pretrain_gpt.py arguments written by dnnplace from an LLM plan.",
        f"# model {shlex.quote(m.name)}: {cl['gpus']} x {shlex.quote(cl['device'])}, tp={c['tp']} "
        f"pp={c['pp']} vp={c['vp']} cp={c['cp']} dp={c['dp']}, {c['num_microbatches']} microbatches per step",
        "# Usage: source this file, then",
        f'#   torchrun ... pretrain_gpt.py "${{{ARRAY}[@]}}" <data, tokenizer, optimizer and checkpoint args>',
        f"# The tokenizer sets the vocabulary ({m.vocab} entries in the plan).",
    ]
    if c.get("cuda_graphs") == "full_iteration" and c.get("a2a_overlap"):
        head.append("# Whole-iteration CUDA graphs with --overlap-moe-expert-parallel-comm need megatron-core 0.18 or "
                    "later (0.16 and 0.17 refuse the pair in TransformerConfig.__post_init__; 0.18 runs "
                    "--cuda-graph-scope full_iteration as --cuda-graph-impl full_iteration).")
    if m.dropout:
        head.append("# The model has dropout; the plan does not record its rates, so Megatron's defaults (0.1) "
                    "apply: set --attention-dropout / --hidden-dropout to the model's.")
    return "\n".join(head + [f"{ARRAY}=("] + body + [")"]) + "\n"
