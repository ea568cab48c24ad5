"""The LLM training planner's entry points: a problem from a Hugging Face config, a plan for a trainer.

The problem is then solved, evaluated, simulated and reported by the same functions as every model.
"""

from __future__ import annotations

from pathlib import Path

from dnnplace.models.llm.rules import CROSS_ENTROPIES
from dnnplace.models.llm.spec import PRECISIONS, LLMProblem
from dnnplace.utils.params import choice, integer, path_like, text, validate_params

__all__ = ["export_llm_plan", "load_llm"]

PathLike = str | Path
_COUNT = integer(1)  # the planner's own limits (LLM_LIMITS) bound them above, naming the field


@validate_params(model=path_like(), gpus=_COUNT, seq_len=_COUNT, global_batch=_COUNT, gpus_per_node=_COUNT,
                 device=text(64), precision=choice(*PRECISIONS), cross_entropy=choice(*CROSS_ENTROPIES))
def load_llm(model: PathLike, *, gpus: int, seq_len: int, global_batch: int, gpus_per_node: int = 8,
             device: str = "h100", precision: str = "bf16", cross_entropy: str = "megatron") -> LLMProblem:
    """An LLM training problem: a Hugging Face ``config.json`` (or its folder, or ``file.py:fn``) on a cluster.

    The architecture is read without weights; the device's figures come from the catalogue
    (``docs/catalogue.md``).

    Examples
    --------
    >>> import dnnplace
    >>> pr = dnnplace.load_llm("examples/llm/llama3.1-8b.json", gpus=8, seq_len=8192, global_batch=128)
    >>> sol = dnnplace.solve(pr, cp=2, tp=1, pp=1, mbs=1, recompute="none")
    >>> sol.plan.config.dp, sol.status, round(sol.value, 1) > 0
    (4, 'optimal', True)
    """
    from dnnplace.models.llm.load import problem

    return problem(model, gpus=gpus, seq_len=seq_len, global_batch=global_batch, gpus_per_node=gpus_per_node,
                   device=device, precision=precision, cross_entropy=cross_entropy)


@validate_params(path=path_like(), to=text(64))
def export_llm_plan(path: PathLike, to: str) -> str:
    """An LLM plan file in the format of a trainer: ``megatron``, ``torchtitan`` or ``deepspeed``.

    The plan is validated first (every value written into the output is checked or escaped).
    """
    from dnnplace.models.llm.exporters import export as _export
    from dnnplace.models.llm.plan_file import load_plan as _load_llm_plan

    return _export(_load_llm_plan(path), to)
