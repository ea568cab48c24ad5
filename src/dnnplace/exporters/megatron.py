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

Every value is an integer checked by the plan validator or a word from a fixed
table; the array is still built with :func:`shlex.quote` so that nothing in it
can be read by bash as anything but one argument.
"""

from __future__ import annotations

import shlex
from typing import Any

from dnnplace.frontends.llm_plan import rank_layers

ARRAY = "DNNPLACE_MEGATRON_ARGS"

_NORM = {"rms": "RMSNorm", "layer": "LayerNorm"}
_POSITION = {"rope": "rope", "learned": "learned_absolute"}
_MLP_FLAGS = {"swiglu": ["--swiglu"], "geglu": ["--swiglu"], "relu2": ["--squared-relu"], "gelu": []}
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


def layout_string(layers_per_stage: list[int]) -> str:
    """``--pipeline-model-parallel-layout`` for an arbitrary split: one ``|``-separated entry per virtual stage."""
    last = len(layers_per_stage) - 1
    return "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == last else "")
                    for i, n in enumerate(layers_per_stage))


def pipeline_args(plan: dict[str, Any]) -> list[str]:
    """The pipeline options that make Megatron build exactly ``config.layers_per_stage``."""
    c, n = plan["config"], plan["model"]["num_layers"]
    pp, vp, lps = c["pp"], c["vp"], c["layers_per_stage"]
    args = ["--pipeline-model-parallel-size", str(pp)]
    if pp == 1:
        return args
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


def arguments(plan: dict[str, Any]) -> list[list[str]]:
    """The arguments, grouped one option (with its values) per list."""
    m, c, j = plan["model"], plan["config"], plan["job"]
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
        ["--max-position-embeddings", str(j["seq_len"])],
    ]
    if c["sequence_parallel"] and c["tp"] > 1:
        groups.append(["--sequence-parallel"])
    groups += _RECOMPUTE[c["recompute"]]
    if c["distributed_optimizer"]:
        groups.append(["--use-distributed-optimizer"])
    groups += [
        ["--num-layers", str(m["num_layers"])],
        ["--hidden-size", str(m["hidden_size"])],
        ["--ffn-hidden-size", str(m["ffn_hidden_size"])],
        ["--num-attention-heads", str(m["num_attention_heads"])],
    ]
    if m["num_key_value_heads"] != m["num_attention_heads"]:
        groups += [["--group-query-attention"], ["--num-query-groups", str(m["num_key_value_heads"])]]
    groups += [[f] for f in _MLP_FLAGS[m["mlp"]]]
    groups += [["--position-embedding-type", _POSITION[m["position"]]], ["--normalization", _NORM[m["norm"]]]]
    if not m["tied_embeddings"]:
        groups.append(["--untie-embeddings-and-output-weights"])
    groups.append(["--bf16"])
    if j["precision"] == "fp8":
        groups.append(["--fp8-format", "hybrid"])
    return groups


def render(plan: dict[str, Any]) -> str:
    """A bash snippet defining the array ``DNNPLACE_MEGATRON_ARGS`` (source it, then pass ``"${...[@]}"``)."""
    m, cl, c = plan["model"], plan["cluster"], plan["config"]
    head = [
        "# Megatron-LM pretrain_gpt.py arguments written by dnnplace from an LLM plan.",
        f"# model {shlex.quote(m['name'])}: {cl['gpus']} x {shlex.quote(cl['device'])}, tp={c['tp']} "
        f"pp={c['pp']} vp={c['vp']} cp={c['cp']} dp={c['dp']}, {c['num_microbatches']} microbatches per step",
        "# Usage: source this file, then",
        f'#   torchrun ... pretrain_gpt.py "${{{ARRAY}[@]}}" <data, tokenizer, optimizer and checkpoint args>',
        f"# The tokenizer sets the vocabulary ({m['vocab_size']} entries in the plan).",
        f"{ARRAY}=(",
    ]
    body = ["    " + " ".join(shlex.quote(a) for a in g) for g in arguments(plan)]
    return "\n".join(head + body + [")"]) + "\n"
