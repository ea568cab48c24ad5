"""vLLM's own ``vllm serve`` parser takes the multi-node, disaggregated and GeForce exports as they are written.

The real-engine test (test_vllm_cpu.py) starts the engine with a one-node pipeline export; a multi-node launch or
a NixlConnector pair cannot start on this machine, but their flags can go through vLLM's parser: every line is
parsed by ``.venv-vllm`` (vllm_flags.py), and what each sets is checked against the plan -- the node ranks in
order, one head and the rest headless, one rendezvous, the connector and its roles.  Slow lane (a vLLM import
per run); skipped only when ``.venv-vllm`` is absent (``make test-all`` builds it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dnnplace.models.serving.disaggregation import disaggregate
from dnnplace.models.serving.exporters import export
from dnnplace.models.serving.load import problem
from dnnplace.models.serving.spec import Replica, ServingConfig, ServingPlan, Stage

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
M70 = ROOT / "examples" / "serving" / "llama3.1-70b.json"
M8 = ROOT / "examples" / "llm" / "llama3.1-8b.json"


def _parsed(text: str) -> list[dict]:
    if not VLLM_PY.exists():
        pytest.skip(".venv-vllm is absent (make test-all builds it)")
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("#") and " vllm serve " in f" {x} "]
    res = subprocess.run([str(VLLM_PY), str(Path(__file__).with_name("vllm_flags.py"))], input=json.dumps(lines),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_vllm_parses_the_multi_node_launch():
    p = problem(M70, gpus="2xh100;2xh100", precision="fp8", isl=512, osl=128)
    r = Replica((Stage("h100", 0, (0, 1), 40), Stage("h100", 1, (0, 1), 40)))
    rows = _parsed(export(p, ServingPlan(ServingConfig((r,), 64, 4096)), "vllm"))
    assert [x["node_rank"] for x in rows] == [0, 1] and {x["nnodes"] for x in rows} == {2}
    assert [x["headless"] for x in rows] == [False, True]
    assert {x["distributed_executor_backend"] for x in rows} == {"mp"} and len({x["master_port"] for x in rows}) == 1
    assert all(x["tensor_parallel_size"] == 2 and x["pipeline_parallel_size"] == 2 for x in rows)


def test_vllm_parses_the_disaggregated_pair():
    p = problem(M70, gpus="2xa100-80g+2xl40s", precision="fp8", isl=1024, osl=256)
    pre = ServingConfig((Replica((Stage("l40s", 0, (2, 3), 80),)),), 256, 8192)
    dec = ServingConfig((Replica((Stage("a100-80g", 0, (0, 1), 80),)),), 256, 8192)
    plan = ServingPlan(ServingConfig((), 256, 8192), meta={"disaggregated": disaggregate(p, pre, dec)})
    rows = _parsed(export(p, plan, "vllm", disaggregate=True))
    assert [(x["kv_connector"], x["kv_role"]) for x in rows] == [("NixlConnector", "kv_producer"),
                                                                 ("NixlConnector", "kv_consumer")]
    assert len({x["max_model_len"] for x in rows}) == 1 and len({x["port"] for x in rows}) == 2


def test_vllm_parses_the_flags_a_geforce_or_pre_bf16_replica_gets():
    """A TP group of RTX 4090s (no peer access) is told --disable-custom-all-reduce, a V100 replica --dtype half:
    both reach vLLM's own parser as the values the plan priced."""
    p = problem(M8, gpus="2xrtx-4090", isl=512, osl=128)
    r = Replica((Stage("rtx-4090", 0, (0, 1), 32),))
    (row,) = _parsed(export(p, ServingPlan(ServingConfig((r,), 64, 2048)), "vllm"))
    assert row["disable_custom_all_reduce"] is True and row["tensor_parallel_size"] == 2
    q = problem(M8, gpus="2xv100", isl=512, osl=128)
    r = Replica((Stage("v100", 0, (0,), 16), Stage("v100", 0, (1,), 16)))
    (row,) = _parsed(export(q, ServingPlan(ServingConfig((r,), 64, 2048)), "vllm"))
    assert row["dtype"] == "half" and not row["disable_custom_all_reduce"]
