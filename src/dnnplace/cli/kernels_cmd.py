"""``dnnplace kernels DEVICE``: what is measured for a device, what falls back to the roofline; one kernel's price."""

from __future__ import annotations

import json
from typing import Optional

import typer

from dnnplace.cli.console import out, user_errors


def kernels(
    device: str = typer.Argument(..., help="A catalogue device name (h100, l40s, rtx-4090, ...)."),
    gemm: Optional[str] = typer.Option(None, "--gemm", help="Price one GEMM: M,N,K[,DTYPE]."),
    attention: Optional[str] = typer.Option(None, "--attention", help="Prefill attention: "
                                            "BATCH,SEQ,HEADS,KV_HEADS,HEAD_DIM[,DTYPE,KV_DTYPE,WINDOW]."),
    decode: Optional[str] = typer.Option(None, "--decode", help="Decode attention: "
                                         "BATCH,KV_LEN,HEADS,KV_HEADS,HEAD_DIM[,KV_DTYPE,WINDOW]."),
    collective: Optional[str] = typer.Option(None, "--collective", help="OP,BYTES,GPUS[,LINK] (all_reduce, "
                                             "all_gather, reduce_scatter, all_to_all; nvlink or network)."),
    p2p: Optional[str] = typer.Option(None, "--p2p", help="BYTES[,LINK]."),
    moe: Optional[str] = typer.Option(None, "--moe", help="TOKENS,HIDDEN,INTER,TOPK,EXPERTS[,TP,EP,DTYPE,ROUTING]."),
    framework: Optional[str] = typer.Option(None, "--framework", help="Tables of trtllm, vllm or sglang "
                                            "(default: the first of them that measured the family)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show which kernel families of DEVICE are measured (tables, versions, shape ranges) and which are priced by
    the roofline; with a shape option, price that one kernel and say where its price came from."""
    with user_errors():
        from dnnplace.api.kernels import describe_kernels, price_kernel

        asked = {k: v for k, v in (("gemm", gemm), ("attention", attention), ("decode", decode),
                                   ("collective", collective), ("p2p", p2p), ("moe", moe)) if v is not None}
        if asked:
            priced = [price_kernel(device, fam, shape, framework) for fam, shape in asked.items()]
            if as_json:
                out.print_json(json.dumps(priced if len(priced) > 1 else priced[0]))
                return
            for p in priced:
                t = p["table"]
                where = f" ({t['framework']} {t['version']} table)" if t.get("source") == "measured" else ""
                shape = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in p["shape"].values())
                out.print(f"{p['device']} {p['family']} {shape}: "
                          f"{p['seconds'] * 1e6:.4g} us, {p['source']}{where}", soft_wrap=True)
            return
        doc = describe_kernels(device, framework)
        if as_json:
            out.print_json(json.dumps(doc))
            return
        out.print(f"{doc['device']}: measured tables "
                  f"{'of aiconfigurator-core system ' + doc['system'] if doc['system'] else 'none (roofline only)'}")
        for name, fam in doc["families"].items():
            if fam["source"] == "none":
                out.print(f"  {name}: no table ({fam['means']})", soft_wrap=True)
                continue
            if fam["source"] != "measured":
                out.print(f"  {name}: roofline (the catalogue's datasheet peaks and published efficiencies)",
                          soft_wrap=True)
                continue
            ranges = ", ".join(f"{a} {lo:g}..{hi:g}" for a, (lo, hi) in fam["ranges"].items())
            keys = sorted({str(k[0]) for k in fam["keys"] if k})
            by = f"{fam['key_fields'][0]}: {', '.join(keys[:12])}; " if fam["key_fields"] else ""
            out.print(f"  {name}: measured, {fam['framework']} {fam['version']}, {fam['points']:,} points; "
                      f"{by}{ranges}", soft_wrap=True)
            if fam.get("choice"):
                out.print(f"    rule: {fam['choice']}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``kernels`` to a typer app."""
    app.command()(kernels)
