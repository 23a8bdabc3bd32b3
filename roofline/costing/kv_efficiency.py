"""The decode-attention kernel's KV read: the share of streaming bandwidth it reaches, by batch, heads and GPU.

A split-KV decode-attention kernel (FlashAttention's Flash-Decoding, FlashInfer's decode, flex-decoding, FlashMLA) runs
one thread block per (sequence, KV head, split of the sequence). When those work units fill the GPU's SMs a whole
number of times it streams the cache at its ceiling; otherwise the last wave runs on part of the GPU
(docs/cost-model.md, section 54):

    units = B x H_kv x s           s: the splits the kernel picks (FlashAttention's heuristic, :func:`splits`)
    u     = units / SMs            waves of work
    q     = u / (u + tail x (ceil(u) - u))                        the share of the GPU the call keeps busy
    t     = max(floor + bytes / r, bytes / (r q)),  r = ceiling x peak      one call

The floor (launch, first loads, the splits' reduction) runs while a partial wave's idle SMs wait: a call pays the
larger of the two. ``ceiling`` (per GPU generation), ``tail`` and ``floor`` are fitted on public kernel tables
(``published/kernels/attention/``): :func:`fit_flash_decoding` reproduces the constants below. The time model prices
a call's KV read at ``max(bytes / r, bytes / (r q) - floor)`` with ``r = min(ceiling x peak, the engine's stream)``:
the floor itself is in the engine's per-layer time (:meth:`KVRead.call_read_seconds`), in one place,
:meth:`roofline.costing.timemodel.TimeModel.operator_memory`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from roofline.costing.engine import Engine

#: the public kernel tables this curve is fitted on
ATTENTION_KERNELS_DIR = Path(__file__).resolve().parents[2] / "published" / "kernels" / "attention"

#: bytes of one KV head's K and V per token in the tables' unit: 128 dimensions of a 16-bit dtype. A pass's cost does
#: not carry its head count, so the work units are counted from the bytes a sequence reads per token and layer on one
#: device (an fp8 cache counts half a head per head: one of the curve's approximations, section 54)
HEAD_BYTES = 2 * 128 * 2

#: the key block of FlashAttention's split-KV decode kernel (a split covers at least one block of keys)
KEY_BLOCK = 256

#: query rows of one block of a prefill-style attention kernel: a pass of ``n`` new tokens per sequence has
#: ``ceil(n / 64)`` query tiles per (sequence, KV head), one work unit each (a decode or a verify of a few tokens: one)
QUERY_TILE = 64

#: FlashAttention's split heuristic (``num_splits_heuristic``): no split once the units fill 80% of the SMs; otherwise
#: the fewest splits whose wave efficiency is within 85% of the best, at most 128
SPLIT_MIN_FILL, SPLIT_NEAR_BEST, SPLIT_MAX = 0.8, 0.85, 128

#: fitted on the Flash-Decoding blog's A100 table (:func:`fit_flash_decoding`, section 54): the share of the datasheet
#: bandwidth at full occupancy, the share of a partial last wave that is not hidden, the per-call floor (seconds)
AMPERE_CEILING, TAIL, FLOOR_S = 0.72, 1.0, 15.0e-6
#: FlashMLA's README: 3000 GB/s of the H800 SXM5's 3352 on a memory-bound dense decode (one figure: the ceiling)
HOPPER_CEILING = 3000.0 / 3352.0

#: per GPU generation, the kernel's ceiling as a share of the datasheet bandwidth. Ada runs FlashAttention's sm80
#: kernels (Ampere's figure); Blackwell has no public decode table in text form: Hopper's figure, by family
CEILING = {"ampere": AMPERE_CEILING, "ada": AMPERE_CEILING, "hopper": HOPPER_CEILING, "blackwell": HOPPER_CEILING}

#: hardware profile id prefix -> (generation, SMs), from the datasheets (Blackwell Ultra, B300 and GB300: 160); GPUs
#: not listed (Volta, Turing: no FlashAttention 2; AMD, TPU, Apple, CPUs) keep the engine's flat
#: ``kv_bandwidth_fraction``
GPUS = {
    "a100-pcie": ("ampere", 108), "a100-sxm": ("ampere", 108), "a10g": ("ampere", 80), "a10-": ("ampere", 72),
    "rtx-3090": ("ampere", 82), "rtx-3090-ti": ("ampere", 84),
    "l40s": ("ada", 142), "l40-": ("ada", 142), "l4-": ("ada", 58), "rtx-4090": ("ada", 128),
    "rtx-6000-ada": ("ada", 142),
    "h100-sxm": ("hopper", 132), "h100-nvl": ("hopper", 132), "h100-pcie": ("hopper", 114),
    "h200": ("hopper", 132), "h20-": ("hopper", 78),
    "b200": ("blackwell", 148), "gb200": ("blackwell", 148), "b300": ("blackwell", 160), "gb300": ("blackwell", 160),
    "rtx-5090": ("blackwell", 170), "rtx-pro-6000": ("blackwell", 188),
}  # fmt: skip

#: engines whose decode attention is a split-KV kernel under CUDA graphs and whose profiles do not fit a KV rate of
#: their own, with their kernel's split rule: gpt-fast-style ``compiled``, FlashAttention's (the long-context rows
#: published for it, MagicDec's project-page tables, ran FlashAttention-2's ``flash_attn_with_kvcache``: section 54).
#: vLLM, SGLang and TensorRT-LLM keep their fitted ``kv_bandwidth_fraction``
KV_ENGINES = {"compiled": "fa2"}


def gpu_of(hw_id: str) -> tuple[str, int] | None:
    """(generation, SMs) of a hardware profile id, the longest matching prefix; None for GPUs without the curve."""
    key = hw_id + "-"
    best = max((p for p in GPUS if key.startswith(p)), key=len, default=None)
    return None if best is None else GPUS[best]


def splits(units: Any, blocks: Any, sms: int, rule: str = "fa2") -> Any:
    """Splits of each sequence-head a kernel picks for ``units`` (sequence, KV head) pairs over ``blocks`` key blocks
    per sequence on ``sms`` SMs (floats or arrays; at least 1). ``fa2``: FlashAttention's ``num_splits_heuristic``
    (the kernel of the fitted table); ``flex``: PyTorch flex-decoding's ``get_split_k``, two splits per SM the pairs
    leave, ``max(2 floor(SMs / units), 1)`` (the ``compiled`` engine's kernel)."""
    u = np.asarray(units, dtype=float)
    if rule == "flex":
        return np.maximum(2.0 * np.floor(sms / np.maximum(u, 1.0)), 1.0)
    nb = np.maximum(np.asarray(blocks, dtype=float), 1.0)
    s = np.arange(1, SPLIT_MAX + 1, dtype=float).reshape((-1,) + (1,) * np.ndim(u))
    waves = u * s / sms
    eff = np.where((s <= np.minimum(nb, sms)), waves / np.ceil(np.maximum(waves, 1e-12)), 0.0)
    best = eff.max(axis=0)
    pick = np.argmax(eff >= SPLIT_NEAR_BEST * best, axis=0) + 1.0
    return np.where(u >= SPLIT_MIN_FILL * sms, 1.0, pick)


def occupancy(units: Any, blocks: Any, sms: int, tail: float = TAIL, rule: str = "fa2") -> Any:
    """The share ``q`` of the GPU a call keeps busy: ``u / (u + tail (ceil(u) - u))``, ``u`` its waves of work."""
    u = np.maximum(np.asarray(units, dtype=float) * splits(units, blocks, sms, rule) / sms, 1e-12)
    return u / (u + tail * (np.ceil(u) - u))


@dataclass(frozen=True)
class KVRead:
    """The KV-read rule of one (GPU, engine): the kernel's ceiling, the GPU's SMs and datasheet bandwidth."""

    peak_bytes_per_s: float
    sms: int
    ceiling: float
    generation: str
    tail: float = TAIL
    floor_s: float = FLOOR_S
    #: the kernel's split rule (:func:`splits`)
    split_rule: str = "fa2"

    def call_read_seconds(self, nbytes: Any, units: Any, context: Any, stream_bytes_per_s: float) -> Any:
        """Seconds one device's call spends reading ``nbytes`` of cache for ``units`` (sequence, KV head) pairs of
        ``context`` tokens, beyond the floor the engine's per-layer time holds: ``max(bytes / r, bytes / (r q) -
        floor)``, ``r`` the kernel's ceiling (never above the engine's stream of the weights)."""
        r = min(self.ceiling * self.peak_bytes_per_s, stream_bytes_per_s)
        blocks = np.ceil(np.asarray(context, dtype=float) / KEY_BLOCK)
        q = occupancy(units, blocks, self.sms, self.tail, self.split_rule)
        b = np.asarray(nbytes, dtype=float)
        return np.maximum(b / r, b / (r * q) - self.floor_s)


def kv_read_model(hw: Any, engine: Engine | None) -> KVRead | None:
    """The :class:`KVRead` of ``hw`` (a :class:`roofline.costing.hardware.Hardware`, which imports this module) under
    ``engine``; None where the engine keeps its flat ``kv_bandwidth_fraction``
    (not a split-KV engine of :data:`KV_ENGINES`) or the GPU has no curve."""
    if engine is None or engine.name not in KV_ENGINES or hw.measured is not None:
        return None
    g = gpu_of(hw.id)
    if g is None:
        return None
    return KVRead(hw.bandwidth_bytes_per_s, g[1], CEILING[g[0]], g[0], split_rule=KV_ENGINES[engine.name])


def call_seconds(
    nbytes: Any, units: Any, context: Any, sms: int, peak: float, ceiling: float, rule: str = "fa2", **fit: float
) -> Any:
    """One decode-attention call as the curve fits it: ``max(floor + bytes / r, bytes / (r q))``, ``r = ceiling x
    peak``."""
    floor, tail = fit.get("floor", FLOOR_S), fit.get("tail", TAIL)
    q = occupancy(units, np.ceil(np.asarray(context, dtype=float) / KEY_BLOCK), sms, tail, rule)
    b = np.asarray(nbytes, dtype=float)
    return np.maximum(floor + b / (ceiling * peak), b / (ceiling * peak * q))


def efficiency(context: Any, batch: Any, kv_heads: int, hw: Any, rule: str = "fa2", **fit: float) -> Any:
    """Achieved share of the datasheet bandwidth of one call over ``batch`` sequences of ``context`` tokens and
    ``kv_heads`` heads (of 128 dims in 16 bits) on one device, floor included (what a kernel benchmark reports), for
    the split rule ``rule`` (:func:`splits`)."""
    g = gpu_of(hw.id)
    if g is None:
        raise ValueError(f"no KV-read curve for {hw.id!r} (GPUs with one: {', '.join(sorted(GPUS))})")
    peak = hw.bandwidth_bytes_per_s
    nbytes = np.asarray(batch, dtype=float) * np.asarray(context, dtype=float) * kv_heads * HEAD_BYTES
    units = np.asarray(batch, dtype=float) * kv_heads
    return nbytes / peak / call_seconds(nbytes, units, context, g[1], peak, CEILING[g[0]], rule, **fit)


def load_attention_rows(folder: str | Path | None = None) -> list[dict[str, Any]]:
    """Every source file of ``published/kernels/attention`` (parsed TOML, its path added)."""
    out = []
    for path in sorted(Path(folder or ATTENTION_KERNELS_DIR).glob("*.toml")):
        data = tomllib.loads(path.read_text())
        data["path"] = str(path)
        out.append(data)
    return out


def fit_flash_decoding(folder: str | Path | None = None) -> dict[str, float]:
    """(floor, ceiling, tail) fitted on the Flash-Decoding blog's A100 rows: the least squared log error of
    :func:`call_seconds` over a grid (tail in steps of 0.02, floor of 0.5 us, ceiling of 0.002); returns the fit and
    its rms log error."""
    src = next(d for d in load_attention_rows(folder) if d["path"].endswith("flash_decoding_blog_a100.toml"))
    s = src["series"][0]
    B, L = np.asarray(s["batch"], dtype=float), np.asarray(s["context"], dtype=float)
    t = np.asarray(s["kernel_us"], dtype=float) * 1e-6
    heads = s["kv_heads"]
    nbytes = B * L * heads * 2 * s["head_dim"] * s["kv_bytes"]
    g = gpu_of(src["hardware"])
    assert g is not None
    peak = s["peak_GB_per_s"] * 1e9
    ceilings = np.round(np.arange(0.5, 1.0, 0.002), 3)[:, None, None]
    floors = (np.arange(0, 61) * 0.5e-6)[None, :, None]
    best: tuple[float, float, float, float] | None = None
    for tail in np.round(np.arange(0.0, 1.0001, 0.02), 2):
        q = occupancy(B * heads, np.ceil(L / KEY_BLOCK), g[1], float(tail))
        r = ceilings * peak
        pred = np.maximum(floors + nbytes / r, nbytes / (r * q))
        sse = (np.log(pred / t) ** 2).sum(axis=-1)
        i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
        if best is None or sse[i, j] < best[0]:
            best = (float(sse[i, j]), float(tail), float(floors[0, j, 0]), float(ceilings[i, 0, 0]))
    assert best is not None
    return {"floor": best[2], "ceiling": best[3], "tail": best[1], "rms_log_error": math.sqrt(best[0] / len(t))}
