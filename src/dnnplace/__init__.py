"""dnnplace: optimal placement of DNN operators on accelerators and CPU cores.

Public API: :func:`load_workload`, :func:`evaluate`, :func:`solve`, and the
:class:`Workload`, :class:`Split`, :class:`Evaluation`, :class:`Solution` types.
"""

from dnnplace.api import Solution, solve
from dnnplace.errors import DnnplaceError, InfeasibleError, InputError
from dnnplace.evaluate import Evaluation, evaluate
from dnnplace.frontends.paper_json import load_split, load_workload, save_workload, workload_from_records
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload

__all__ = [
    "DnnplaceError", "Evaluation", "InfeasibleError", "InputError", "Solution", "Split", "Workload",
    "evaluate", "load_split", "load_workload", "save_workload", "solve", "workload_from_records",
]
__version__ = "0.1.0"
