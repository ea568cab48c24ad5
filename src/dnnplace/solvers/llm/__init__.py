"""The LLM training planner's search: ``search(problem, fixed, time_limit, progress) -> LLMPlan``."""

from dnnplace.solvers.llm.search import FIXABLE, search

__all__ = ["FIXABLE", "search"]
