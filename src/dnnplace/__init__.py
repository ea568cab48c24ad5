"""dnnplace: optimal placement of DNN operators on accelerators and CPU cores.

Decide which device runs each operator of a deep-learning graph so that a
pipeline of devices reaches the highest throughput (or the lowest
single-sample latency), with a proven bound beside every answer
(Tarnawski et al., NeurIPS 2020; Piper's model, NeurIPS 2021).

Everything the ``dnnplace`` command does is here:

Files
    load (a workload of either model, read once), load_plan, save_plan, with_budget;
    load_workload, save_workload, load_split, save_split (the paper's format), example_path,
    info (the lattice at each reduction and the path ``solve`` will take)
LLM training
    load_llm (a Hugging Face config.json on a cluster), then solve / evaluate / simulate / write_report,
    and export_llm_plan (Megatron-LM, torchtitan, DeepSpeed)
Placing
    solve (any of :func:`methods` for the instance's model, with its own parameters), methods
Judging and showing
    evaluate, simulate, write_report
PyTorch
    profile (trace + profile a model into a workload), run (execute or train a
    split on torch.distributed), export (stage lists, torch.distributed.pipelining)

Every function above takes an instance of either model -- the paper's :class:`Workload`, or
Piper's :class:`PiperInstance` (data / tensor parallelism, recomputation) -- and dispatches on it.

Types: :class:`Workload`, :class:`PiperInstance`, :class:`Split`, :class:`Solution`, :class:`Evaluation`,
:class:`Simulation`, :class:`Solver` (the base of every method), and the errors
:class:`DnnplaceError`, :class:`InputError`, :class:`InfeasibleError`.

Examples
--------
>>> import dnnplace
>>> w = dnnplace.load_workload(dnnplace.example_path("gnmt_training"))
>>> sol = dnnplace.solve(w, "dp")
>>> sol.status, round(sol.value, 3)
('optimal', 107.004)
"""

from dnnplace.api import (
    Solution,
    evaluate,
    example_path,
    export,
    export_llm_plan,
    info,
    load,
    load_llm,
    load_plan,
    load_split,
    load_workload,
    methods,
    plan_document,
    profile,
    run,
    save_plan,
    save_split,
    save_workload,
    simulate,
    solve,
    with_budget,
    write_report,
)
from dnnplace.errors import DnnplaceError, InfeasibleError, InputError
from dnnplace.evaluation import Evaluation
from dnnplace.frontends.paper_json import workload_from_records
from dnnplace.model.piper import PiperInstance
from dnnplace.model.split import Split
from dnnplace.model.workload import Workload
from dnnplace.simulation import Simulation
from dnnplace.solvers import Solver

__all__ = [
    "DnnplaceError", "Evaluation", "InfeasibleError", "InputError", "PiperInstance", "Simulation", "Solution",
    "Solver", "Split", "Workload", "evaluate", "example_path", "export", "export_llm_plan", "info", "load",
    "load_llm", "load_plan", "load_split", "load_workload", "methods", "plan_document", "profile", "run",
    "save_plan", "save_split", "save_workload", "simulate", "solve", "with_budget", "workload_from_records",
    "write_report",
]
__version__ = "0.1.0"
