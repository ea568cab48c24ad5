"""An LLM training problem from a config.json (a folder holding one, or ``file.py:fn``) and a cluster.

The one place a problem is built, for :func:`dnnplace.load` (which reads a JSON file once and hands
the decoded document here) and :func:`dnnplace.load_llm` (a typed shortcut): the architecture is
read without weights, the device's figures come from the catalogue, and ``system`` names a whole
machine (its GPU and NVLink domain) instead of ``device`` and ``gpus_per_node``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.llm.spec import PRECISIONS, LLMProblem

#: The options a problem takes beyond its config: (name, kind, help); required ones have no default.
PROBLEM_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("gpus", int, "LLM: number of GPUs (required for a config.json)."),
    ("seq_len", int, "LLM: sequence length (required for a config.json)."),
    ("global_batch", int, "LLM: global batch, sequences per step (required for a config.json)."),
    ("gpus_per_node", int, "LLM: GPUs per NVLink domain [default: 8]."),
    ("device", str, "LLM: catalogue device: h100 (default), h200, a100, b200, gb200, b300, gb300."),
    ("system", str, "LLM: a whole system instead of --device and --gpus-per-node: dgx-h100, dgx-h200,"
                    " dgx-b200, dgx-b300, gb200-nvl72, gb300-nvl72."),
    ("precision", str, f"LLM: precision recipe: {', '.join(PRECISIONS)} [default: bf16]."),
    ("cross_entropy", str, "LLM: cross-entropy implementation: megatron (default) or te (Transformer Engine's,"
                           " which Megatron-Bridge's recipes set)."),
)
REQUIRED = ("gpus", "seq_len", "global_batch")


def is_config_path(text: str) -> bool:
    """A ``file.py:fn`` factory or a folder holding a config.json: inputs only the LLM planner reads."""
    if ":" in text and text.rpartition(":")[0].endswith(".py"):
        return True
    try:
        return Path(text).is_dir() and (Path(text) / "config.json").exists()
    except (OSError, ValueError):
        return False


def is_hf_config(doc: Any) -> bool:
    """A decoded Hugging Face config (``model_type`` or ``architectures`` at the top, no graph nodes)."""
    return isinstance(doc, dict) and "nodes" not in doc and ("model_type" in doc or "architectures" in doc)


def machine(system: str | None, device: str | None, gpus_per_node: int | None, gpus: int) -> tuple[str, int]:
    """(catalogue device, NVLink group size) from ``system`` or from ``device`` / ``gpus_per_node``."""
    if system is None:
        return device or "h100", 8 if gpus_per_node is None else gpus_per_node
    if device is not None or gpus_per_node is not None:
        raise DnnplaceError("give --system or --device / --gpus-per-node, not both")
    from dnnplace.core.systems import system_spec

    spec = system_spec(system)
    group = spec.domain_for(gpus)
    if gpus > spec.nvlink_domain and gpus % group:  # past one domain the job fills whole groups, consecutively
        if gpus % spec.nvlink_domain:  # said of the system the user named, not of a gpus-per-node never given
            whole = (f"{group}-GPU segments or whole {spec.nvlink_domain}-GPU" if group != spec.nvlink_domain
                     else f"{group}-GPU")
            raise DnnplaceError(f"--system {system}: {gpus} GPUs is more than one {spec.nvlink_domain}-GPU NVLink"
                                f" domain and not whole {whole} NVLink domains; give a multiple of "
                                f"{group}{'' if group == spec.nvlink_domain else f' or {spec.nvlink_domain}'}")
        group = spec.nvlink_domain  # whole racks (144 on two NVL72): each rack's domain, not its 64-GPU segment
    return spec.gpu, group


def problem(spec: str | Path | None, *, doc: Any = None, where: str = "", gpus: int | None = None,
            seq_len: int | None = None, global_batch: int | None = None, gpus_per_node: int | None = None,
            device: str | None = None, system: str | None = None, precision: str | None = None,
            cross_entropy: str | None = None) -> LLMProblem:
    """The problem of a config (``doc`` when already decoded, else read from ``spec``) on a cluster."""
    from dnnplace.arch.hf_config import arch_from_dict, load_arch
    from dnnplace.arch.moe_config import MOE_MODEL_TYPES, moe_from_dict
    from dnnplace.core.catalogue import device_spec
    from dnnplace.models.llm.spec import Cluster, TrainingJob

    given = {"gpus": gpus, "seq_len": seq_len, "global_batch": global_batch}
    missing = [k for k in REQUIRED if given[k] is None]
    if missing:
        raise DnnplaceError(f"an LLM config.json needs {', '.join(missing)} (--{missing[0].replace('_', '-')})")
    assert gpus is not None and seq_len is not None and global_batch is not None
    dev, per_node = machine(system, device, gpus_per_node, gpus)
    if doc is None:
        from dnnplace.arch.moe_config import is_moe_config, load_moe

        moe = load_moe(str(spec)) if is_moe_config(str(spec)) else None
        arch = moe.arch if moe else load_arch(str(spec))
    else:
        mt = doc.get("model_type") if isinstance(doc, dict) else None
        moe = moe_from_dict(doc, where) if mt in MOE_MODEL_TYPES else None
        arch = moe.arch if moe else arch_from_dict(doc, where)
    return LLMProblem(arch, Cluster(dev.lower(), gpus, per_node), TrainingJob(seq_len, global_batch,
                      precision or "bf16", cross_entropy or "megatron"), device_spec(dev), moe=moe)
