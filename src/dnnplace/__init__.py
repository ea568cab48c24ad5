"""dnnplace: plan how a deep-learning model is spread over devices, with a proven bound beside every answer.

Four models are planned, each by its own methods and judged by its own cost model:

- LLM serving on a fleet of GPUs of several kinds: replicas, pipeline stages of mixed GPUs, TP, the uneven
  layer split and the engine's batch limits, exported to vLLM, SGLang, TensorRT-LLM, llama.cpp and a Hugging
  Face ``device_map`` (``dnnplace serve``; load it with :func:`load_serving`);
- the paper's placement: which accelerator or CPU core runs each operator of a DNN graph, for
  the highest pipeline throughput or the lowest single-sample latency (Tarnawski et al., NeurIPS 2020);
- Piper's: pipeline stages with data and tensor parallelism and recomputation (NeurIPS 2021);
- the LLM training planner: TP x PP x VP x CP x EP x DP, ZeRO stage, micro-batch, recomputation and
  precision for a Hugging Face config.json (dense or mixture-of-experts) on a GPU system, exported to
  Megatron-LM, torchtitan or DeepSpeed.

Everything the ``dnnplace`` command does is here:

Files
    load (a workload of either model, read once), load_plan, save_plan, with_budget;
    load_workload, save_workload, load_split, save_split (the paper's format), example_path,
    info (the lattice at each reduction and the path ``solve`` will take)
LLM serving
    load_serving (a Hugging Face config.json on a fleet, with a workload and an engine), then solve / evaluate /
    simulate / write_report, and export_serving_plan (vLLM, SGLang, TensorRT-LLM, llama.cpp, Hugging Face)
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

Every function above takes an instance of any model -- the paper's :class:`Workload`, Piper's
:class:`PiperInstance`, an LLM training problem (:func:`load_llm`) or a serving problem
(:func:`load_serving`) -- and dispatches on it.
``import dnnplace`` itself loads almost nothing: each name is imported when first used.

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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dnnplace.errors import DnnplaceError, InfeasibleError, InputError

if TYPE_CHECKING:
    from dnnplace.api import (
        Solution,
        evaluate,
        example_path,
        export,
        export_llm_plan,
        export_serving_plan,
        info,
        load,
        load_llm,
        load_plan,
        load_serving,
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
    from dnnplace.api.methods import Solver
    from dnnplace.models.paper.evaluation import Evaluation
    from dnnplace.models.paper.paper_json import workload_from_records
    from dnnplace.models.paper.simulation import Simulation
    from dnnplace.models.paper.split import Split
    from dnnplace.models.paper.workload import Workload
    from dnnplace.models.piper.spec import PiperInstance

# Where each public name lives; it is imported on first use (PEP 562), so that ``import dnnplace`` (and the
# CLI's start-up) does not pay for numpy, networkx, numba, HiGHS or torch before it needs them.
_LAZY: dict[str, str] = {
    **dict.fromkeys(["Solution", "evaluate", "example_path", "export", "export_llm_plan", "export_serving_plan", "info",
                     "load", "load_llm", "load_serving", "load_plan", "load_split", "load_workload", "methods",
                     "plan_document", "profile", "run",
                     "save_plan", "save_split", "save_workload", "simulate", "solve", "with_budget",
                     "write_report"], "dnnplace.api"),
    "Evaluation": "dnnplace.models.paper.evaluation", "workload_from_records": "dnnplace.models.paper.paper_json",
    "PiperInstance": "dnnplace.models.piper.spec", "Split": "dnnplace.models.paper.split",
    "Workload": "dnnplace.models.paper.workload",
    "Simulation": "dnnplace.models.paper.simulation", "Solver": "dnnplace.api.methods",
}

__all__ = [
    "DnnplaceError", "Evaluation", "InfeasibleError", "InputError", "PiperInstance", "Simulation", "Solution",
    "Solver", "Split", "Workload", "evaluate", "example_path", "export", "export_llm_plan",
    "export_serving_plan", "info", "load", "load_llm", "load_plan", "load_serving", "load_split",
    "load_workload", "methods", "plan_document", "profile", "run", "save_plan", "save_split", "save_workload",
    "simulate", "solve", "with_budget", "workload_from_records", "write_report",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dnnplace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
