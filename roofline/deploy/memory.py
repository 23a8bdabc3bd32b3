"""Memory as serving engines reserve it (docs/cost-model.md, section 50.4): a configuration fits when its footprint
per device is within the share of each device the engine takes for weights, KV cache and activations, not within the
whole device. The footprint itself is :func:`roofline.costing.passtime.memory_footprint`'s; this module only says how much of
a device an engine lets it use, and the largest batch or context that fits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import memory_footprint
from roofline.passes.model import ModelSpec, get_model

#: vLLM's EngineArgs gpu_memory_utilization default (vllm/config/cache.py): the share of each device it pre-allocates
VLLM_GPU_MEMORY_UTILIZATION = 0.9
#: SGLang's mem_fraction_static default by tensor-parallel degree (python/sglang/srt/server_args.py, 0.4 releases:
#: TP >= 16: 0.79, >= 8: 0.81, >= 4: 0.85, >= 2: 0.87, else 0.88); later releases derive it from the device's memory
#: minus a reserve (2 GiB more under speculation), so --memory-fraction states yours
SGLANG_MEM_FRACTION_STATIC = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def reserved_share(family: str | None, tp: int = 1, fraction: float | None = None) -> tuple[float, str]:
    """The share of each device the engine lets the model use, and the sentence naming where it comes from."""
    if fraction is not None:
        if not 0.0 < float(fraction) <= 1.0:
            raise SpecroofError(f"--memory-fraction must lie in (0, 1] (got {fraction})")
        return float(fraction), f"--memory-fraction {float(fraction):g}"
    if family == "vllm":
        return VLLM_GPU_MEMORY_UTILIZATION, f"vLLM's gpu_memory_utilization default {VLLM_GPU_MEMORY_UTILIZATION:g}"
    if family == "sglang":
        f = next(v for t, v in SGLANG_MEM_FRACTION_STATIC if tp >= t)
        return f, f"SGLang's mem_fraction_static default at TP {tp}, {f:g}"
    return 1.0, "the whole device (no engine named: --emit vllm|sglang or --memory-fraction for the share yours takes)"


@dataclass(frozen=True)
class Largest:
    """The largest batch at the asked context, and the longest context at the asked batch, that fit (0: none)."""

    batch: int
    context: int


def per_device_bytes(spec: ModelSpec | str, b: int, c: int, new_tokens: int, tp: int, **dtypes: str | None) -> float:
    """The target's weights + KV + activations on each of ``tp`` devices (the footprint split evenly by TP)."""
    fp = memory_footprint(get_model(spec), b, c, new_tokens=new_tokens, **dtypes)  # type: ignore[arg-type]
    return float(fp.total_bytes) / max(1, tp)


def largest_fit(
    spec: ModelSpec | str,
    capacity_bytes: float,
    *,
    batch: int,
    context: int,
    new_tokens: int = 1,
    tp: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    act_dtype: str | None = None,
    extra_bytes: float | Callable[[int, int], float] = 0.0,
) -> Largest:
    """Largest batch (at ``context``) and context (at ``batch``) whose footprint per device, plus ``extra_bytes`` (a
    drafter's own: a number, or a function of (batch, context) where the drafter keeps a KV cache of its own that
    grows with both), is within ``capacity_bytes`` (bisection: the footprint rises with both)."""
    s = get_model(spec)
    kw = {"weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "act_dtype": act_dtype}

    def fits(b: int, c: int) -> bool:
        extra = float(extra_bytes(b, c)) if callable(extra_bytes) else float(extra_bytes)
        return per_device_bytes(s, b, c, new_tokens, tp, **kw) + extra <= capacity_bytes

    def grow(ok: object, lo: int, top: int) -> int:
        if not ok(lo):  # type: ignore[operator]
            return lo - 1 if lo > 0 else 0
        hi = lo
        while hi < top and ok(hi * 2):  # type: ignore[operator]
            hi *= 2
        hi2 = min(hi * 2, top)
        while hi2 - hi > 1:
            mid = (hi + hi2) // 2
            hi, hi2 = (mid, hi2) if ok(mid) else (hi, mid)  # type: ignore[operator]
        return hi if not ok(hi2) else hi2  # type: ignore[operator]

    b = grow(lambda x: fits(int(x), context), 1, 1 << 20)
    c = grow(lambda x: fits(batch, int(x)), 1, int(getattr(s, "max_context", 1 << 20) or 1 << 20))
    return Largest(max(0, b), max(0, c))
