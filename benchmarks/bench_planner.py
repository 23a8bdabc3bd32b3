"""How many (alpha, gamma, batch, context) configurations per second the roofline speedup evaluates."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.record import record
from roofline.speculation.speculative import DraftModel, EarlyExit, speedup


def main() -> None:
    alpha = np.linspace(0.3, 0.98, 100)[:, None, None, None]
    gamma = np.arange(0, 17)[None, :, None, None]
    batch = np.unique(np.round(np.logspace(0, 8, 25, base=2))).astype(int)[None, None, :, None]
    context = np.linspace(128, 8192, 25).astype(int)[None, None, None, :]
    rows = []
    for drafter in (DraftModel("llama-3.2-1b"), EarlyExit(8)):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = speedup(
                "h100-sxm-80gb", "llama-3.1-8b", drafter, alpha, gamma, batch=batch, context=context, dtype="bf16"
            )
            times.append(time.perf_counter() - t0)
        n = np.broadcast_shapes(alpha.shape, gamma.shape, batch.shape, context.shape)
        count = int(np.prod(n))
        assert r.speedup.size == count
        med = float(np.median(times))
        rows.append(f"| {drafter.name} | {count:,} | {med:.3f} | {count / med:,.0f} |")
    body = (
        "llama-3.1-8b target on h100-sxm-80gb; alpha (100) x gamma 0..16 x batch (up to 25 values) x context (25); "
        "every draft step and the (gamma+1)-token verify pass priced by the per-operator cost model; median of 5 calls.\n\n"
        "| drafter | configurations | median s | configurations/s |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    record("planner throughput", body, "python -m benchmarks.bench_planner")


if __name__ == "__main__":
    main()
