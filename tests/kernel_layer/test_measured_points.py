"""Every measured point comes back verbatim: for each system with tables and each family, >= 1,000 points
(all of them where a table has fewer) are sampled from the raw parquet rows and priced through the public
API; each must equal the table's latency exactly and say ``measured``."""

from __future__ import annotations

import numpy as np
import pytest

from dnnplace.kernels import kernel_costs
from dnnplace.kernels.measured import ATTN_DTYPES, COMM_OPS, GEMM_DTYPES, MOE_ROUTING, family
from dnnplace.kernels.tables import SYSTEMS, data_root, find_tables, read_columns

pytestmark = pytest.mark.skipif(data_root() is None, reason="aiconfigurator-core is a pinned dependency")

DEVICE = {}
for dev, sys_ in SYSTEMS.items():
    DEVICE.setdefault(sys_, dev)
FAMILIES = ("gemm", "context_attention", "decode_attention", "collective", "moe")
SAMPLE = 1000
_INV_GEMM = {v: k for k, v in GEMM_DTYPES.items() if k not in ("fp16", "nvfp4", "int4")}
_INV_ATTN = {v: k for k, v in ATTN_DTYPES.items() if k != "fp16"}
_INV_COMM = {v: k for k, v in COMM_OPS.items()}
_INV_MOE = {v: k for k, v in MOE_ROUTING.items()}


def _unique_rows(cols: dict[str, np.ndarray], key: tuple[str, ...]) -> np.ndarray:
    """Indices of rows whose key tuple occurs once (a point measured twice is averaged, not returned)."""
    keys = list(zip(*(cols[c].tolist() for c in key)))
    count: dict[tuple[object, ...], int] = {}
    for k in keys:
        count[k] = count.get(k, 0) + 1
    return np.array([i for i, k in enumerate(keys) if count[k] == 1])


def _sample(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(n, size=min(SAMPLE, n), replace=False)


@pytest.mark.parametrize("system", sorted(set(SYSTEMS.values())))
@pytest.mark.parametrize("name", FAMILIES)
def test_measured_points_come_back_exactly(system: str, name: str) -> None:
    fam = family(system, name)
    if fam is None:
        pytest.skip(f"{system} has no {name} table")
    kc = kernel_costs(DEVICE[system])
    rng = np.random.default_rng(0)
    path = fam.table[4]
    got: list[float] = []
    want: list[float] = []
    if name == "gemm":
        cols = read_columns(path, ("kernel_source", "gemm_dtype", "m", "n", "k", "latency"))
        chosen = {k[0] for k in fam.grids}
        pick = dict(fam.sources)
        rows = _unique_rows(cols, ("kernel_source", "gemm_dtype", "m", "n", "k"))
        rows = np.array([i for i in rows if cols["gemm_dtype"][i] in chosen and cols["gemm_dtype"][i] in _INV_GEMM
                         and pick.get(str(cols["gemm_dtype"][i])) == cols["kernel_source"][i]])
        for i in rows[_sample(len(rows), rng)]:
            p = kc.gemm(cols["m"][i], cols["n"][i], cols["k"][i], _INV_GEMM[str(cols["gemm_dtype"][i])])
            assert p.sources() == ["measured"]
            got.append(float(p.seconds))
            want.append(float(cols["latency"][i]) * 1e-3)
    elif name in ("context_attention", "decode_attention"):
        cols = read_columns(path, ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                   "window_size", "attn_dtype", "kv_cache_dtype", "step", "latency"))
        key = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size", "attn_dtype",
               "kv_cache_dtype", "step")
        rows = _unique_rows(cols, key)
        decode = name == "decode_attention"
        if decode:  # one point per KV length: isl + step must not collide
            kv = cols["isl"] + cols["step"]
            rows = np.intersect1d(rows, _unique_rows({**cols, "kv": kv}, key[2:8] + ("batch_size", "kv")))
            rows = rows[cols["attn_dtype"][rows] == "bfloat16"]
        rows = rows[[str(cols["attn_dtype"][i]) in _INV_ATTN and str(cols["kv_cache_dtype"][i]) in _INV_ATTN
                     for i in rows]]
        for i in rows[_sample(len(rows), rng)]:
            args = (cols["batch_size"][i], cols["num_heads"][i], cols["num_key_value_heads"][i])
            hd, win = int(cols["head_dim"][i]), int(cols["window_size"][i])
            kvd = _INV_ATTN[str(cols["kv_cache_dtype"][i])]
            if decode:
                p = kc.decode_attention(args[0], cols["isl"][i] + cols["step"][i], args[1], args[2], hd, kvd, win)
            else:
                p = kc.context_attention(args[0], cols["isl"][i], args[1], args[2], hd,
                                         _INV_ATTN[str(cols["attn_dtype"][i])], kvd, win)
            assert p.sources() == ["measured"], (i, p.sources())
            got.append(float(p.seconds))
            want.append(float(cols["latency"][i]) * 1e-3)
    elif name == "collective":
        cols = read_columns(path, ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
        half = cols["nccl_dtype"] == "half"
        for i in np.flatnonzero(half):  # every half row (the curve keeps them where int8 rows overlap)
            p = kc.collective(_INV_COMM[str(cols["op_name"][i])], cols["message_size"][i] * 2, cols["num_gpus"][i])
            assert p.sources() == ["measured"]
            got.append(float(p.seconds))
            want.append(float(cols["latency"][i]) * 1e-3)
    else:
        names = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                 "moe_tp_size", "moe_ep_size", "distribution")
        chosen = fam.by_key  # the kernel source kept per layout (the engine's per-layout kernel)
        seen: set[tuple[object, ...]] = set()
        cand = []
        for ref in find_tables(system, "moe", "moe_perf.parquet"):  # newest first: a newer row wins
            cols = read_columns(ref[4], names + ("latency",))
            rows = _unique_rows(cols, names)
            keys = list(zip(*(cols[c].tolist() for c in names)))
            for i in rows:
                k = keys[i]
                layout = (k[1], k[9], k[3], k[4], k[5], k[6], k[7], k[8])
                if k in seen or chosen.get(layout) != k[0] or k[1] not in _INV_GEMM or k[9] not in _INV_MOE:
                    continue
                cand.append((k, float(cols["latency"][i])))
            seen.update(keys)
        for j in _sample(len(cand), rng):
            k, lat = cand[j]
            p = kc.moe(k[2], k[3], k[4], k[5], k[6], k[7], k[8], _INV_GEMM[k[1]], _INV_MOE[k[9]])
            assert p.sources() == ["measured"]
            got.append(float(p.seconds))
            want.append(lat * 1e-3)
    assert len(got) >= min(SAMPLE, 100)
    assert got == want


def test_a_compute_dtype_the_tables_lack_reads_the_same_caches_other_lattice_marked_extrapolated() -> None:
    """SGLang's H100 tables hold FP8-cache prefill attention only as (fp8, fp8): its collector does not pass the
    attention dtype to the backend, so those rows are the FP8-cache kernel.  A 16-bit-compute, FP8-cache query
    reads them (extrapolated), not the roofline; a 16-bit cache still reads its own measured lattice."""
    from dnnplace.kernels.sources import EXTRAPOLATED, MEASURED

    kc = kernel_costs("h100", "sglang")
    asked = kc.context_attention(2, 4096, 32, 8, 128, "bf16", "fp8")
    there = kc.context_attention(2, 4096, 32, 8, 128, "fp8", "fp8")
    assert asked.seconds[()] == there.seconds[()] and asked.source[()] == EXTRAPOLATED
    assert there.source[()] == MEASURED
    assert kc.context_attention(2, 4096, 32, 8, 128, "bf16", "bf16").source[()] == MEASURED
