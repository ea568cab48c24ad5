"""The vocabulary of the vectorised LLM cost model: candidate columns, per-stage costs, a batch's result.

Kept apart from :mod:`.step` (the formulas) so that the MoE pricing (:mod:`.moe_step`) and the search
share these types without importing the step model itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from dnnplace.models.llm.config import CUDA_GRAPHS, GRAD_DTYPES
from dnnplace.models.llm.evaluation import fsdp
from dnnplace.models.llm.moe_knobs import DISPATCHERS, MODULE_SETS, ROUTINGS
from dnnplace.models.llm.spec import RECOMPUTE, ParallelConfig

Array = np.ndarray


@dataclass(frozen=True)
class Candidates:
    """Configurations as arrays; ``rank_layers[i, r]`` = layers of pipeline rank r (0 past pp).

    ``stage_layers[i, s]``, when given, = layers of virtual stage s (model order, rank s % pp, chunk
    s // pp; 0 past pp * vp): how a rank's layers are spread over its chunks, which the schedule and the
    in-flight activations depend on.  Without it each rank's layers are cut as :meth:`config` says.
    """

    tp: Array
    pp: Array
    vp: Array
    cp: Array
    dp: Array
    mbs: Array
    recompute: Array  # 0 none, 1 selective, 2 full
    sp: Array
    dist: Array
    rank_layers: Array
    stage_layers: Array | None = None
    # The expert-parallel knobs (None: a dense candidate, ep = etp = 1): ep, etp, the dispatcher's index in
    # DISPATCHERS, the recompute modules' bit mask, the all-to-all overlap.
    ep: Array | None = None
    etp: Array | None = None
    dispatcher: Array | None = None
    modules: Array | None = None
    a2a: Array | None = None
    # The data-parallel sharding knobs (None: as before, ZeRO 1 with the distributed optimizer else 0, and
    # fp32 gradients): the ZeRO stage and the index of the gradient dtype in GRAD_DTYPES.
    zero: Array | None = None
    grad: Array | None = None
    # Activation CPU offloading (None: none): the layers whose saved activations go to host memory.
    offload: Array | None = None
    # The CUDA-graph scope's index in CUDA_GRAPHS (None: none, every op eager).
    graphs: Array | None = None
    # The MoE routing skew's index in ROUTINGS (None: balanced).
    routing: Array | None = None

    def offloads(self) -> Array:
        """Offloaded layers per candidate (0 where not given)."""
        return np.zeros(len(self)) if self.offload is None else self.offload

    def with_offload(self, rows: Array, n: Array) -> Candidates:
        """Candidates ``rows`` only, each with ``n`` offloaded layers (the search's smallest fitting N)."""
        def pick(v: Any) -> Any:
            return None if v is None else v[rows]
        fields = {f: pick(getattr(self, f)) for f in ("tp", "pp", "vp", "cp", "dp", "mbs", "recompute", "sp",
                                                      "dist", "rank_layers", "stage_layers", "ep", "etp",
                                                      "dispatcher", "modules", "a2a", "zero", "grad")}
        return Candidates(**fields, offload=np.asarray(n, dtype=float), graphs=pick(self.graphs),
                          routing=pick(self.routing))

    def sharding(self) -> tuple[Array, Array]:
        """(ZeRO stage, gradient bytes per parameter) with the defaults where not given."""
        zero = np.where(self.dist, 1.0, 0.0) if self.zero is None else self.zero
        grad = np.zeros(len(self)) if self.grad is None else self.grad
        return zero, np.asarray(fsdp.GRAD_DTYPE_BYTES)[grad.astype(np.int64)]

    def expert(self) -> tuple[Array, Array, Array, Array, Array]:
        """(ep, etp, dispatcher, modules, a2a) with the dense defaults where not given."""
        one, zero = np.ones(len(self)), np.zeros(len(self))
        return (one if self.ep is None else self.ep, one if self.etp is None else self.etp,
                zero if self.dispatcher is None else self.dispatcher, zero if self.modules is None else self.modules,
                zero.astype(bool) if self.a2a is None else self.a2a)

    def __len__(self) -> int:
        return len(self.tp)

    @staticmethod
    def of(configs: list[ParallelConfig]) -> Candidates:
        width = max(c.pp for c in configs)
        layers = np.zeros((len(configs), width))
        stages = np.zeros((len(configs), max(c.pp * c.vp for c in configs)))
        for i, c in enumerate(configs):
            layers[i, :c.pp] = [c.rank_layers(r) for r in range(c.pp)]
            stages[i, :c.pp * c.vp] = c.layers_per_stage

        def col(name: str) -> Array:
            return np.array([getattr(c, name) for c in configs], dtype=float)

        return Candidates(col("tp"), col("pp"), col("vp"), col("cp"), col("dp"), col("mbs"),
                          np.array([RECOMPUTE.index(c.recompute) for c in configs], dtype=float),
                          np.array([c.sequence_parallel for c in configs]),
                          np.array([c.distributed_optimizer for c in configs]), layers, stages,
                          col("ep"), col("etp"), np.array([DISPATCHERS.index(c.dispatcher) for c in configs], float),
                          np.array([MODULE_SETS.index(c.recompute_modules) for c in configs], dtype=float),
                          np.array([c.a2a_overlap for c in configs]), col("zero"),
                          np.array([GRAD_DTYPES.index(c.grad_dtype) for c in configs], dtype=float),
                          col("offload_layers"),
                          np.array([CUDA_GRAPHS.index(c.cuda_graphs) for c in configs], dtype=float),
                          np.array([ROUTINGS.index(c.routing) for c in configs], dtype=float))

    def stages(self) -> Array:
        """Layers per virtual stage, (n, max pp * vp): ``stage_layers`` or the cut :meth:`config` makes."""
        if self.stage_layers is not None:
            return self.stage_layers
        return self._cut_stages

    @cached_property
    def _cut_stages(self) -> Array:
        pp, vp = self.pp.astype(np.int64), self.vp.astype(np.int64)
        width = int((pp * vp).max())
        s = np.arange(width)[None, :]
        r, k = s % pp[:, None], s // pp[:, None]
        valid = k < vp[:, None]
        n = np.take_along_axis(self.rank_layers, np.minimum(r, self.rank_layers.shape[1] - 1), axis=1)
        full = np.ceil(n / vp[:, None])
        short_chunk = np.where((r == pp[:, None] - 1) & (r > 0), vp[:, None] - 1, 0)
        out = np.where(k == short_chunk, n - (vp[:, None] - 1) * full, full)
        return np.where(valid, out, 0.0)

    def config(self, i: int) -> ParallelConfig:
        """Candidate ``i`` as a ParallelConfig: ``stage_layers`` when given, else each rank's layers in equal
        chunks of ceil(n / vp), but for a remainder, which shortens rank 0's first chunk (it also embeds) or
        the last rank's last chunk (it also runs the head and the loss)."""
        pp, vp = int(self.pp[i]), int(self.vp[i])
        stages = tuple(int(x) for x in self.stages()[i, :pp * vp])
        return ParallelConfig(tp=int(self.tp[i]), pp=pp, vp=vp, cp=int(self.cp[i]), dp=int(self.dp[i]),
                              mbs=int(self.mbs[i]), recompute=RECOMPUTE[int(self.recompute[i])],
                              sequence_parallel=bool(self.sp[i]), distributed_optimizer=bool(self.dist[i]),
                              layers_per_stage=stages, **self._expert_fields(i), **self._sharding_fields(i),
                              offload_layers=int(self.offloads()[i]))

    def _sharding_fields(self, i: int) -> dict[str, Any]:
        zero = np.where(self.dist, 1.0, 0.0) if self.zero is None else self.zero
        grad = 0 if self.grad is None else int(self.grad[i])
        graphs = 0 if self.graphs is None else int(self.graphs[i])
        routing = 0 if self.routing is None else int(self.routing[i])
        return {"zero": int(zero[i]), "grad_dtype": GRAD_DTYPES[grad], "cuda_graphs": CUDA_GRAPHS[graphs],
                "routing": ROUTINGS[routing]}

    def _expert_fields(self, i: int) -> dict[str, Any]:
        ep, etp, disp, mods, a2a = self.expert()
        return {"ep": int(ep[i]), "etp": int(etp[i]), "dispatcher": DISPATCHERS[int(disp[i])],
                "recompute_modules": MODULE_SETS[int(mods[i])], "a2a_overlap": bool(a2a[i])}


@dataclass(frozen=True)
class StageCosts:
    """Per-micro-batch seconds of one layer and of the embedding / LM-head extras, by kind."""

    layer: dict[str, tuple[Array, Array]]  # kind -> (forward, backward) of one layer
    first: dict[str, tuple[Array, Array]]  # extras of pipeline rank 0
    last: dict[str, tuple[Array, Array]]  # extras of the last pipeline rank
    m: Array  # micro-batches per step
    tokens: Array  # tokens of one micro-batch on one GPU (before TP)
    moe_layer: dict[str, tuple[Array, Array]] | None = None  # an MoE model's sparse layer (``layer``: its dense)
    pattern: tuple[bool, ...] = ()  # an MoE model's layers: which are sparse
    # Activation offloading: seconds the (only) pipeline stage waits for its host copies per micro-batch,
    # forward and backward (evaluation/llm/offload.py); None: no offloading.
    offload: tuple[Array, Array] | None = None

    def offload_wait(self) -> tuple[Array, Array]:
        """(forward, backward) seconds per micro-batch waited for the offload copies (0 without offloading)."""
        if self.offload is None:
            zero = np.zeros_like(np.asarray(self.m, dtype=float))
            return zero, zero
        return self.offload

    def per_layer(self) -> Array:
        """Seconds of one layer; of an MoE model the cheaper kind (what the bounds may assume of any layer)."""
        dense = sum(f + b for f, b in self.layer.values())
        if self.moe_layer is None:
            return dense
        return np.minimum(dense, sum(f + b for f, b in self.moe_layer.values()))

    def extras(self, which: str) -> Array:
        return sum(f + b for f, b in getattr(self, which).values())

    def layers_work(self, n: Array) -> Array:
        """A lower bound on the seconds of any ``n`` of the model's layers, per candidate (``n``: (rows, ...)
        broadcast against the candidates' leading axis).  An MoE model has at most ``num_dense`` dense layers
        (each at least the cheaper kind): the rest are sparse, so n layers cost at least
        (n - min(n, dense)) x sparse + min(n, dense) x cheaper; n = all layers gives the exact total."""
        cheap = self.per_layer()
        if self.moe_layer is None:
            return n * _ax(cheap, n)
        sparse = sum(f + b for f, b in self.moe_layer.values())
        dense_n = np.minimum(n, float(len(self.pattern) - sum(self.pattern)))
        return (n - dense_n) * _ax(sparse, n) + dense_n * _ax(cheap, n)


def _ax(v: Array, like: Array) -> Array:
    """``v`` (one per candidate) shaped to broadcast against ``like`` along its leading axis."""
    v = np.asarray(v)
    return v.reshape(v.shape + (1,) * (np.ndim(like) - v.ndim)) if np.ndim(like) > v.ndim else v


KINDS = ("compute", "tp", "cp", "ep", "host")


@dataclass(frozen=True)
class BatchResult:
    """Predictions of :func:`evaluate_batch`, one entry per candidate."""

    step: Array
    time: dict[str, Array]  # TIME_KEYS
    memory: dict[str, Array]  # MEMORY_KEYS, of the rank with the most memory
    mem_total: Array
    fits: Array
    m: Array
    pipeline: Array | None = None  # the schedule's makespan, pipeline sends included
    tail: Array | None = None  # what follows it: the largest exposed DP communication + optimizer step
    host: Array | None = None  # host memory per GPU the offloaded activations take (None: no offloading)
    gpu_fits: Array | None = None  # the GPU memory alone fits (``fits`` also needs the host memory to)


def take_rows(costs: StageCosts, rows: Array) -> StageCosts:
    """The costs of some candidates only (the per-candidate arrays indexed by ``rows``)."""
    def pick(d: dict[str, tuple[Array, Array]]) -> dict[str, tuple[Array, Array]]:
        return {k: (np.broadcast_to(f, costs.m.shape)[rows], np.broadcast_to(b, costs.m.shape)[rows])
                for k, (f, b) in d.items()}
    return StageCosts(pick(costs.layer), pick(costs.first), pick(costs.last), costs.m[rows], costs.tokens[rows],
                      moe_layer=None if costs.moe_layer is None else pick(costs.moe_layer), pattern=costs.pattern,
                      offload=None if costs.offload is None else (costs.offload[0][rows], costs.offload[1][rows]))
