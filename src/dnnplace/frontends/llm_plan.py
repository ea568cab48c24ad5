"""Read and check an LLM plan file (``dnnplace.llm-plan`` version 1) before any exporter sees it.

Exporters write the plan's values into shell snippets, TOML and JSON that a
trainer will run, so everything is checked here first: every key present and
no unknown key, integers that are real integers (not booleans, floats or
strings) and positive, enums from fixed sets, names without control
characters, and the arithmetic that ties the parallel degrees, batch sizes and
the layer split together.  Each failure is one :class:`InputError` line that
names the field.  The exporters still escape every string they write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.model.llm import LLMPlan
from dnnplace.utils.files import read_json_file
from dnnplace.utils.text import clip, show_value

FORMAT = "dnnplace.llm-plan"
VERSION = 1

MLPS = ("swiglu", "geglu", "gelu", "relu2")
POSITIONS = ("rope", "learned")
NORMS = ("rms", "layer")
RECOMPUTES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")

MAX_INT = 2**40  # far above any real size; keeps generated numbers short and sane
MAX_NAME = 200

_TOP = ("format", "version", "model", "cluster", "job", "config", "prediction", "status", "bound", "gap",
        "exhaustive", "runtime_s")
_MODEL = ("name", "architecture", "family", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "tied_embeddings", "mlp", "position", "norm", "source")
_CLUSTER = ("device", "gpus", "gpus_per_node")
_JOB = ("seq_len", "global_batch", "precision")
_CONFIG = ("tp", "pp", "vp", "cp", "dp", "mbs", "num_microbatches", "recompute", "sequence_parallel",
           "distributed_optimizer", "layers_per_stage", "first_stage_layers", "last_stage_layers")


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read ``path`` (size-capped JSON, one-line errors) and return the validated plan."""
    return validate_plan(read_json_file(path))


def _keys(obj: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {show_value(obj)}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise InputError(f"{where}.{missing[0]}: missing")
    extra = [k for k in obj if k not in keys]
    if extra:
        raise InputError(f"{where}.{clip(extra[0], 60)}: unknown key")
    return obj


def _int(obj: dict[str, Any], where: str, key: str, low: int = 1) -> int:
    v = obj[key]
    if not isinstance(v, int) or isinstance(v, bool):
        raise InputError(f"{where}.{key}: expected an integer, got {show_value(v)}")
    if not low <= v <= MAX_INT:
        raise InputError(f"{where}.{key}: {v} is out of range (at least {low})")
    return v


def _bool(obj: dict[str, Any], where: str, key: str) -> bool:
    v = obj[key]
    if not isinstance(v, bool):
        raise InputError(f"{where}.{key}: expected true or false, got {show_value(v)}")
    return v


def _enum(obj: dict[str, Any], where: str, key: str, choices: tuple[str, ...]) -> str:
    v = obj[key]
    if not isinstance(v, str) or v not in choices:
        raise InputError(f"{where}.{key}: {show_value(v)} is not one of {', '.join(choices)}")
    return v


def _name(obj: dict[str, Any], where: str, key: str) -> str:
    v = obj[key]
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}.{key}: expected a non-empty string, got {show_value(v)}")
    if len(v) > MAX_NAME:
        raise InputError(f"{where}.{key}: longer than {MAX_NAME} characters")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in v):
        raise InputError(f"{where}.{key}: {clip(v, 60)} contains a control character (a newline?)")
    return v


def _model(m: Any) -> None:
    _keys(m, "model", _MODEL)
    for k in ("name", "architecture", "family", "source"):
        _name(m, "model", k)
    for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_key_value_heads",
              "vocab_size"):
        _int(m, "model", k)
    _bool(m, "model", "tied_embeddings")
    _enum(m, "model", "mlp", MLPS)
    _enum(m, "model", "position", POSITIONS)
    _enum(m, "model", "norm", NORMS)
    if m["num_attention_heads"] % m["num_key_value_heads"]:
        raise InputError(f"model.num_key_value_heads: {m['num_key_value_heads']} does not divide "
                         f"num_attention_heads {m['num_attention_heads']}")


def _config(c: Any, m: dict[str, Any], cluster: dict[str, Any], job: dict[str, Any]) -> None:
    _keys(c, "config", _CONFIG)
    tp, pp, vp, cp, dp, mbs, nmb = (_int(c, "config", k) for k in ("tp", "pp", "vp", "cp", "dp", "mbs",
                                                                     "num_microbatches"))
    _enum(c, "config", "recompute", RECOMPUTES)
    _bool(c, "config", "sequence_parallel")
    _bool(c, "config", "distributed_optimizer")
    if tp * pp * cp * dp != cluster["gpus"]:
        raise InputError(f"config: tp*pp*cp*dp = {tp}*{pp}*{cp}*{dp} = {tp * pp * cp * dp} but cluster.gpus is "
                         f"{cluster['gpus']}")
    if dp * mbs * nmb != job["global_batch"]:
        raise InputError(f"config: dp*mbs*num_microbatches = {dp}*{mbs}*{nmb} = {dp * mbs * nmb} but "
                         f"job.global_batch is {job['global_batch']}")
    if vp > 1 and pp == 1:
        raise InputError(f"config.vp: {vp} virtual stages need pp > 1")
    lps = c["layers_per_stage"]
    if not isinstance(lps, list) or len(lps) != pp * vp:
        got = f"{len(lps)} entries" if isinstance(lps, list) else show_value(lps)
        raise InputError(f"config.layers_per_stage: expected a list of pp*vp = {pp * vp} integers, got {got}")
    for i, n in enumerate(lps):
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_INT:
            raise InputError(f"config.layers_per_stage[{i}]: expected an integer >= 0, got {show_value(n)}")
    if sum(lps) != m["num_layers"]:
        raise InputError(f"config.layers_per_stage: sums to {sum(lps)} but model.num_layers is {m['num_layers']}")
    first, last = _int(c, "config", "first_stage_layers", 0), _int(c, "config", "last_stage_layers", 0)
    if first != sum(rank_layers(lps, pp, 0)):
        raise InputError(f"config.first_stage_layers: {first} but layers_per_stage puts "
                         f"{sum(rank_layers(lps, pp, 0))} on pipeline rank 0")
    if last != sum(rank_layers(lps, pp, pp - 1)):
        raise InputError(f"config.last_stage_layers: {last} but layers_per_stage puts "
                         f"{sum(rank_layers(lps, pp, pp - 1))} on pipeline rank {pp - 1}")


def validate_plan(doc: Any) -> dict[str, Any]:
    """Check ``doc`` against the plan schema; return it unchanged, or raise a one-line :class:`InputError`."""
    _keys(doc, "plan", _TOP)
    if doc["format"] != FORMAT:
        raise InputError(f"plan.format: {show_value(doc['format'])} is not {FORMAT!r}")
    if doc["version"] != VERSION or isinstance(doc["version"], bool):
        raise InputError(f"plan.version: {show_value(doc['version'])} is not supported (expected {VERSION})")
    _model(doc["model"])
    cluster = _keys(doc["cluster"], "cluster", _CLUSTER)
    _name(cluster, "cluster", "device")
    _int(cluster, "cluster", "gpus")
    _int(cluster, "cluster", "gpus_per_node")
    job = _keys(doc["job"], "job", _JOB)
    _int(job, "job", "seq_len")
    _int(job, "job", "global_batch")
    _enum(job, "job", "precision", PRECISIONS)
    _config(doc["config"], doc["model"], cluster, job)
    if not isinstance(doc["prediction"], dict):
        raise InputError(f"plan.prediction: expected a JSON object, got {show_value(doc['prediction'])}")
    if not isinstance(doc["status"], str):
        raise InputError(f"plan.status: expected a string, got {show_value(doc['status'])}")
    return doc


def rank_layers(layers_per_stage: list[int], pp: int, rank: int) -> list[int]:
    """Decoder layers of each model chunk on pipeline ``rank`` (virtual stage i runs on rank i % pp)."""
    return layers_per_stage[rank::pp]


def stage_bounds(layers_per_stage: list[int]) -> list[tuple[int, int]]:
    """``(first, end)`` decoder-layer indices of each virtual stage, in model order."""
    out, start = [], 0
    for n in layers_per_stage:
        out.append((start, start + n))
        start += n
    return out


def read_llm_plan(doc: Any, source: str = "plan") -> LLMPlan:
    """A checked plan document as an :class:`~dnnplace.model.llm.LLMPlan` (one-line errors naming the field)."""
    try:
        return LLMPlan.from_dict(validate_plan(doc))
    except InputError as exc:
        raise InputError(f"{clip(source)}: {exc}") from None
