"""A deployment in the form each engine takes it as it is.

Why explicit everywhere: the engines' default remainder rules differ (vLLM: middle stages, SGLang:
last, TensorRT-LLM: first) and their rank -> GPU order is implicit, so every export sets the layer
partition, the GPU order (``CUDA_VISIBLE_DEVICES`` in stage order with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``)
and the batch limits; a 0-layer stage is refused, never written.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.catalogue import COMPUTE_CAPABILITY, peer_access
from dnnplace.models.serving.pipeline import node_run_refusal
from dnnplace.models.serving.spec import Replica, ServingPlan, ServingProblem

__all__ = ["DISAGG_PORTS", "EXPORTERS", "MULTI_NODE", "NIXL_SIDE_CHANNEL_PORT", "SGLANG_DIST_PORT", "VLLM_MASTER_PORT",
           "disaggregated", "export", "no_custom_all_reduce", "node_runs", "priced_for_another"]


def _check(p: ServingProblem, r: Replica, across_nodes: bool = False) -> None:
    """A layout every engine refuses (0-layer stage, per-stage TP), and one across nodes where the engine's
    export is written per node only (``across_nodes``: the exporter writes a multi-node launch itself)."""
    if any(s.layers < 1 for s in r.stages):
        raise DnnplaceError("a stage with 0 layers cannot be exported (the engines crash on it)")
    if sum(r.partition()) != p.model.num_layers:
        raise DnnplaceError(f"the partition {r.partition()} does not sum to {p.model.num_layers} layers")
    if len({s.tp for s in r.stages}) != 1:
        raise DnnplaceError("per-stage TP is a what-if: no engine takes it")
    if len({s.node for s in r.stages}) != 1 and not across_nodes:
        raise DnnplaceError(f"a replica across nodes is written for vLLM and SGLang only (their multi-node "
                            f"launches), not for {p.engine.name}: export to vllm or sglang, or plan with "
                            "--within-nodes")


def node_runs(r: Replica, engine: str = "vLLM") -> list[tuple[int, list[int]]]:
    """The replica's stages grouped by node in stage order: (node, stage indices) per run of stages on one
    node, refused in one line where ``engine``'s multi-node launch cannot start them
    (:func:`~dnnplace.models.serving.pipeline.node_run_refusal`: one run per node, the runs equally long;
    ENGINES.md section 1.5)."""
    why = node_run_refusal([s.node for s in r.stages], engine)
    if why:
        raise DnnplaceError(f"{why}; plan with --within-nodes")
    runs: list[tuple[int, list[int]]] = []
    for i, s in enumerate(r.stages):
        if runs and runs[-1][0] == s.node:
            runs[-1][1].append(i)
        else:
            runs.append((s.node, [i]))
    return runs


def _kv_flag(p: ServingProblem) -> str | None:
    """The engine's own name for the plan's KV-cache dtype (None: its default, the model's dtype): a plan
    priced with an FP8 cache exported without the flag would hold half the tokens it promised."""
    flags = dict(p.engine.kv_dtypes)
    if p.kv_dtype not in flags:
        raise DnnplaceError(f"{p.engine.name} has no {p.kv_dtype} KV cache; it takes {', '.join(flags)}")
    return flags[p.kv_dtype]


def _devices(r: Replica) -> str:
    return ",".join(str(g) for s in r.stages for g in s.gpus)


def _env(items: list[tuple[str, str]]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in items)


#: GPUs before compute capability 8.0 (no BF16): vLLM decides ``--dtype auto`` from device 0 alone, so a fleet
#: with any of these must be told ``half`` (ENGINES.md item 11; the catalogue's COMPUTE_CAPABILITY).
PRE_SM80 = frozenset(name for name, cc in COMPUTE_CAPABILITY.items() if cc < 8.0)


def _vllm_dtype(p: ServingProblem, r: Replica) -> str:
    if p.model.weight_dtype == "fp16" or any(s.gpu in PRE_SM80 for s in r.stages):
        return "half"
    return "auto"


def no_custom_all_reduce(p: ServingProblem, r: Replica) -> list[str]:
    """``--disable-custom-all-reduce`` where a TP group has cards without peer access (catalogue NO_PEER_ACCESS,
    unless on their NVLink bridge): what the plan priced (NCCL), and what SGLang needs not to crash on them
    (sglang #4814); vLLM falls back by itself, the flag says so in the command."""
    off = r.tp > 1 and not all(peer_access(s.gpu, p.fleet.nodes[s.node].link, r.tp) for s in r.stages)
    return ["--disable-custom-all-reduce"] if off else []


def _vllm_context(p: ServingProblem, plan: ServingPlan, r: Replica) -> int:
    """--max-model-len: vLLM refuses to start when a worker's KV cache cannot hold one such request, so an
    unpinned context is the model's capped to the replica's KV tokens (the user's own is kept)."""
    from dnnplace.models.serving.evaluation import evaluate_replica, served_context

    if p.max_model_len:
        return p.context
    return served_context(p, evaluate_replica(p, r, plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
                          .kv_tokens)


def routing_note(plan: ServingPlan) -> str:
    """The comment line a launch of several replicas opens with: how to route requests to them.

    Why: each replica is its own server and what sends a request to which is the user's.  The plan prices the
    engine's router (``EngineRules.least_loaded_router``: vLLM's least-loaded data-parallel client, round robin
    for the others); on replicas of unequal speed round robin gives the slowest the same share as the fastest,
    so it saturates first, and a least-loaded router serves as much or more whichever was priced."""
    n = len(plan.config.replicas)
    if n < 2:
        return ""
    return (f"# {n} replicas, one server each: send each request to the least-loaded one; round robin gives a slower"
            " replica the same share as the fastest, so it saturates first (the plan prices vLLM with the first,"
            " the other engines with the second)\n")


def _launches(p: ServingProblem, plan: ServingPlan,
              command: Callable[[int, Replica], tuple[list[tuple[str, str]], list[str], str]],
              nodes: Callable[[int, Replica], str] | None = None) -> str:
    """One shell line per replica, each checked, its GPUs named in PCI order and the engine's KV-cache flag
    put before the last option (``--port``); ``command`` gives the replica's own environment, arguments and
    comment line; ``nodes`` writes a replica across nodes as the engine's multi-node launch (None: refused)."""
    lines = []
    for k, r in enumerate(plan.config.replicas):
        if nodes is not None and len({s.node for s in r.stages}) > 1:
            _check(p, r, across_nodes=True)
            lines.append(nodes(k, r))
            continue
        _check(p, r)
        extra, args, head = command(k, r)
        env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", _devices(r)), *extra]
        if (kv := _kv_flag(p)) is not None:
            args[-2:-2] = ["--kv-cache-dtype", kv]
        lines.append(f"# {head}\n{_env(env)} {shlex.join(args)}")
    return routing_note(plan) + "\n".join(lines) + "\n"


def _vllm_args(p: ServingProblem, plan: ServingPlan, r: Replica, model: str, port: int) -> list[str]:
    return ["vllm", "serve", model, "--tensor-parallel-size", str(r.tp), "--pipeline-parallel-size", str(r.pp),
            "--max-num-seqs", str(plan.config.max_num_seqs), "--max-num-batched-tokens",
            str(plan.config.max_num_batched_tokens), "--gpu-memory-utilization", f"{p.fraction:.2f}",
            "--max-model-len", str(_vllm_context(p, plan, r)), "--dtype", _vllm_dtype(p, r),
            "--block-size", str(p.block),
            # the experts whole over the TP group (vLLM: EP size = TP x DP of the replica, here its TP)
            *(["--enable-expert-parallel"] if plan.config.expert_parallel else []),
            *no_custom_all_reduce(p, r), "--port", str(port)]


#: The rendezvous port of a multi-node vLLM replica k is this + k (``--master-port``; torch's usual default).
VLLM_MASTER_PORT = 29500


def _vllm_nodes(p: ServingProblem, plan: ServingPlan, k: int, r: Replica, model: str) -> str:
    """A replica across nodes as vLLM's own multi-node launch (``--distributed-executor-backend mp``): one
    command per node, the first (it serves the API) at ``--node-rank 0``, the others ``--headless``, each
    listing its own GPUs in stage order; the head's address is the user's to fill in (HEAD_ADDR)."""
    runs = node_runs(r)
    part = ",".join(map(str, r.partition()))
    kv = _kv_flag(p)
    out = []
    for rank, (node, stages) in enumerate(runs):
        gpus = ",".join(str(g) for i in stages for g in r.stages[i].gpus)
        env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", gpus), ("VLLM_PP_LAYER_PARTITION", part)]
        args = _vllm_args(p, plan, r, model, 8000 + k)
        if kv is not None:
            args[-2:-2] = ["--kv-cache-dtype", kv]
        args += ["--distributed-executor-backend", "mp", "--nnodes", str(len(runs)), "--node-rank", str(rank),
                 "--master-addr", "HEAD_ADDR", "--master-port", str(VLLM_MASTER_PORT + k)]
        if rank:
            args.append("--headless")
        span = f"stages {stages[0] + 1}-{stages[-1] + 1}" if len(stages) > 1 else f"stage {stages[0] + 1}"
        role = "the head: serves the API; HEAD_ADDR is this node's address" if not rank else "headless"
        out.append(f"# replica {k + 1} on node {node + 1}: {span}, --node-rank {rank} ({role})\n"
                   f"{_env(env)} {shlex.join(args)}")
    return "\n".join(out)


def vllm(p: ServingProblem, plan: ServingPlan, model: str = "MODEL") -> str:
    """One ``vllm serve`` per replica; a replica across nodes as vLLM's multi-node launch, one line per node."""
    lines = []
    for k, r in enumerate(plan.config.replicas):
        _check(p, r, across_nodes=True)
        if len({s.node for s in r.stages}) > 1:
            lines.append(_vllm_nodes(p, plan, k, r, model))
            continue
        env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", _devices(r)),
               ("VLLM_PP_LAYER_PARTITION", ",".join(map(str, r.partition())))]
        args = _vllm_args(p, plan, r, model, 8000 + k)
        if (kv := _kv_flag(p)) is not None:
            args[-2:-2] = ["--kv-cache-dtype", kv]
        lines.append(f"# replica {k + 1} on node {r.stages[0].node + 1}\n{_env(env)} {shlex.join(args)}")
    return routing_note(plan) + "\n".join(lines) + "\n"


def _sglang_fraction(p: ServingProblem, plan: ServingPlan, r: Replica) -> float:
    """The fraction the plan priced this replica with (the one given, else SGLang's own rule).  SGLang takes
    one for the whole launch, from the smallest GPU of the host (nvidia-smi), so the replica's smallest card
    stands for it, in the evaluator as here (:func:`~dnnplace.models.serving.memory.launch_memory`)."""
    from dnnplace.models.serving.memory import launch_memory

    return p.fraction_for(launch_memory([s.gpu for s in r.stages]), r.tp, r.pp)


def _sglang_command(p: ServingProblem, plan: ServingPlan, r: Replica, model: str,
                    port: int) -> tuple[list[tuple[str, str]], list[str]]:
    env = [("SGLANG_PP_LAYER_PARTITION", ",".join(map(str, r.partition())))]
    if r.tp > 1 and len({s.gpu for s in r.stages}) > 1:
        env.append(("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0"))  # mixed memory sizes with TP > 1
    args = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(r.tp),
            "--pp-size", str(r.pp), "--mem-fraction-static", f"{_sglang_fraction(p, plan, r):.3f}",
            "--base-gpu-id", "0",
            "--max-running-requests", str(plan.config.max_num_seqs),
            "--chunked-prefill-size", str(plan.config.max_num_batched_tokens), "--context-length", str(p.context),
            # BF16 needs compute capability 8.0: a replica with an older GPU is told half, as vLLM's is
            *(["--dtype", "half"] if _vllm_dtype(p, r) == "half" else []),
            # SGLang splits the TP ranks into --ep-size expert groups: all of them, each expert whole on one GPU
            *(["--ep-size", str(r.tp)] if plan.config.expert_parallel else []),
            *no_custom_all_reduce(p, r), "--port", str(port)]
    return env, args


#: The rendezvous port of a multi-node SGLang replica k is this + k (``--dist-init-addr HEAD_ADDR:port``, the
#: port of SGLang's own multi-node example).
SGLANG_DIST_PORT = 5000


def _sglang_nodes(p: ServingProblem, plan: ServingPlan, k: int, r: Replica, model: str) -> str:
    """A replica across nodes as SGLang's own multi-node launch (``--nnodes``, ``--node-rank``,
    ``--dist-init-addr``): one command per node, each listing its GPUs in stage order (SGLang's ``gpu_id`` =
    (pp_rank % pp_size_per_node) x tp + tp_rank indexes them); node rank 0 serves the API, and the head's address
    is the user's to fill in (HEAD_ADDR)."""
    runs = node_runs(r, "SGLang")
    extra, args = _sglang_command(p, plan, r, model, 30000 + k)
    if (kv := _kv_flag(p)) is not None:
        args[-2:-2] = ["--kv-cache-dtype", kv]
    out = []
    for rank, (node, stages) in enumerate(runs):
        gpus = ",".join(str(g) for i in stages for g in r.stages[i].gpus)
        env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", gpus), *extra]
        here = [*args, "--nnodes", str(len(runs)), "--node-rank", str(rank), "--dist-init-addr",
                f"HEAD_ADDR:{SGLANG_DIST_PORT + k}"]
        span = f"stages {stages[0] + 1}-{stages[-1] + 1}" if len(stages) > 1 else f"stage {stages[0] + 1}"
        role = "the head: serves the API; HEAD_ADDR is this node's address" if not rank else "a worker node"
        out.append(f"# replica {k + 1} on node {node + 1}: {span}, --node-rank {rank} ({role})\n"
                   f"{_env(env)} {shlex.join(here)}")
    return "\n".join(out)


def sglang(p: ServingProblem, plan: ServingPlan, model: str = "MODEL") -> str:
    def command(k: int, r: Replica) -> tuple[list[tuple[str, str]], list[str], str]:
        env, args = _sglang_command(p, plan, r, model, 30000 + k)
        return env, args, f"replica {k + 1}"

    return _launches(p, plan, command, lambda k, r: _sglang_nodes(p, plan, k, r, model))


def trtllm(p: ServingProblem, plan: ServingPlan, model: str = "MODEL") -> str:
    from dnnplace.models.serving.evaluation import prompts_chunked

    docs = []
    for k, r in enumerate(plan.config.replicas):
        _check(p, r)
        docs.append({"replica": k + 1, "env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": _devices(r)},
                     "llm_api_options": {"model": model, "tensor_parallel_size": r.tp,
                                         "pipeline_parallel_size": r.pp, "pp_partition": r.partition(),
                                         # the experts whole over the TP group: EP = TP, each expert unsharded
                                         **({"moe_expert_parallel_size": r.tp, "moe_tensor_parallel_size": 1}
                                            if plan.config.expert_parallel else {}),
                                         "max_batch_size": plan.config.max_num_seqs,
                                         "max_num_tokens": plan.config.max_num_batched_tokens,
                                         "max_seq_len": p.context,
                                         # without it a prompt longer than max_num_tokens is refused
                                         **({"enable_chunked_prefill": True}
                                            if prompts_chunked(p, plan.config.max_num_batched_tokens) else {}),
                                         "kv_cache_config": {"free_gpu_memory_fraction": p.fraction,
                                                             **({"dtype": kv} if (kv := _kv_flag(p)) else {})}}})
    return json.dumps(docs, indent=1) + "\n"


def llama_slots(r: Replica) -> list[int]:
    """``-ts`` in llama.cpp's slot units: each device's layers, the output layer one more slot on the last."""
    return [s.layers + (1 if i == r.pp - 1 else 0) for i, s in enumerate(r.stages)]


def _backend(r: Replica) -> str:
    """llama.cpp's device prefix for the replica's GPUs (one backend per process: a pipeline mixing vendors
    is refused rather than written with devices the binary does not have)."""
    from dnnplace.models.serving.catalogue import NON_NVIDIA

    names = {NON_NVIDIA.get(s.gpu, ("NVIDIA", "CUDA"))[1] for s in r.stages}
    if len(names) > 1:
        raise DnnplaceError(f"a llama.cpp replica over {' and '.join(sorted(names))} GPUs: one build has one backend")
    return names.pop()


def _llama_ctx(p: ServingProblem, plan: ServingPlan, r: Replica) -> int:
    """``-c``: llama.cpp allocates the whole context's KV cache at start and gives each of the ``-np`` slots
    ``c / np`` of it, so ``c`` is the model's context per slot capped to the tokens the plan's KV cache holds
    (``context x np`` tokens would not fit), and every slot must still hold one request."""
    from dnnplace.models.serving.evaluation import evaluate_replica, slot_need, slot_tokens

    np_ = plan.config.max_num_seqs
    kv = int(evaluate_replica(p, r, np_, plan.config.max_num_batched_tokens).kv_tokens)
    # llama.cpp pads its cache to 256 cells: a -c it would pad up could not fit, so the whole cache padded down
    c = p.context * np_ if p.context * np_ <= kv else slot_tokens(p, kv, 1)
    need = slot_need(p)  # the longest request (or the pinned context) must fit a slot: the evaluator's rule
    if c // np_ < need:
        raise DnnplaceError(f"llama.cpp splits its {c}-token cache over {np_} slots: {c // np_} each, less than "
                            f"one request ({need}); plan with --fix max_num_seqs={max(c // need, 1)} or fewer")
    return c


def llama_cpp(p: ServingProblem, plan: ServingPlan, model: str = "MODEL.gguf") -> str:
    lines = []
    for k, r in enumerate(plan.config.replicas):
        _check(p, r)
        if r.tp != 1:
            raise DnnplaceError("llama.cpp's layer split runs one GPU per stage (tp 1)")
        env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", _devices(r))]
        args = ["llama-server", "-m", model, "-sm", "layer", "-ts", ",".join(map(str, llama_slots(r))),
                "-ngl", "all", "--fit", "off", "-c", str(_llama_ctx(p, plan, r)),
                "-np", str(plan.config.max_num_seqs), "-ub", str(plan.config.max_num_batched_tokens),
                "-b", str(max(plan.config.max_num_batched_tokens, 2048)),  # llama.cpp: n_ubatch <= n_batch
                "--device", ",".join(f"{_backend(r)}{i}" for i in range(r.pp)),
                "--port", str(8080 + k)]
        if (kv := _kv_flag(p)) is not None:
            args[-2:-2] = ["-ctk", kv, "-ctv", kv]
        lines.append(f"# replica {k + 1}\n{_env(env)} {shlex.join(args)}")
    return routing_note(plan) + "\n".join(lines) + "\n"


def hf_device_map(p: ServingProblem, r: Replica) -> dict[str, Any]:
    """One key per decoder layer plus embedding, norm, rotary and LM head (no parent keys), and max_memory."""
    _check(p, r)
    _kv_flag(p)
    if r.tp != 1:
        raise DnnplaceError("a Hugging Face device_map places whole layers: tp 1 only")
    order = [s.gpus[0] for s in r.stages]
    dm: dict[str, int] = {"model.embed_tokens": order[0], "model.rotary_emb": order[0]}
    layer = 0
    for s in r.stages:
        for _ in range(s.layers):
            dm[f"model.layers.{layer}"] = s.gpus[0]
            layer += 1
    dm["model.norm"] = order[-1]
    dm["lm_head"] = order[-1] if not p.model.tied else order[0]
    from dnnplace.core.catalogue import device_spec

    mm = {g: f"{int(device_spec(s.gpu).usable_memory_bytes * p.fraction // 2**20)}MiB"
          for s in r.stages for g in s.gpus}
    # CUDA numbers GPUs fastest first unless told the bus order: the map's indices are physical (PCI) ones.
    # JSON keys are strings; accelerate wants int GPU keys, so the reader converts (``load`` says how).
    return {"env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "device_map": dm, "max_memory": mm,
            "load": "AutoModelForCausalLM.from_pretrained(MODEL, device_map=device_map, "
                    "max_memory={int(k): v for k, v in max_memory.items()})"}


def hf(p: ServingProblem, plan: ServingPlan, model: str = "MODEL") -> str:
    return json.dumps([hf_device_map(p, r) for r in plan.config.replicas], indent=1) + "\n"


EXPORTERS = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm, "llama.cpp": llama_cpp, "hf": hf}
#: The export targets that launch a replica across nodes themselves, by the name their messages give.
MULTI_NODE = {"vllm": "vLLM", "sglang": "SGLang"}

#: vLLM's NIXL handshake port of the i-th disaggregated instance (``VLLM_NIXL_SIDE_CHANNEL_PORT``, default 5600:
#: each instance on a host needs its own) and the ports the instances and their router serve on.
NIXL_SIDE_CHANNEL_PORT = 5600
DISAGG_PORTS = {"vllm": (8100, 8200, 8192), "sglang": (30000, 31000, 8000)}


def _host(p: ServingProblem, node: int) -> str:
    """The address a router reaches an instance at: localhost on a one-node fleet, else the user's to fill in."""
    return "localhost" if sum(1 for nd in p.fleet.nodes if nd.gpus) == 1 else f"NODE{node + 1}_ADDR"


def disaggregated(p: ServingProblem, plan: ServingPlan, to: str, model: str = "MODEL") -> str:
    """The plan's disaggregated what-if (``serve --disaggregate``) as the engine launches it: one command per
    prefill and per decode replica (GPUs in PCI order), then the engine's router between them.

    vLLM: ``--kv-transfer-config`` with the NixlConnector (producer / consumer roles), a distinct
    ``VLLM_NIXL_SIDE_CHANNEL_PORT`` per instance and ``VLLM_NIXL_SIDE_CHANNEL_HOST`` across nodes, routed by
    vLLM's NIXL proxy (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` in vLLM's repository:
    docs/features/nixl_connector_usage.md).  SGLang: ``--disaggregation-mode prefill|decode`` with the NIXL
    transfer backend, routed by ``sglang_router.launch_router --pd-disaggregation``
    (docs/advanced_features/pd_disaggregation.md)."""
    from dnnplace.models.serving.disaggregation import NONE_FITS, Disaggregated, pool_problems

    d = plan.meta.get("disaggregated")
    if d is None:
        raise DnnplaceError("the plan has no disaggregated deployment: plan with `serve --disaggregate`")
    if not isinstance(d, Disaggregated):
        raise DnnplaceError(f"nothing to export: {d if isinstance(d, str) and d else NONE_FITS}")
    if to not in DISAGG_PORTS:
        raise DnnplaceError(f"a disaggregated deployment is written for {', '.join(DISAGG_PORTS)}, not {to}")
    if to != p.engine.name:  # two pools priced under one engine's memory rules: not launched on another's
        raise DnnplaceError(f"the disaggregated deployment was priced for {p.engine.name}: export it --to "
                            f"{p.engine.name}, or plan with --engine {to} --disaggregate")
    q = p
    pre_p, dec_p = pool_problems(q)
    kv = _kv_flag(q)
    # one context for both pools: a request the prefill instance takes must fit the decode instance, and back
    context = min(_vllm_context(prob, ServingPlan(cfg), r) for prob, cfg in ((pre_p, d.prefill), (dec_p, d.decode))
                  for r in cfg.replicas) if to == "vllm" else q.context
    lines: list[str] = []
    hosts: dict[str, list[tuple[str, int]]] = {"prefill": [], "decode": []}
    n = 0
    for role, prob, cfg, base in (("prefill", pre_p, d.prefill, DISAGG_PORTS[to][0]),
                                  ("decode", dec_p, d.decode, DISAGG_PORTS[to][1])):
        pool_plan = ServingPlan(cfg)
        for k, r in enumerate(cfg.replicas):
            _check(prob, r)
            port, node = base + k, r.stages[0].node
            env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", _devices(r))]
            if to == "vllm":
                env += [("VLLM_NIXL_SIDE_CHANNEL_PORT", str(NIXL_SIDE_CHANNEL_PORT + n))]
                if _host(q, node) != "localhost":
                    env += [("VLLM_NIXL_SIDE_CHANNEL_HOST", _host(q, node))]
                args = _vllm_args(prob, pool_plan, r, model, port)
                args[args.index("--max-model-len") + 1] = str(context)
                cfg_json = {"kv_connector": "NixlConnector",
                            "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"}
                args[-2:-2] = ["--kv-transfer-config", json.dumps(cfg_json, separators=(",", ":"))]
            else:
                more, args = _sglang_command(prob, pool_plan, r, model, port)
                env += more
                args[-2:-2] = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
            if kv is not None:
                args[-2:-2] = ["--kv-cache-dtype", kv]
            lines.append(f"# {role} replica {k + 1} on node {node + 1}\n{_env(env)} {shlex.join(args)}")
            hosts[role].append((_host(q, node), port))
            n += 1
    router = DISAGG_PORTS[to][2]
    if to == "vllm":
        proxy = ["python", "toy_proxy_server.py", "--port", str(router),
                 "--prefiller-hosts", *[h for h, _ in hosts["prefill"]],
                 "--prefiller-ports", *[str(x) for _, x in hosts["prefill"]],
                 "--decoder-hosts", *[h for h, _ in hosts["decode"]],
                 "--decoder-ports", *[str(x) for _, x in hosts["decode"]]]
        head = "# the router: vLLM's tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
    else:
        proxy = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for role, flag in (("prefill", "--prefill"), ("decode", "--decode")):
            for h, x in hosts[role]:
                proxy += [flag, f"http://{h}:{x}"]
        proxy += ["--host", "0.0.0.0", "--port", str(router)]
        head = "# the router"
    lines.append(f"{head}\n{shlex.join(proxy)}")
    return "\n".join(lines) + "\n"


def _for_engine(p: ServingProblem, plan: ServingPlan, to: str) -> ServingProblem:
    """The problem under the target engine's rules, when the plan was made for another engine: its memory
    fraction, block size and KV rule differ, so the plan is checked again rather than launched on trust."""
    if to == p.engine.name:
        return p
    from dataclasses import replace

    from dnnplace.models.serving.catalogue import GGUF_NAMES, engine_rules
    from dnnplace.models.serving.evaluation import evaluate, tp_refusal
    from dnnplace.models.serving.load import check_engine_runs_on

    made = f"the plan was made for {p.engine.name}"
    if p.model.precision in GGUF_NAMES and to != "llama.cpp":
        raise DnnplaceError(f"{made} with GGUF {p.model.precision} weights, which only llama.cpp loads")
    q = replace(p, engine=engine_rules(to))
    for r in plan.config.replicas:  # the layout the engine cannot run at all first, then its weights
        if why := tp_refusal(q, r.tp):
            raise DnnplaceError(f"{made}: {why}")
    if q.engine.precisions and p.model.precision not in q.engine.precisions:
        raise DnnplaceError(f"{made} with {p.model.precision} weights; {to} loads {', '.join(q.engine.precisions)}")
    check_engine_runs_on(q.engine, q.fleet)
    ev = evaluate(q, plan.config)
    if not ev.fits:
        raise DnnplaceError(f"{made}; under {to}'s rules it does not fit ({ev.why}): plan again with --engine {to}")
    return q


def priced_for_another(p: ServingProblem, to: str) -> str | None:
    """What an export to an engine other than the plan's does not carry over (None when ``to`` is the plan's
    engine): the layout and batch limits are checked to fit under ``to``'s rules, but the rate, latencies and
    the limits themselves were priced and searched under the plan's engine, so the user is told rather than
    left reading the plan's figures as ``to``'s."""
    if to == p.engine.name:
        return None
    return (f"note: this plan was priced for {p.engine.name}; {to} runs its layout and batch limits (checked to fit "
            f"under {to}'s rules), at a rate and latencies not priced: plan with --engine {to} for its own limits "
            "and figures")


def export(p: ServingProblem, plan: ServingPlan, to: str, model: str = "MODEL", disaggregate: bool = False) -> str:
    """The plan as engine ``to`` takes it (``disaggregate``: its disaggregated what-if instead)."""
    if to not in EXPORTERS:
        raise DnnplaceError(f"unknown export target '{to}'; known: {', '.join(EXPORTERS)}")
    if disaggregate:
        return disaggregated(p, plan, to, model)
    for r in plan.config.replicas:  # the layout first: a 0-layer stage or a cross-node replica says so
        _check(p, r, across_nodes=to in MULTI_NODE)
        if to in MULTI_NODE and len({s.node for s in r.stages}) > 1:
            node_runs(r, MULTI_NODE[to])
    q = _for_engine(p, plan, to)
    _kv_flag(q)
    return EXPORTERS[to](q, plan, model)
