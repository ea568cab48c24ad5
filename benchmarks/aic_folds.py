"""aiconfigurator-core's own interpolation engine on the leave-one-out folds of ``kernels_loo.py``.

Why: aiconfigurator's published leave-one-out figures (docs/design/perf_interp_design.md) were measured on
other tables (H100 SGLang 0.5.10 / vLLM 0.19.0, GB200 SGLang 0.5.10, 300 GEMM folds), so they say how hard
those tables are as much as how good the interpolator is.  Asking aiconfigurator's engine the very folds we
answer -- the same table, the same points left out -- compares the two interpolators on equal terms.

How: for each fold (one value of one axis: a GEMM ``m`` of one data type, a prefill batch size or sequence
length), the table is written without that slice into a scratch copy of aiconfigurator's ``systems`` tree
(every other file a link; other versions of the framework left out, so the engine cannot answer a left-out
point from another version's measurement of it), the engine is loaded from it (``perf_database.get_database`` +
``EngineHandle.for_database``, the model-less probe the package documents) and each left-out point is asked
as one op through ``EngineHandle.evaluate_ops_json``.  The GEMM table is first cut to the kernel source our
layer keeps for each data type, so both sides see the same rows.  The engine adds a table-independent term
to prefill attention (about 13 us, source ``mixed``); it is taken off by asking the same op with the whole
table loaded, where the kernel part is the measured value.  Only the points our fold scores (both lattice
neighbours measured) are asked.

Nothing here is imported by dnnplace; it needs ``aiconfigurator-core`` (installed by ``make setup``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from dnnplace.kernels.grid import Grid
from dnnplace.kernels.measured import Family

#: Our family / axis -> the table column that axis is.
_COLUMN = {("gemm", "m"): "m", ("context_attention", "batch"): "batch_size",
           ("context_attention", "seq"): "isl"}
_ATTN_COLS = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size", "attn_dtype",
              "kv_cache_dtype", "latency")


def supported(family: str, axis: str) -> bool:
    return (family, axis) in _COLUMN


def _interior(grid: Grid, j: int) -> np.ndarray:
    """Lattice indices (rows of index tuples) of the points our fold scores along axis ``j``: the point and
    both its neighbours along the axis measured."""
    v = grid.values
    n = v.shape[j]
    ok = np.zeros(v.shape, dtype=bool)
    mid = [slice(None)] * v.ndim
    lo, hi = list(mid), list(mid)
    mid[j], lo[j], hi[j] = slice(1, n - 1), slice(0, n - 2), slice(2, n)
    ok[tuple(mid)] = np.isfinite(v[tuple(lo)]) & np.isfinite(v[tuple(mid)]) & np.isfinite(v[tuple(hi)]) \
        & (v[tuple(mid)] > 0)
    return np.argwhere(ok)


def _mirror(tmp: str, system: str, rel: Path, table: object) -> Path:
    """A scratch ``systems`` root: aiconfigurator's files linked, ``rel`` (under ``data/<system>``) written
    from ``table``."""
    import aiconfigurator_core
    import pyarrow.parquet as pq

    src = Path(aiconfigurator_core.__file__).parent / "systems"
    root = Path(tmp) / "systems"
    (root / "data").mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            os.symlink(f, root / f.name)
    sysdir = src / "data" / system
    target = root / "data" / system / rel
    framework, version = rel.parts[1], rel.parts[2]
    for dirpath, dirs, files in os.walk(sysdir):
        here = Path(dirpath).relative_to(sysdir)
        if len(here.parts) == 2 and here.parts[1] == framework:  # <family>/<framework>: this version only
            dirs[:] = [d for d in dirs if d == version]
        out = root / "data" / system / here
        out.mkdir(parents=True, exist_ok=True)
        for f in files:
            if out / f != target:
                os.symlink(Path(dirpath) / f, out / f)
    pq.write_table(table, target)
    return root


def _handle(system: str, framework: str, version: str, root: Path | None) -> tuple[Any, Any]:
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle

    path = None if root is None else str(root)
    db = perf_database.get_database(system, framework, version, systems_paths=path)
    return db, EngineHandle.for_database(db, systems_path=path)


def fold_errors(fam: Family, axis: str) -> np.ndarray:
    """|aiconfigurator - measured| / measured on every point our fold along ``axis`` scores."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    system, kind, framework, version, path = fam.table
    rel = Path(path).relative_to(Path(path).parents[3])
    table = pq.read_table(path)
    if fam.name == "gemm":  # the rows our layer keeps: per data type, one kernel source
        dt = np.asarray(table.column("gemm_dtype").to_numpy(zero_copy_only=False))
        srcs = np.asarray(table.column("kernel_source").to_numpy(zero_copy_only=False))
        keep = np.zeros(len(dt), dtype=bool)
        for d, s in fam.sources:
            keep |= (dt == d) & (srcs == s)
        table = table.filter(pa.array(keep))
    col = _COLUMN[(fam.name, axis)]
    j = fam.axes.index(axis)
    # the points to ask, grouped by the left-out value of the axis
    asks: dict[float, list[tuple[tuple[object, ...], tuple[float, ...], float]]] = {}
    for key, grid in fam.grids.items():
        if len(grid.axes[j]) < 3:
            continue
        for idx in _interior(grid, j):
            coords = tuple(float(grid.axes[a][i]) for a, i in enumerate(idx))
            asks.setdefault(coords[j], []).append((key, coords, float(grid.values[tuple(idx)])))
    values = np.asarray(table.column(col).to_numpy(zero_copy_only=False), dtype=float)
    dtypes = np.asarray(table.column("gemm_dtype").to_numpy(zero_copy_only=False)) if fam.name == "gemm" else None
    full_db, full = _handle(system, framework, version, None) if fam.name != "gemm" else (None, None)
    errs = []
    for x, points in sorted(asks.items()):
        left = values == x
        if dtypes is not None:
            left &= np.isin(dtypes, sorted({p[0][0] for p in points}))
        meas = np.array([p[2] for p in points]) * 1e3  # our grids hold seconds; the engine answers ms
        with tempfile.TemporaryDirectory() as tmp:
            root = _mirror(tmp, system, rel, table.filter(pa.array(~left)))
            db, handle = _handle(system, framework, version, root)
            pred = _ask(fam.name, db, handle, points)
            if full is not None:  # take off the engine's table-independent term (see the module docstring)
                pred = pred - (_ask(fam.name, full_db, full, points) - meas)
        errs.append(np.abs(pred - meas) / meas)
    return np.concatenate(errs) if errs else np.array([])


def _ask(name: str, db: Any, handle: Any, points: list) -> np.ndarray:
    """The engine's latency (ms) at each point, one op per point, grouped by the call's (batch, s)."""
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.engine import build_ops_json

    out = np.empty(len(points))
    groups: dict[tuple[int, int], list[int]] = {}
    if name == "gemm":
        from aiconfigurator_core.sdk.operations import GEMM

        for i, (_key, (m, _n, _k), _v) in enumerate(points):
            groups.setdefault((1, int(m)), []).append(i)

        def op(i: int) -> object:
            key, (_m, n, k), _v = points[i]
            return GEMM(f"g{i}", 1, int(n), int(k), common.GEMMQuantMode[str(key[0])])
    else:
        from aiconfigurator_core.sdk.operations.attention import ContextAttention, resolved_lane_order_for_op

        lane = resolved_lane_order_for_op(db, "_context_attention_data", None)
        for i, (_key, (b, s, _h, _kv), _v) in enumerate(points):
            groups.setdefault((int(b), int(s)), []).append(i)

        def op(i: int) -> object:
            (head_dim, window, attn, kv), (_b, _s, h, kvh), _v = points[i]
            a = ContextAttention(f"a{i}", 1, int(h), int(kvh), common.KVCacheQuantMode[str(kv)],
                                 common.FMHAQuantMode[str(attn)], head_size=int(head_dim), window_size=int(window))
            a._lane_order = lane  # what aiconfigurator's own spec builder sets before evaluating
            return a
    for (b, s), idx in groups.items():
        res = handle.evaluate_ops_json(build_ops_json([op(i) for i in idx]), is_context=True, batch_size=b, s=s)
        out[idx] = [r[1] for r in res]
    return out
