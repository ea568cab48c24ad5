"""Megatron's validity rules for a problem and a configuration: one-line DnnplaceError when broken."""

from __future__ import annotations

from dnnplace.errors import DnnplaceError
from dnnplace.model.llm import PRECISIONS, RECOMPUTE, LLMProblem, ParallelConfig


def check_problem(problem: LLMProblem) -> None:
    """Refuse what the model cannot price: MoE, devices without sourced efficiencies, hostile clusters."""
    a, c, j, d = problem.arch, problem.cluster, problem.job, problem.device
    if a.num_experts > 1:
        raise DnnplaceError(f"{a.name}: mixture-of-experts ({a.num_experts} experts) is not modelled")
    if not d.plannable:
        raise DnnplaceError(f"device {d.name}: no published efficiency figures in the catalogue; use h100, h200, "
                            "a100 or b200")
    if j.precision not in PRECISIONS:
        raise DnnplaceError(f"precision must be one of {', '.join(PRECISIONS)}, got '{j.precision}'")
    d.peak(j.precision)
    for name, v in (("gpus", c.gpus), ("gpus_per_node", c.gpus_per_node), ("seq_len", j.seq_len),
                    ("global_batch", j.global_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise DnnplaceError(f"{name} must be a positive integer, got {v!r}")
    if c.gpus > c.gpus_per_node and c.gpus % c.gpus_per_node:
        raise DnnplaceError(f"gpus {c.gpus} is not a multiple of gpus_per_node {c.gpus_per_node}")


def check_config(problem: LLMProblem, g: ParallelConfig) -> None:
    """Megatron's divisibility rules (docs/llm_planner.md, "Decision space")."""
    a, n, j = problem.arch, problem.cluster.gpus, problem.job

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise DnnplaceError(f"config {msg}")

    for name in ("tp", "pp", "vp", "cp", "dp", "mbs"):
        v = getattr(g, name)
        need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{name} must be a positive integer")
    need(g.tp * g.pp * g.cp * g.dp == n, f"tp*pp*cp*dp = {g.tp * g.pp * g.cp * g.dp} != {n} GPUs")
    need(a.heads % g.tp == 0 and a.kv_heads % g.tp == 0,
         f"tp={g.tp} must divide heads {a.heads} and kv heads {a.kv_heads}")
    need(g.cp == 1 or j.seq_len % (2 * g.cp) == 0, f"seq_len {j.seq_len} not divisible by 2*cp = {2 * g.cp}")
    need(not g.sequence_parallel or (j.seq_len // g.cp) % g.tp == 0, "sequence parallel needs seq/cp divisible by tp")
    need(j.global_batch % (g.dp * g.mbs) == 0,
         f"global batch {j.global_batch} not divisible by dp*mbs = {g.dp * g.mbs}")
    need(g.recompute in RECOMPUTE, f"recompute must be one of {', '.join(RECOMPUTE)}")
    need(g.pp <= a.num_layers, f"pp={g.pp} exceeds {a.num_layers} layers")
    m = j.global_batch // (g.dp * g.mbs)
    if g.vp > 1:
        need(g.pp >= 2, "interleaving (vp > 1) needs pp >= 2")
        need(m % g.pp == 0, f"interleaving needs micro-batches {m} divisible by pp={g.pp}")
    need(len(g.layers_per_stage) == g.pp * g.vp, f"layers_per_stage needs pp*vp = {g.pp * g.vp} entries")
    need(all(isinstance(x, int) and x >= 1 for x in g.layers_per_stage), "every virtual stage needs >= 1 layer")
    need(sum(g.layers_per_stage) == a.num_layers, f"layers_per_stage sums to {sum(g.layers_per_stage)}, "
                                                  f"the model has {a.num_layers}")
