"""llama.cpp's forward rate by micro-batch size, published, against the serving model's llama.cpp pricing.

Why: llama.cpp is priced by the roofline on every GPU (no kernel table measures its GGUF kernels), and the
serving search now chooses its slot count (``-np``), so the price of a forward of b tokens -- a decode step of
b slots -- decides the plans.  llama.cpp's CUDA maintainer publishes llama-bench's prompt rate at each
micro-batch size (``-ub``) in his pull requests (tests/data/serving/llamacpp_ubatch.json, each row with its PR):
at ``-ub b`` every forward runs b tokens of one sequence through the model, so the rate is that of llama.cpp's
GEMMs at m = b (mmvq up to 8 tokens, MMQ or cuBLAS above) with attention over at most the test's prompt.  The
project did not write these rows and fits nothing to them.

Each row is priced with ``cost.layer_times`` (what the evaluator prices a step with): the test's N prompt
tokens in N / b forwards of b tokens, the LM head once (llama-bench asks for the last token's logits only).
aiconfigurator has no llama.cpp model: nothing to set beside these.

    PYTHONPATH=src python benchmarks/llamacpp_ubatch.py   # writes benchmarks/results/llamacpp_ubatch.md
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dnnplace.models.serving.cost import Iteration, layer_times  # noqa: E402
from dnnplace.models.serving.load import layer_profile  # noqa: E402

ROWS = ROOT / "tests" / "data" / "serving" / "llamacpp_ubatch.json"
MODEL = ROOT / "examples" / "serving" / "llama3.1-8b.json"  # LLaMA 3 8B's shapes (llama-bench's "llama 8B")
PRECISION = {"Q4_0": "q4_0", "Q6_K": "q6_k", "BF16": "bf16", "F16": "fp16"}
#: the micro-batch bands the summary groups by: llama.cpp's kernels change at 8 (mmvq's largest batch)
BANDS = ((1, 1), (2, 8), (9, 16), (17, 64), (65, 4096))


def predicted(row: dict[str, Any]) -> float:
    """Tokens/s of llama-bench's ``ppN`` at ``-ub b`` as the serving model prices it (module docstring)."""
    n, b = int(row["test"].removeprefix("pp")), int(row["ubatch"])
    m = layer_profile(MODEL, PRECISION[row["type"]], "fp16")
    lt = layer_times(m, row["gpu"], 1, Iteration(0.0, 0.0, float(b), n), None, "pcie", "fp16")
    return n / (n / b * float(lt.per_layer.sum()) + lt.head)


def main() -> int:
    doc = json.loads(ROWS.read_text())
    lines = ["# llama.cpp's forward rate by micro-batch size against the serving model", "",
             "`PYTHONPATH=src python benchmarks/llamacpp_ubatch.py` (module docstring: which rows, how priced).", "",
             doc["source"], "",
             "| PR | GPU | type | test | -ub | measured tok/s | predicted | error |",
             "|---|---|---|---|---|---|---|---|"]
    errs: list[tuple[dict[str, Any], float]] = []
    for row in doc["rows"]:
        pred = predicted(row)
        e = pred / row["tokens_per_s"] - 1.0
        errs.append((row, e))
        lines.append(f"| #{row['pr']} ({row['date']}) | {row['gpu']} | {row['type']} | {row['test']} | {row['ubatch']} "
                     f"| {row['tokens_per_s']:,.0f} | {pred:,.0f} | {e:+.0%} |")
    lines += ["", "By micro-batch band (signed median; median |error|; rows):", "",
              "| weights | -ub | signed median | median abs | rows |", "|---|---|---|---|---|"]
    for quant in (True, False):
        for lo, hi in BANDS:
            sel = [e for r, e in errs if (r["type"] not in ("BF16", "F16")) == quant and lo <= r["ubatch"] <= hi]
            if sel:
                lines.append(f"| {'GGUF quantized' if quant else '16-bit'} | {lo}-{hi} | {statistics.median(sel):+.0%} "
                             f"| {statistics.median(abs(x) for x in sel):.0%} | {len(sel)} |")
    allq = [abs(e) for r, e in errs if r["type"] not in ("BF16", "F16")]
    all16 = [abs(e) for r, e in errs if r["type"] in ("BF16", "F16")]
    lines += ["", f"All rows: 16-bit median |error| {statistics.median(all16):.0%}, GGUF quantized "
              f"{statistics.median(allq):.0%}, largest {max(abs(e) for _, e in errs):.0%}.", ""]
    out = ROOT / "benchmarks" / "results" / "llamacpp_ubatch.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
