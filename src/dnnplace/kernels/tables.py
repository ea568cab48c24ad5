"""Where the measured tables are and how one is read: aiconfigurator-core's silicon data, loaded lazily.

NVIDIA's ``aiconfigurator-core`` (Apache-2.0) ships kernel latencies measured on silicon under
``aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/*.parquet``.  We read those
files directly with pyarrow, never importing the package (its import pulls in pandas and its estimator):
``find_spec`` only locates the folder.  Nothing here runs at ``import dnnplace``; each table is read once
per process (:func:`read_columns` is cached) and turned into numpy arrays.

Which table prices a device is a documented choice, never a per-row pick (docs/kernels.md): for each
family the framework in :data:`FRAMEWORK_ORDER` that has the table (TensorRT-LLM first: its ``torch_flow``
GEMMs are cuBLAS through PyTorch, the kernels a trainer calls), at its newest version holding that file.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import numpy as np

__all__ = ["FRAMEWORK_ORDER", "SYSTEMS", "TableRef", "data_root", "find_table", "find_tables", "read_columns",
           "table_versions"]

#: dnnplace device name -> aiconfigurator system folder (the ten systems with measured tables).
SYSTEMS: dict[str, str] = {
    "a100": "a100_sxm", "a100-80g": "a100_sxm", "h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm",
    "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s", "rtx-pro-6000": "rtx_pro_6000_server",
    "b60": "b60",
}

#: Frameworks in the order a table is taken from when several measured the family.
FRAMEWORK_ORDER = ("trtllm", "vllm", "sglang")
#: Collectives: NCCL's own folder (measured with nccl-tests-like sweeps) comes first.
COMM_ORDER = ("nccl",) + FRAMEWORK_ORDER


@functools.cache
def data_root() -> Path | None:
    """The ``systems/data`` folder of the installed aiconfigurator-core, or None when it is not installed."""
    try:
        spec = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return root if root.is_dir() else None


def _version_key(v: str) -> tuple[tuple[int, ...], int, str]:
    """Sort key of a framework version ('1.3.0rc20', '0.5.6.post2', '2.29.2'): release, pre-release after."""
    nums = tuple(int(x) for x in re.findall(r"\d+", v.split("rc")[0].split(".post")[0].split(".dev")[0]))
    rc = re.search(r"rc(\d+)", v)
    return nums, (int(rc.group(1)) if rc else 10**6), v


def table_versions(system: str, family: str, framework: str, filename: str) -> list[str]:
    """Versions (newest first) of ``framework`` that hold ``filename`` for ``family`` on ``system``."""
    root = data_root()
    if root is None:
        return []
    base = root / system / family / framework
    if not base.is_dir():
        return []
    found = [d.name for d in base.iterdir() if (d / filename).is_file()]
    return sorted(found, key=_version_key, reverse=True)


class TableRef(tuple[str, str, str, str, Path]):
    """(system, family, framework, version, path) of one table file."""

    @property
    def label(self) -> str:
        return f"{self[2]} {self[3]}"


def find_table(system: str, family: str, filename: str, order: tuple[str, ...] = FRAMEWORK_ORDER,
               framework: str | None = None) -> TableRef | None:
    """The table a family is priced from: ``framework`` if given, else the first of ``order`` that has it;
    its newest version holding the file."""
    root = data_root()
    if root is None:
        return None
    for fw in (framework,) if framework else order:
        versions = table_versions(system, family, fw, filename)
        if versions:
            v = versions[0]
            return TableRef((system, family, fw, v, root / system / family / fw / v / filename))
    return None


def find_tables(system: str, family: str, filename: str, framework: str | None = None) -> list[TableRef]:
    """Every version (newest first) of the framework :func:`find_table` picks: for families collected per
    model in supplements (the MoE layers), whose newest folder holds only the latest models' shapes."""
    first = find_table(system, family, filename, framework=framework)
    if first is None:
        return []
    root = first[4].parents[4]
    return [TableRef((system, family, first[2], v, root / system / family / first[2] / v / filename))
            for v in table_versions(system, family, first[2], filename)]


@functools.cache
def read_columns(path: Path, columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named columns of a parquet file as numpy arrays (strings as object arrays); read once."""
    import pyarrow.parquet as pq  # lazily: pyarrow is heavy and only tables need it

    have = set(pq.read_schema(path).names)
    table = pq.read_table(path, columns=[c for c in columns if c in have])
    out: dict[str, np.ndarray] = {}
    for name in columns:
        if name not in have:
            if name not in ABSENT_MEANS:
                raise ValueError(f"{path}: no column '{name}'")
            out[name] = np.full(table.num_rows, ABSENT_MEANS[name])  # an older collection without the axis
            continue
        out[name] = np.asarray(table.column(name).to_numpy(zero_copy_only=False))
    return out


#: Columns older collections lack, and what their absence means (vLLM 0.14's A100 attention tables have no
#: window_size: every row is full attention).
ABSENT_MEANS: dict[str, object] = {"window_size": 0}
