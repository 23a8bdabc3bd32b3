"""Time a 10^6-point (batch x new tokens x context) sweep of forward_cost + step_time in one call."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.record import record
from roofline import forward_cost, get_model, load_hardware, step_time


def main() -> None:
    spec, hw = get_model("llama-3.1-8b"), load_hardware("h100-sxm-80gb")
    B = np.arange(1, 101)[:, None, None]
    n = np.arange(1, 101)[None, :, None]
    L = np.linspace(0, 16384, 100).astype(int)[None, None, :]
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        st = step_time(forward_cost(spec, B, n, L, weight_dtype="bf16"), hw)
        times.append(time.perf_counter() - t0)
    points = st.t_step_s.size
    med, best = float(np.median(times)), min(times)
    body = (
        f"{points:,} configurations of llama-3.1-8b on h100-sxm-80gb (batch 1..100 x new tokens 1..100 x "
        f"100 contexts 0..16384), per-operator cost and roofline time in one vectorised call.\n\n"
        f"| runs | median s | best s | configurations/s (median) |\n|---|---|---|---|\n"
        f"| {len(times)} | {med:.3f} | {best:.3f} | {points / med:,.0f} |\n"
    )
    record("roofline sweep (10^6 points)", body, "python -m benchmarks.bench_roofline_sweep")


if __name__ == "__main__":
    main()
