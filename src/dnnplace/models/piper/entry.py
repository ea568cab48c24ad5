"""Piper's model as the registry sees it: one :class:`~dnnplace.core.protocol.PlannedModel`.

Heavy modules are imported when a step runs, so that ``import dnnplace`` stays light.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from dnnplace.core.protocol import Flag, PlannedModel, need_microbatches, options
from dnnplace.models.piper.spec import PiperInstance, PiperPlan

# What a Piper plan's "instance" block records: (key, PiperInstance attribute, the command-line flag)
_RECORDED = (("maxDevices", "max_devices", "-k"), ("maxMemoryPerDevice", "memory", "--memory"),
             ("bandwidth", "bandwidth", "--bandwidth"), ("mbsInBatch", "batch", "--batch"))


def _evaluate(inst: PiperInstance, plan: Any, **_: Any) -> Any:
    from dnnplace.models.piper.evaluation import evaluate_piper

    return evaluate_piper(inst, plan)


def _simulate(inst: PiperInstance, plan: Any, *, microbatches: int = 64, **_: Any) -> Any:
    from dnnplace.models.piper.simulation import simulate_piper

    need_microbatches(microbatches)
    return simulate_piper(inst, plan, microbatches=microbatches)


def _report(inst: PiperInstance, plan: Any, path: Any, *, title: str | None = None, inputs: Any = (),
            **_: Any) -> Any:
    from dnnplace.models.piper.report import write_piper_report

    return write_piper_report(inst, plan, path, title=title, inputs=inputs)


def _document(inst: PiperInstance, plan: Any, ev: Any) -> dict[str, Any]:
    from dnnplace.models.piper.piper_json import plan_to_dict

    return plan_to_dict(inst, plan, ev)


def _evaluation_document(inst: PiperInstance, ev: Any) -> dict[str, Any]:
    from dnnplace.models.piper.evaluation import evaluation_dict

    return evaluation_dict(inst, ev)


def _reads(doc: Any) -> bool:
    from dnnplace.models.piper.piper_json import is_piper_json

    return bool(is_piper_json(doc))


def _read(doc: Any, source: str, *, bert_layers: int | None = None) -> tuple[PiperInstance, None]:
    from dnnplace.models.piper.piper_json import bert_l, parse_piper

    inst = parse_piper(doc, source=source)
    return (bert_l(inst, bert_layers) if bert_layers is not None else inst), None


def _read_plan(inst: PiperInstance, doc: Any, source: str) -> tuple[PiperInstance, Any]:
    """A Piper plan is judged under the workload file's K, M, BW, N (and the command line's overrides).

    The plan's ``instance`` block records what it was made for: it is checked (one-line errors) and
    compared by :func:`_notes`, never trusted.  Only ``bertLayers`` is taken from it when the
    workload was not built as BERT-L already: it names the graph the plan's nodes belong to.
    """
    from dnnplace.errors import InputError
    from dnnplace.models.piper.piper_json import bert_l, plan_from_dict
    from dnnplace.utils.text import show_value

    params = doc.get("instance", {}) if isinstance(doc, dict) else {}
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InputError(f"{source}: 'instance' must be an object, got {show_value(params)}")
    for key, _, _ in _RECORDED:
        val = params.get(key)
        if val is None:
            continue
        whole = key in ("maxDevices", "mbsInBatch")
        if isinstance(val, bool) or not isinstance(val, (int, float)) or (whole and not isinstance(val, int)):
            raise InputError(f"{source}: instance.{key} must be {'a whole number' if whole else 'a number'},"
                             f" got {show_value(val)}")
    layers = params.get("bertLayers")
    if inst.bert_layers is None and layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int):
            raise InputError(f"{source}: instance.bertLayers must be a whole number, got {show_value(layers)}")
        inst = bert_l(inst, layers)
    return inst, plan_from_dict(inst, doc, source=source)


def _notes(inst: PiperInstance, plan: Any, **_: Any) -> list[str]:
    """One line when the plan records parameters other than those it is judged under."""
    recorded = plan.meta.get("instance") if isinstance(getattr(plan, "meta", None), dict) else None
    if not isinstance(recorded, dict):
        return []
    diffs = []
    for key, attr, flag in _RECORDED:
        val = recorded.get(key)
        used = getattr(inst, attr)
        if val is not None and float(val) != float(used):
            diffs.append(f"{key} {float(val):g} (used: {float(used):g}, {flag})")
    if not diffs:
        return []
    return ["the plan was made for other parameters; judged under the workload's and the command line's: "
            + ", ".join(diffs)]


def _budget(inst: PiperInstance, *, accelerators: int | None = None, memory: float | None = None,
            bandwidth: float | None = None, batch: int | None = None, **_: Any) -> PiperInstance:
    return inst.with_overrides(devices=accelerators, memory=memory, bandwidth=bandwidth, batch=batch)


_BUDGET = frozenset({"accelerators", "memory", "bandwidth", "batch"})

ENTRY = PlannedModel(
    "piper", PiperInstance, PiperPlan, "piper", "a Piper workload", _evaluate, _simulate, _report, _document,
    _read_plan, _notes, read=_read, reads=_reads, with_budget=_budget, evaluation_document=_evaluation_document,
    simulate_defaults=MappingProxyType({"microbatches": 64}),
    simulate_options=options(schedule={"1f1b"}, microbatches=None),  # Piper streams under 1F1B only
    report_options=options(schedule={"1f1b"}, microbatches={8}),  # its page has no timeline
    budget_options=_BUDGET, judge_overrides=_BUDGET,
    load_flags=(Flag("bert_layers", int, "Piper: BERT-L from bert32a100.json."),))
