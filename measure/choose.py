"""Look before measuring: a seconds-long probe of the device, then the dtype and model size it runs well.

CPUs differ by two orders of magnitude in what they do well: a Xeon with AMX runs
bf16 matrix products at ~1.6 TFLOP/s, an AVX2-only EPYC at ~11 GFLOP/s (against
~58 in fp32). Measuring a bf16 model on the second takes minutes per point and
shows only the emulation. So the measured half first times one verify-shaped
matrix product per dtype and one weight-streaming pass (a second or two), then

* picks the dtype: bf16 on a GPU; on a CPU bf16 when its matrix products run at
  least as fast as fp32's (it then also halves the bytes streamed), else fp32;
* picks the width of the offline pair's target (``measure.pair.widen``): the
  widest whose one-token pass streams its weights in about ``t_token_s`` seconds,
  so that a time budget buys enough passes, and says whether those weights lie
  beyond the last-level cache (memory bound, as a real LLM) or not.

:class:`DeviceChoice` carries the figures and a sentence of reasons for the page.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from measure.device import describe, resolve_device
from measure.models import TORCH_DTYPES
from measure.timing import time_fn
from roofline.passes.model import ModelSpec

#: widening factors tried for the pair's target (powers of two: widening is exact for them)
WIDTHS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class DeviceChoice:
    """What the measured half will run, and why. Rates in FLOP/s and bytes/s, times in seconds."""

    device: str
    name: str
    dtype: str
    width: int
    target_params: float
    target_bytes: float
    t_token_s: float
    stream_bytes_per_s: float
    rates_flop_per_s: dict[str, float] = field(default_factory=dict)
    llc_bytes: int | None = None
    reasons: tuple[str, ...] = ()
    #: CPU threads torch runs with (None on a GPU)
    threads: int | None = None

    @property
    def memory_bound(self) -> bool:
        """Whether the target's weights lie well beyond the last-level cache (always on a GPU)."""
        return self.llc_bytes is None or self.target_bytes >= 4 * self.llc_bytes

    def describe(self) -> str:
        return " ".join(self.reasons)


def matmul_rate(dtype: str, device: torch.device, m: int = 32, k: int = 1024, n: int = 4096) -> float:
    """FLOP/s of one verify-shaped product (``m`` tokens against a k x n weight): tens of ms at worst."""
    a = torch.full((m, k), 0.5, device=device).to(TORCH_DTYPES[dtype])
    w = torch.full((n, k), 0.01, device=device).to(TORCH_DTYPES[dtype])
    t = time_fn(lambda: torch.nn.functional.linear(a, w), warmup=1, repeats=3, device=device)
    return 2.0 * m * k * n / t.min_s


def matmul_rates(device: torch.device, dtypes: tuple[str, ...] = ("fp32", "bf16"), rounds: int = 3) -> dict[str, float]:
    """:func:`matmul_rate` of each dtype, the best of ``rounds`` interleaved timings.

    Interleaved so that a slow moment of a shared machine falls on both dtypes, not on
    one: timed once each, a burst of another process's memory traffic during fp32's
    product made an AVX2 EPYC's fp32 look slower (15 GFLOP/s, against 45-53 in the
    runs before) than its emulated bf16 (18).
    """
    best = dict.fromkeys(dtypes, 0.0)
    for _ in range(max(1, rounds)):
        for d in dtypes:
            best[d] = max(best[d], matmul_rate(d, device))
    return best


#: CPU flags (x86 ``flags``, Arm ``Features``) that name bf16 arithmetic units
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def bf16_units(isa: list[str] | None) -> bool | None:
    """Whether the CPU has bf16 arithmetic units, from its flags; None where they could not be read."""
    if isa is None:
        return None
    return any(f in BF16_FLAGS for f in isa)


def stream_rate(device: torch.device, nbytes: int, dtype: str = "fp32") -> float:
    """Bytes/s at which a one-row product streams a ``dtype`` matrix of ``nbytes`` (the decode ceiling), through the
    kernel the harness's model runs for it (:func:`measure.models.prepared_linear`)."""
    from measure.models import prepared_linear

    k = 4096
    td = TORCH_DTYPES[dtype]
    size = torch.finfo(td).bits // 8
    w = torch.full((max(1, nbytes // (size * k)), k), 0.01, device=device, dtype=td)
    x = torch.full((1, k), 0.5, device=device, dtype=td)
    product = prepared_linear(w, 1)
    t = time_fn(lambda: product(x), warmup=1, repeats=5, device=device)
    return w.numel() * size / t.min_s


def choose_threads(device: torch.device, share: float = 0.8) -> tuple[int, str]:
    """CPU threads to measure with: all cores, unless one thread does at least ``share`` of their work.

    On a machine where another process keeps a core busy, a multi-threaded matrix product
    waits for its slowest thread at every call: no faster than one thread on a free core,
    and far noisier. Measured, not guessed: the same product with every core and with one.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    cores = max(1, cores)
    if cores == 1:
        return 1, "Threads: 1 (the only core)."
    old = torch.get_num_threads()
    tries: dict[int, list[float]] = {cores: [], 1: []}
    try:
        # interleaved, the median of five each: a slow moment then falls on both counts, not on one. The median,
        # not the best: beside a busy core the best try of every core is the one moment the busy process was off
        # its core, and a check's decoding runs for minutes through the other moments (2026-12-07: best of three
        # chose 2 threads at "2.4x one thread's speed", and the baseline then took 332 ms a step against the
        # 35 ms its streaming rate allows)
        for _ in range(5):
            for n in (cores, 1):
                torch.set_num_threads(n)
                tries[n].append(matmul_rate("fp32", device))
    finally:
        torch.set_num_threads(old)
    rates = {n: float(np.median(v)) for n, v in tries.items()}
    if rates[1] >= share * rates[cores]:
        return 1, (
            f"Threads: 1, not {cores}: one thread ran a matrix product at {rates[1] / rates[cores]:.0%} of the speed "
            f"of {cores} (a core is busy with other work here), and a single thread is not held up by a shared core."
        )
    return cores, f"Threads: {cores} ({rates[cores] / rates[1]:.1f}x one thread's speed)."


def choose_dtype(rates: dict[str, float], kind: str, units: bool | None = None) -> tuple[str, str]:
    """The dtype to measure in, and the reason, from per-dtype matmul rates (FLOP/s).

    ``units`` (:func:`bf16_units`): whether the CPU's flags name bf16 units. Where they
    say none, bf16 is emulated whatever one timing says, and fp32 is chosen; where they
    cannot be read, the faster dtype is (bf16 on a tie: it halves the bytes).
    """
    if kind == "cuda":
        return "bf16", "bf16: the dtype GPUs serve LLMs in (tensor cores)."
    fp32, bf16 = rates.get("fp32", 0.0), rates.get("bf16", 0.0)
    rates_text = f"{bf16 / 1e9:.0f} GFLOP/s against fp32's {fp32 / 1e9:.0f}"
    if units is False:
        return "fp32", (
            f"fp32: this CPU's flags name no bf16 units, so bf16 is emulated (its matrix products ran at {rates_text} "
            "here) and a bf16 model would measure the emulation, not the hardware."
        )
    if bf16 >= fp32:
        has = "this CPU has bf16 units" if units else "faster than fp32 here"
        return (
            "bf16",
            f"bf16: its matrix products run at {rates_text} ({has}), and it halves the bytes each pass streams.",
        )
    return "fp32", (
        f"fp32: bf16 matrix products run at only {rates_text} here"
        + (" although the CPU has bf16 units" if units else " (bf16 is emulated or slow here)")
        + ", so a bf16 model would be the slower measurement."
    )


def cpu_bf16_units(device: torch.device) -> bool | None:
    """:func:`bf16_units` of the CPU ``device`` runs on (None for other devices, or flags not read)."""
    if device.type != "cpu":
        return None
    return bf16_units(describe(device).get("isa"))


def choose_width(
    base: ModelSpec,
    dtype: str,
    stream_bytes_per_s: float,
    t_token_s: float,
    widths: tuple[int, ...] = WIDTHS,
    memory_bytes: float | None = None,
) -> int:
    """The widest factor whose one-token pass streams the weights in at most ``t_token_s`` (at least the first).

    ``memory_bytes`` (the device's): widening holds fp32 copies of the weights beside the
    result, so a width whose weights exceed an eighth of it is not considered.
    """
    from measure.pair import widened_spec

    bytes_per = 4.0 if dtype == "fp32" else 2.0
    best = widths[0]
    for w in widths:
        spec = widened_spec(base, w) if w > 1 else base
        nbytes = spec.total_params * bytes_per
        fits = memory_bytes is None or nbytes <= memory_bytes / 8
        if fits and nbytes / stream_bytes_per_s <= t_token_s:
            best = w
    return best


def probe_and_choose(
    device: str | torch.device | None = None,
    *,
    t_token_s: float = 0.02,
    dtype: str | None = None,
    width: int | None = None,
    threads: int | None = None,
) -> DeviceChoice:
    """Probe the device (about a second) and choose dtype and target width; ``dtype``/``width`` force a choice.

    ``threads`` forces the CPU thread count (a resumed check reuses the one it recorded,
    since the load that chose it has changed since).
    """
    from measure.pair import PairConfig, widened_spec

    dev = resolve_device(device)
    info = describe(dev)
    llc = info.get("llc_bytes") if dev.type == "cpu" else None
    reasons = []
    if dev.type == "cpu" and threads is not None:
        torch.set_num_threads(threads)
        reasons.append(f"Threads: {threads} (recorded by the run being resumed).")
    elif dev.type == "cpu":
        threads, why_threads = choose_threads(dev)
        torch.set_num_threads(threads)
        reasons.append(why_threads)
    else:
        threads = None
    rates = matmul_rates(dev)
    chosen, why = choose_dtype(rates, dev.type, bf16_units(info.get("isa")))  # (a GPU's choice ignores the flags)
    reasons.insert(0, why)
    if dtype is not None and dtype != chosen:
        reasons = [f"{dtype}: asked for (the probe would have chosen {why})"]
        chosen = dtype
    stream = stream_rate(dev, int(max(4 * (llc or 0), 256 << 20)) if dev.type == "cpu" else 1 << 30, chosen)
    base = PairConfig().target_spec()
    w = (
        width
        if width is not None
        else choose_width(base, chosen, stream, t_token_s, memory_bytes=info.get("memory_bytes"))
    )
    spec = widened_spec(base, w) if w > 1 else base
    nbytes = spec.total_params * (4.0 if chosen == "fp32" else 2.0)
    t1 = nbytes / stream
    where = (
        "well beyond the last-level cache, so one-token passes are memory bound as a real LLM's are"
        if llc is None or nbytes >= 4 * llc
        else f"not far beyond the {llc / 2**20:.0f} MiB last-level cache, so passes are partly cache bound"
    )
    reasons.append(
        f"Target: the offline pair's target widened x{w} ({spec.total_params / 1e9:.2f}e9 weights, "
        f"{nbytes / 1e9:.2f} GB in {chosen}), {where}; a one-token pass streams it in about {t1 * 1e3:.2g} ms "
        f"at the measured {stream / 1e9:.0f} GB/s" + (" (width asked for)." if width is not None else ".")
    )
    return DeviceChoice(
        device=str(dev),
        name=str(info.get("name", dev)),
        dtype=chosen,
        width=w,
        target_params=float(spec.total_params),
        target_bytes=float(nbytes),
        t_token_s=float(t1),
        stream_bytes_per_s=float(stream),
        rates_flop_per_s=rates,
        llc_bytes=llc,
        reasons=tuple(reasons),
        threads=threads,
    )


def fastest_decode_path(model: Any, repeats: int = 5) -> tuple[bool | None, str]:
    """Which one-token path plain decoding should use on this device, and why: ``torch.mv`` everywhere (True), a
    one-row matrix product everywhere (False), or the model's own per-shape choice (None: ``Transformer`` times each
    weight shape's kernels when its cache is set up).

    The baseline must be the fastest plain decoding the device has, or speculation looks better than it is: time the
    candidates on the model itself and keep the fastest.
    """
    dev = model.device
    if dev.type != "cpu":
        model.set_matvec(False)
        return False, "one-token passes: matrix products (GPU)."
    linears = [m for m in model.modules() if hasattr(m, "kernels")]
    if getattr(model, "auto_kernels", False):
        # the per-shape choice first: left to the first setup_cache (inside the first timing below), it would
        # overwrite the one-token path being timed, and that path's time would be the per-shape choice's
        model.choose_kernels()
    chosen = {m: dict(m.kernels) for m in linears}
    times: dict[bool | None, float] = {}
    if any(chosen.values()):
        times[None] = one_token_step_s(model, context=16, repeats=repeats)
    for on in (True, False):
        model.set_matvec(on)
        times[on] = one_token_step_s(model, context=16, repeats=repeats)
    use = min(times, key=lambda k: times[k])
    if use is None:
        for m, kernels in chosen.items():
            m.kernels = kernels
    else:
        model.set_matvec(use)
    how = {None: "the kernel timed fastest for each weight shape", True: "torch.mv", False: "a one-row matrix product"}
    others = ", ".join(f"{how[k]} {v * 1e3:.1f} ms" for k, v in times.items() if k is not use)
    return use, (
        f"Plain decoding (the baseline every speedup is against) uses {how[use]} for its one-token passes, the "
        f"fastest path here ({times[use] * 1e3:.1f} ms per step; {others})."
    )


def one_token_step_s(model: Any, context: int = 64, repeats: int = 5) -> float:
    """Seconds of one one-token pass of ``model`` at batch 1 (the fastest of a few): a real step to plan with."""
    dev = model.device
    model.setup_cache(1, context + 8)
    token = torch.zeros(1, 1, dtype=torch.long, device=dev)

    def step() -> None:
        model.cache.rollback([context])
        model(token)

    with torch.inference_mode():
        return time_fn(step, warmup=2, repeats=repeats, device=dev).min_s
