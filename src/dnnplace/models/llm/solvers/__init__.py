"""The LLM training planner's search: ``search(problem, fixed, time_limit, progress) -> LLMPlan``."""

from dnnplace.models.llm.solvers.search import FIXABLE, search

__all__ = ["FIXABLE", "search"]
