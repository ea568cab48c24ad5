"""Peak memory and time of ``dnnplace simulate PLAN --trace`` just under the simulator's task limit.

Llama 3.1 70B on 64 H100s, ``tp=8, pp=8, vp=10, mbs=1``, global batch 12,000: 12,000
micro-batches through 80 virtual stages, 1.92 M tasks (the limit is 2 M).  The command
runs in a fresh process; its peak RSS is the child's ``ru_maxrss``.  Issue 45 measured
6.4 GB (1.92 M tasks, a 363 MB trace) when every task, event and the whole JSON text
were Python objects at once; the tasks now live in flat arrays and the trace streams to
its file.

    python benchmarks/trace_memory.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    import dnnplace
    from dnnplace.utils.files import write_json_atomic

    pr = dnnplace.load_llm(ROOT / "examples" / "llm" / "llama3.1-70b.json", gpus=64, seq_len=8192,
                           global_batch=12_000)
    plan = dnnplace.solve(pr, tp=8, pp=8, vp=10, cp=1, mbs=1).plan
    c = plan.config
    tasks = 2 * c.pp * c.vp * (pr.job.global_batch // (c.mbs * c.dp))
    with tempfile.TemporaryDirectory() as tmp:
        plan_file, trace = Path(tmp) / "plan.json", Path(tmp) / "trace.json"
        write_json_atomic(plan_file, plan.to_dict())
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dnnplace", "simulate", str(plan_file), "--trace", str(trace)],
                       check=True, env=env, capture_output=True)
        wall = time.perf_counter() - t0
        size = trace.stat().st_size
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: kilobytes
    print(f"{tasks:,} tasks, trace {size / 1e6:.0f} MB: peak RSS {peak / 1e9:.2f} GB, {wall:.1f} s")


if __name__ == "__main__":
    main()
