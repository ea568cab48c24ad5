"""The evaluator: the single cost model every solver, report and runtime uses."""

from dnnplace.models.paper.evaluation.evaluator import (
    DeviceReport,
    Evaluation,
    Violation,
    evaluate,
    evaluate_assignment,
)

__all__ = ["DeviceReport", "Evaluation", "Violation", "evaluate", "evaluate_assignment"]
