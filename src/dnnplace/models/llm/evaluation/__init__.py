"""The ONE cost model of LLM training plans: ``evaluate(problem, config) -> LLMEstimate``.

Pieces: :mod:`.flops` (compute), :mod:`.memory`, :mod:`.comm` (collectives),
:mod:`.schedule` (pipeline), :mod:`.step` (the vectorised whole the search also calls),
:mod:`.rules` (Megatron's validity rules).
"""

from dnnplace.models.llm.evaluation.flops import model_flops_per_step
from dnnplace.models.llm.evaluation.rules import check_config, check_problem
from dnnplace.models.llm.evaluation.step import Candidates, evaluate, evaluate_batch

__all__ = ["Candidates", "check_config", "check_problem", "evaluate", "evaluate_batch", "model_flops_per_step"]
