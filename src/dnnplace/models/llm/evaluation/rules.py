"""Megatron's validity rules for a problem and a configuration: one-line DnnplaceError naming the rule.

The rule set itself is written once in :mod:`dnnplace.models.llm.rules` (vectorised predicates over
named columns), below the plan-file reader that applies it too; the evaluator, the search and the
exporters call :func:`check_problem` and :func:`check_config` from here.
"""

from __future__ import annotations

from dnnplace.models.llm.rules import CONFIG_RULES, PROBLEM_RULES, Rule, check_config, check_problem, filter_rows

__all__ = ["CONFIG_RULES", "PROBLEM_RULES", "Rule", "check_config", "check_problem", "filter_rows"]
