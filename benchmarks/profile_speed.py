"""How long ``dnnplace profile`` takes for a catalogue device, and its peak memory (nothing is executed).

GPT-2 small at its real shape (12 x 768, vocab 50,257, 4 x 1,024 tokens), built
with random weights on the CPU and on the meta device, inference and
``--training``, ``--device a100``; ``--llama`` adds LLaMA-3-8B's shape on meta.
Each row is a fresh process: the factory (building the model), the capture
(``torch.export``), the costing (fake tensors, FLOPs, workload), the whole
command, and the process's peak RSS.  Targets: <= 10 s inference, <= 20 s
training (before fake tensors: 38 s / 80 s, 3.6 GB).

    python benchmarks/profile_speed.py [--llama]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["examples/hf_transformers.py:gpt2_small", "examples/meta_models.py:gpt2_small"]


def one(spec: str, training: bool, out: str) -> dict:
    """Profile ``spec`` in this process, timing each stage."""
    t0 = time.perf_counter()
    from dnnplace.frontends.torch_model.capture import capture
    from dnnplace.frontends.torch_model.loader import load_factory
    from dnnplace.frontends.torch_model.profile import build_workload_dict
    from dnnplace.models.paper import paper_json

    t1 = time.perf_counter()
    loaded = load_factory(spec)
    t2 = time.perf_counter()
    cap = capture(loaded.model, loaded.args, kwargs=loaded.kwargs)
    t3 = time.perf_counter()
    doc = build_workload_dict(cap, cap.inputs, training=training, device="a100", accelerators=4, cpus=0, spec=spec)
    t4 = time.perf_counter()
    paper_json.save_workload(paper_json.parse_workload(doc, source=spec), Path(out))
    t5 = time.perf_counter()
    return {"import": t1 - t0, "factory": t2 - t1, "capture": t3 - t2, "costing": t4 - t3, "total": t5 - t0,
            "nodes": len(doc["nodes"]), "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama", action="store_true", help="also LLaMA-3-8B's shape on meta")
    parser.add_argument("--one", nargs=3, metavar=("SPEC", "TRAINING", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1] == "1", args.one[2])))
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    models = MODELS + (["examples/meta_models.py:llama3_8b"] if args.llama else [])
    print(f"{'model':45s} {'mode':9s} {'nodes':>6s} {'factory':>8s} {'capture':>8s} {'costing':>8s}"
          f" {'total s':>8s} {'RSS GB':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in models:
            for training in (False, True):
                proc = subprocess.run([sys.executable, __file__, "--one", spec, str(int(training)), f"{tmp}/w.json"],
                                      capture_output=True, text=True, cwd=ROOT, env=env, check=True)
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                print(f"{spec:45s} {'training' if training else 'inference':9s} {r['nodes']:6d} {r['factory']:8.2f}"
                      f" {r['capture']:8.2f} {r['costing']:8.2f} {r['total']:8.2f} {r['peak_rss_gb']:7.2f}",
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
