"""What every LLM exporter starts from: the plan as priced, after the project's own rules.

An exporter must write the run that was priced or nothing, so before a line is
rendered the plan goes through the same codec the evaluator reads
(:func:`~dnnplace.models.llm.plan_file.read_llm_plan`) and the same rules the
search applies (:func:`~dnnplace.models.llm.evaluation.rules.check_problem` and
:func:`~dnnplace.models.llm.evaluation.rules.check_config`); a plan they refuse is
refused here in one line, before any text exists, so the CLI writes no file.
The architecture the exporters spell out is the codec's
:class:`~dnnplace.models.llm.spec.TransformerArch`, the one the cost model priced, not
a re-reading of the file's model section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.evaluation.rules import check_config, check_problem
from dnnplace.models.llm.plan_file import read_llm_plan, validate_plan
from dnnplace.models.llm.spec import LLMPlan, LLMProblem, TransformerArch
from dnnplace.utils.text import clip


@dataclass(frozen=True)
class CheckedPlan:
    """A plan ready to export: its validated document (knobs under their plan-file names) and the priced problem."""

    doc: dict[str, Any]
    problem: LLMProblem

    @property
    def arch(self) -> TransformerArch:
        return self.problem.arch

    @property
    def config(self) -> dict[str, Any]:
        """The parallel knobs as the plan file names them (tp, pp, vp, ..., layers_per_stage)."""
        c: dict[str, Any] = self.doc["config"]
        return c

    @property
    def runs_recompute(self) -> str:
        """The recomputation the plan runs: an MoE plan's selective recompute of no module reruns nothing (it is
        priced as ``none``), so a trainer without per-module recompute runs it as ``none``, exactly as priced."""
        c = self.config
        if self.problem.moe is not None and c["recompute"] == "selective" and c["recompute_modules"] == "none":
            return "none"
        return str(c["recompute"])

    @property
    def job(self) -> dict[str, Any]:
        j: dict[str, Any] = self.doc["job"]
        return j


#: Precision recipes the exporters spell out (the others are priced, not yet exported).
EXPORTED_PRECISIONS = ("bf16", "fp8")


def checked_plan(plan: dict[str, Any] | LLMPlan, target: str) -> CheckedPlan:
    """``plan`` (a plan document or an in-memory :class:`LLMPlan`) read and checked by the project's rules.

    Both are read through the plan codec.  Any rule that fails is one
    :class:`DnnplaceError` line naming the target and the rule.
    """
    # An in-memory plan goes through the codec too: it writes every field the cost model reads, and
    # writes names printable, so what is exported is exactly what a plan file of it would export.
    doc = validate_plan(plan.to_dict() if isinstance(plan, LLMPlan) else plan)
    parsed = read_llm_plan(doc)
    try:
        check_problem(parsed.problem)
        check_config(parsed.problem, parsed.config)
    except DnnplaceError as exc:
        raise DnnplaceError(f"export --to {target}: the plan breaks a planner rule: {exc}") from None
    offloaded = int(doc["config"].get("offload_layers", 0))
    if offloaded and target != "megatron":
        # torchtitan 0.2.2's training.enable_cpu_offload moves FSDP2's parameters, gradients and optimizer state,
        # DeepSpeed's activation_checkpointing.cpu_checkpointing only the checkpoints of recomputed layers:
        # neither offloads the saved activations of N layers that are not recomputed.
        raise refuse(target, parsed.problem.arch, f"offload_layers={offloaded} (activation CPU offloading) has no "
                                                  f"{target} setting; re-plan with --fix offload_layers=0")
    moe = parsed.problem.moe
    if moe is not None and moe.attention_chunk:
        # Llama 4's chunked attention is priced (its FLOPs and kernels); megatron-core 0.16.1's TransformerConfig,
        # torchtitan 0.2.2's model registry and DeepSpeed's config have no setting for it.
        raise refuse(target, parsed.problem.arch, f"attention_chunk={moe.attention_chunk} (chunked local attention) "
                                                  f"has no {target} setting")
    cross_entropy = parsed.problem.job.cross_entropy
    if cross_entropy != "megatron" and target != "megatron":
        # Transformer Engine's cross entropy keeps no fp32 copy of the logits (priced: ce_logit_bytes); torchtitan's
        # loss and DeepSpeed's model code compute it their own way, so the plan's memory would not hold.
        raise refuse(target, parsed.problem.arch, f"cross_entropy={cross_entropy} (Transformer Engine's fused cross "
                                                  f"entropy) has no {target} setting; re-plan with --cross-entropy "
                                                  "megatron")
    precision = parsed.problem.job.precision
    if precision not in EXPORTED_PRECISIONS:
        raise refuse(target, parsed.problem.arch, f"precision {precision} is priced but not yet written by the "
                                                  "exports (bf16 and fp8 are); plan with --precision bf16 or fp8")
    return CheckedPlan(doc, parsed.problem)


def refuse(target: str, arch: TransformerArch, why: str) -> DnnplaceError:
    """The one-line refusal of an export the target cannot express exactly."""
    return DnnplaceError(f"export --to {target}: cannot build model '{clip(arch.name, 60)}' as priced: {why}")
