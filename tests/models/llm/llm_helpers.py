"""Small shared builders for the LLM planner tests."""

from __future__ import annotations

from pathlib import Path

from dnnplace.arch.hf_config import load_arch
from dnnplace.core.catalogue import device_spec
from dnnplace.models.llm.spec import Cluster, LLMProblem, ParallelConfig, TrainingJob, TransformerArch

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "llm"


def llama(size: str) -> TransformerArch:
    return load_arch(EXAMPLES / f"llama3.1-{size}.json")


def problem(arch: TransformerArch, gpus: int, gbs: int, seq: int = 8192, gpn: int = 8) -> LLMProblem:
    return LLMProblem(arch, Cluster("h100", gpus, gpn), TrainingJob(seq, gbs), device_spec("h100"))


def uniform(arch: TransformerArch, gpus: int, tp: int, pp: int, cp: int, vp: int = 1, mbs: int = 1,
            recompute: str = "none") -> ParallelConfig:
    per = arch.num_layers // (pp * vp)
    return ParallelConfig(tp, pp, vp, cp, gpus // (tp * pp * cp), mbs, recompute, tp > 1, True, (per,) * (pp * vp))
