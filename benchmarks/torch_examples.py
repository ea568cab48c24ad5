"""Predicted vs measured for the PyTorch examples (this machine, gloo, one process per stage).

Each example is profiled with ``--device host`` (link cost measured by a gloo
ping-pong), solved with the DP for 2 accelerators, and run.

    python benchmarks/torch_examples.py [--microbatches 32]            # forward: max-load vs time per sample
    python benchmarks/torch_examples.py --training [--schedule 1f1b]   # training: time per sample and memory
    python benchmarks/torch_examples.py --training --trials 3          # and the median error over 3 trials

Training rows: the predicted max-load (forward + backward of the busiest
stage) and the simulated time per sample for the same schedule and N; the
measured steady-state time per sample (wall clock, measured as the simulator
measures its timeline), the same less the busiest stage's run-queue wait
(time it was runnable while another process had the CPU), and the
bottleneck stage's CPU time per sample (all
threads of its process: what the time per sample is with a core per stage
and no other tenant -- the quantity the max-load predicts); peak activation
memory per stage (tensor bytes kept for backward) measured vs predicted (per
microbatch stash x microbatches in flight), worst stage.  The load average
tells how busy the machine was: on 2 cores shared with other work the wall
clock is mostly other tenants' time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["mlp_skip", "transformer_encoder", "residual_cnn", "unet", "mlp_mixer"]


def dnnplace(*args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "dnnplace", *args], check=True, capture_output=True, text=True,
                          cwd=ROOT, env=env).stdout


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def forward(args) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="PyTorch examples: 2-accelerator DP split, predicted vs measured (ms per sample)")
    for col in ("example", "forward on 1 core", "stages", "predicted max-load", "measured", "error",
                "mean less run-queue", "err", "bottleneck CPU", "err CPU", "outputs match", "load avg"):
        table.add_column(col, justify="left" if col == "example" else "right")
    with tempfile.TemporaryDirectory() as tmp:
        for ex in args.examples:
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
                          f"{res['measured_time_per_sample']:.2f}", pct(err),
                          f"{res['measured_mean_time_per_sample_less_runqueue_wait']:.2f}",
                          pct(res["measured_mean_time_per_sample_less_runqueue_wait"] / res["predicted_max_load"] - 1),
                          f"{res['measured_bottleneck_cpu_per_sample']:.2f}",
                          pct(res["measured_bottleneck_cpu_per_sample"] / res["predicted_max_load"] - 1),
                          "yes" if res["outputs_match"] else "NO", f"{res['load_average']:.1f}")
            print(f"done {ex}; link {doc['dnnplace']['linkLatencyMs']:.3f} ms + {doc['dnnplace']['linkBandwidth']:.3g}"
                  " B/s", file=sys.stderr)
    Console(width=200).print(table)


def training(args) -> None:
    from rich.console import Console
    from rich.table import Table

    trials = []
    for trial in range(args.trials):
        table = Table(title=f"Training, 2-accelerator DP split, N={args.microbatches}, {args.steps} steps"
                            + (f", trial {trial + 1} of {args.trials}" if args.trials > 1 else "")
                            + ": predicted vs measured (ms per sample, MB)")
        cols = ("example", "sched", "stages", "max-load", "simulated", "wall", "err wall/sim", "wall-rq", "err",
                "bottleneck CPU", "err CPU/max-load", "peak act. meas/pred", "err mem", "params match",
                "load avg")
        for col in cols:
            table.add_column(col, justify="left" if col == "example" else "right")
        rows = training_trial(args, table)
        Console(width=200).print(table)
        summarise(rows)
        trials.append(rows)
    if args.trials > 1:
        # one trial is one profile and one run per row; on a shared machine either can land at a fast or a
        # slow moment, so the model's error is the median over independent trials
        table = Table(title=f"Median over {args.trials} trials (each: profile, solve, run)")
        for col in ("example", "sched", "errors wall/sim per trial", "median", "errors CPU/max-load per trial",
                    "median CPU"):
            table.add_column(col, justify="left" if col in ("example", "sched") else "right")
        medians = []
        for i, row in enumerate(trials[0]):
            errs = [t[i]["error_vs_simulated"] for t in trials]
            cpu = [t[i]["error_cpu_vs_max_load"] for t in trials]
            medians.append({**row, "error_vs_simulated": statistics.median(errs),
                            "params_match": all(t[i]["params_match"] for t in trials),
                            "loss_match": all(t[i]["loss_match"] for t in trials)})
            table.add_row(row["example"], row["schedule"], " ".join(pct(e) for e in errs),
                          pct(statistics.median(errs)), " ".join(pct(e) for e in cpu), pct(statistics.median(cpu)))
        Console(width=200).print(table)
        print("median over trials: ", end="")
        summarise(medians)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(trials if args.trials > 1 else trials[0], indent=1))


def summarise(rows: list[dict]) -> None:
    within = sum(abs(r["error_vs_simulated"]) <= 0.25 for r in rows if r["error_vs_simulated"] is not None)
    print(f"wall vs simulated within 25 %: {within} of {len(rows)} rows; parameters and losses match:"
          f" {sum(bool(r['params_match'] and r['loss_match']) for r in rows)} of {len(rows)}")


def training_trial(args, table) -> list[dict]:
    """Profile, solve and train every example once (both schedules on the same split); rows into ``table``."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ex in args.examples:
            w = Path(tmp) / f"{ex}.json"
            s = Path(tmp) / f"{ex}_split.json"
            dnnplace("profile", f"examples/{ex}.py:build", "-o", str(w), "--accelerators", "2", "--training")
            dnnplace("solve", str(w), "-o", str(s), "-q")
            doc = json.loads(w.read_text())
            for sched in args.schedule:
                res = json.loads(dnnplace("run", f"examples/{ex}.py:build", str(s), "-w", str(w), "--training",
                                          "--schedule", sched, "-n", str(args.microbatches), "--steps",
                                          str(args.steps), "--json"))
                mem = max(res["stages"], key=lambda st: abs(st["measured_peak_activation_bytes"]
                                                           / st["predicted_peak_activation_bytes"] - 1))
                mem_err = mem["measured_peak_activation_bytes"] / mem["predicted_peak_activation_bytes"] - 1
                table.add_row(ex, sched, str(len(res["stages"])), f"{res['predicted_max_load']:.2f}",
                              f"{res['predicted_simulated_time_per_sample']:.2f}",
                              f"{res['measured_time_per_sample']:.2f}", pct(res["error_vs_simulated"]),
                              f"{res['measured_time_per_sample_less_runqueue_wait']:.2f}",
                              pct(res["error_less_runqueue_vs_simulated"]),
                              f"{res['measured_bottleneck_cpu_per_sample']:.2f}", pct(res["error_cpu_vs_max_load"]),
                              f"{mem['measured_peak_activation_bytes'] / 1e6:.2f}/"
                              f"{mem['predicted_peak_activation_bytes'] / 1e6:.2f}", pct(mem_err),
                              "yes" if res["params_match"] and res["loss_match"] else "NO",
                              f"{res['load_average']:.1f}")
                rows.append({"example": ex, "schedule": sched, **{k: res[k] for k in (
                    "predicted_max_load", "predicted_simulated_time_per_sample", "measured_time_per_sample",
                    "error_vs_max_load", "error_vs_simulated", "measured_bottleneck_cpu_per_sample",
                    "error_cpu_vs_max_load", "measured_time_per_sample_less_runqueue_wait",
                    "error_less_runqueue_vs_simulated", "params_match", "loss_match", "max_param_rel_diff",
                    "load_average")},
                    "memory_error": mem_err, "stages": res["stages"]})
                print(f"done {ex} {sched}; link {doc['dnnplace']['linkLatencyMs']:.3f} ms +"
                      f" {doc['dnnplace']['linkBandwidth']:.3g} B/s", file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--microbatches", type=int, default=32)
    ap.add_argument("--training", action="store_true", help="Train (forward + backward) instead of forward runs.")
    ap.add_argument("--schedule", action="append", choices=["1f1b", "gpipe"],
                    help="Training schedule(s); repeat for both (default 1f1b).")
    ap.add_argument("--steps", type=int, default=6,
                    help="Training: optimizer steps (the first is warm-up; the median of the others is reported).")
    ap.add_argument("--trials", type=int, default=1,
                    help="Training: independent trials (profile, solve, run); with more than one, also the median"
                         " error over them.")
    ap.add_argument("--examples", nargs="+", default=EXAMPLES, choices=EXAMPLES)
    ap.add_argument("--json-out", help="Training: also write the rows as JSON here.")
    args = ap.parse_args()
    args.schedule = args.schedule or ["1f1b"]
    (training if args.training else forward)(args)


if __name__ == "__main__":
    main()
