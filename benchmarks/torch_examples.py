"""Predicted max-load vs measured time per sample for the PyTorch examples (this machine, gloo).

Each example is profiled with ``--device host`` (link latency and bandwidth
measured by a gloo ping-pong), solved with the DP for 2 accelerators, and run
with one process per stage.

    python benchmarks/torch_examples.py [--microbatches 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["mlp_skip", "transformer_encoder", "residual_cnn"]


def dnnplace(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "dnnplace", *args], check=True, capture_output=True, text=True,
                          cwd=ROOT).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--microbatches", type=int, default=32)
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    table = Table(title="PyTorch examples: 2-accelerator DP split, predicted vs measured (ms per sample)")
    for col in ("example", "forward on 1 core", "stages", "predicted max-load", "measured", "error", "outputs match"):
        table.add_column(col, justify="left" if col == "example" else "right")
    largest = None
    with tempfile.TemporaryDirectory() as tmp:
        for ex in EXAMPLES:
            w = Path(tmp) / f"{ex}.json"
            s = Path(tmp) / f"{ex}_split.json"
            dnnplace("profile", f"examples/{ex}.py:build", "-o", str(w), "--accelerators", "2")
            dnnplace("solve", str(w), "-o", str(s), "-q")
            res = json.loads(dnnplace("run", f"examples/{ex}.py:build", str(s), "-w", str(w), "-n",
                                      str(args.microbatches), "--json"))
            doc = json.loads(w.read_text())
            total = sum(n["cpuLatency"] for n in doc["nodes"])
            err = res["measured_time_per_sample"] / res["predicted_max_load"] - 1
            table.add_row(ex, f"{total:.2f}", str(len(res["stages"])), f"{res['predicted_max_load']:.2f}",
                          f"{res['measured_time_per_sample']:.2f}", f"{100 * err:+.1f}%",
                          "yes" if res["outputs_match"] else "NO")
            if largest is None or total > largest[1]:
                largest = (ex, total, err)
            print(f"done {ex}; link {doc['dnnplace']['linkLatencyMs']:.3f} ms + {doc['dnnplace']['linkBandwidth']:.3g}"
                  " B/s", file=sys.stderr)
    Console(width=160).print(table)
    ex, _, err = largest
    print(f"largest example {ex}: measured is {100 * err:+.1f}% off the prediction "
          f"({'within' if abs(err) <= 0.25 else 'OUTSIDE'} the 25% target)")


if __name__ == "__main__":
    main()
