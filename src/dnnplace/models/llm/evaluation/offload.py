"""Activation CPU offloading (Megatron-Core ``cpu_offloading_num_layers``): what leaves the GPU, what it costs.

Megatron-Core wraps every transformer layer in Transformer Engine's ``get_cpu_offload_context(enabled,
num_layers=N, model_layers=L, offload_activations=True, offload_weights=False)``.  TE's default schedule
(``transformer_engine/pytorch/cpu_offload.py``, ``OffloadSynchronizer._default_offload_sync_init``) offloads
the tensors saved for backward of layers 0 .. N-1 (weights excluded) on one side stream:

* forward: layer i's copy to the host starts when its forward ends and must finish before the forward of
  layer L - N + i starts (the main stream waits for it there); its GPU copy is freed then;
* backward: layer i's reload starts at the backward of layer L - 1 - N + i and must finish before the
  backward of layer i;

so that, TE's docstring says, the saved activations peak at (L - N) layers' worth: the GPU keeps no offloaded
layer beyond those (the in-flight copies are among the L - N).  The copies share one stream, so with per-layer
copy time c and per-layer compute time t (forward or backward) the pass is the longest path of a graph whose
layers run in order, copy i follows layer i and copy i - 1, and layer i + D (D = L - N) follows copy i.  A
path leaves the layers after layer j, runs copies j .. k and returns at layer k + D, gaining
(k - j + 1) c - (k - j + D - 1) t over the layers alone; with D >= 2 one such detour over every copy is the
longest (merging two detours gains (g - 1) c - (g - D + 1) t >= (D - 2) t >= 0 when c >= t, and no detour gains
when c < t), and with D = 1 every copy is its own detour of gain c.  The pass waits

    N c                          when N = L - 1,
    max(0, N c - (L - 2) t)      otherwise.

The backward is the same graph in reverse layer order (reload i is started L - 1 - N + i layers before layer
i's backward, D - 1 layers of compute ahead), with the backward time.  Both are non-decreasing in N, and the
GPU memory falls by one layer's activations per offloaded layer, which is what lets the search take the
smallest N that fits.
"""

from __future__ import annotations

import numpy as np

from dnnplace.core.catalogue import HostLink

Array = np.ndarray


def exposed(n: Array, layers: Array | int, copy_s: Array, layer_s: Array) -> Array:
    """Seconds one pass (forward or backward) of one micro-batch waits for its offload copies (module docstring).

    ``n`` offloaded layers of ``layers``, ``copy_s`` seconds to copy one layer's saved activations,
    ``layer_s`` seconds of one layer's compute in that pass; 0 where ``n`` is 0."""
    n, layers = np.asarray(n, dtype=float), np.asarray(layers, dtype=float)
    wait = np.where(n >= layers - 1, n * copy_s, np.maximum(0.0, n * copy_s - (layers - 2) * layer_s))
    return np.where(n > 0, wait, 0.0)


def copy_seconds(layer_bytes: Array, link: HostLink | None) -> Array:
    """Seconds to copy one layer's saved activations over the host link, one direction."""
    if link is None:
        return np.zeros_like(np.asarray(layer_bytes, dtype=float))
    return np.asarray(layer_bytes, dtype=float) / link.copy_bandwidth


def host_bytes(n: Array, layer_bytes: Array) -> Array:
    """Host memory per GPU the offloaded activations take: N layers of one micro-batch (pp = 1 keeps one in
    flight; TE allocates a pinned host copy per offloaded tensor)."""
    return np.asarray(n, dtype=float) * layer_bytes


def smallest_fitting(over: Array, saved_per_layer: Array, max_layers: Array) -> Array:
    """The smallest N whose saved bytes cover ``over`` (bytes above the GPU's capacity), or -1 where more
    than ``max_layers`` would be needed; 0 where nothing is over."""
    need = np.ceil(np.divide(over, saved_per_layer, out=np.full_like(over, np.inf), where=saved_per_layer > 0))
    need = np.where(over <= 0, 0.0, need)
    return np.where(need <= max_layers, need, -1.0)
