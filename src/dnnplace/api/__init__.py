"""The public Python API: everything the ``dnnplace`` command does, as functions, for every planned model.

The models: the paper's placement of a DNN graph on accelerators and CPU cores (Tarnawski et al.,
NeurIPS 2020), Piper's stages with data / tensor parallelism and recomputation (NeurIPS 2021), and
the LLM training planner (TP x PP x VP x CP x DP on a Hugging Face config).  Each function takes
an instance of any of them and dispatches on its type (:mod:`dnnplace.api.models`); every argument
is checked once, here, before any work (:mod:`dnnplace.utils.params`).  The implementation lives in
small modules named by what they do; this namespace only re-exports them:

- :mod:`~dnnplace.api.files`: ``load``, ``load_plan``, ``save_plan``, ``with_budget``, the paper's formats;
- :mod:`~dnnplace.api.planning`: ``methods``, ``solve`` (a :class:`Solution`, its ``proof``);
- :mod:`~dnnplace.api.models`: the registry (``proof_of(plan)``: what any plan records as proven);
- :mod:`~dnnplace.api.judge`: ``evaluate``, ``simulate``, ``write_report``;
- :mod:`~dnnplace.api.llm`: ``load_llm``, ``export_llm_plan``;
- :mod:`~dnnplace.api.serving`: ``load_serving``, ``export_serving_plan``;
- :mod:`~dnnplace.api.lattice`: ``info``;
- :mod:`~dnnplace.api.pytorch`: ``profile``, ``run``, ``export``, ``piper_document``.
"""

from __future__ import annotations

from dnnplace.api.files import (
    example_path,
    load,
    load_plan,
    load_split,
    load_with_plan,
    load_workload,
    plan_document,
    plan_notes,
    save_plan,
    save_split,
    save_workload,
    with_budget,
)
from dnnplace.api.judge import evaluate, simulate, write_report
from dnnplace.api.lattice import LatticeStep, WorkloadInfo, info
from dnnplace.api.llm import export_llm_plan, load_llm
from dnnplace.api.models import Instance, Proof
from dnnplace.api.planning import Solution, default_method, methods, solve, with_runtime
from dnnplace.api.pytorch import export, piper_document, profile, run
from dnnplace.api.serving import export_serving_plan, load_serving, serving_export_note

__all__ = ["Instance", "LatticeStep", "Proof", "Solution", "WorkloadInfo", "default_method", "evaluate",
           "example_path", "export", "export_llm_plan", "export_serving_plan", "info", "load", "load_llm",
           "load_plan", "load_serving", "load_split", "load_with_plan", "load_workload", "methods",
           "piper_document", "plan_document", "plan_notes", "profile", "run", "save_plan", "save_split",
           "serving_export_note",
           "save_workload", "simulate", "solve", "with_budget", "with_runtime", "write_report"]
