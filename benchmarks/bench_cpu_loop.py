"""The predict -> measure -> fit -> validate loop on this machine's CPU, with a memory-bound model.

Writes the figures into BENCHMARKS.md and the overlay plot to docs/cpu_verify_sweep.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.record import record
from measure.fit import sweep_fit_validate
from roofline.model import ModelSpec
from roofline.plot import fit_overlay

ROOT = Path(__file__).resolve().parents[1]
#: 16 layers, d 1536, GQA 12/4 heads, SwiGLU 6144: 0.65e9 weights, 1.3 GB in bf16 (4x the 300 MiB LLC)
SPEC = ModelSpec("cpu-650m", 16, 1536, 12, 4, 128, 6144, 32000, max_context=4096)


def main() -> None:
    res = sweep_fit_validate(SPEC, out=ROOT / "benchmarks" / "out" / "cpu_loop", progress=True)
    s = res.summary
    fig = fit_overlay(res.validation)
    fig.savefig(ROOT / "docs" / "cpu_verify_sweep.png", dpi=110)
    rows = []
    for k in s["crossover"]:
        rel = (k["crossover_fitted"] - k["crossover_measured"]) / k["crossover_measured"]
        rows.append(
            f"| {k['batch']} | {k['context']} | {k['crossover_measured']:.0f} | {k['crossover_fitted']} | {rel:+.0%} | {k['crossover_apriori']} |"
        )
    p = s["fit_params"]
    ap = res.apriori
    body = (
        f"Model {SPEC.name}: {SPEC.total_params / 1e9:.2f}e9 weights, bf16 ({SPEC.total_params * 2 / 1e9:.1f} GB). "
        f"Grid: batch 1, 4 x new tokens 1..64 (10 values) x context 256, 2048; {s['points']} points, median of 5 "
        f"passes each.\n\n"
        f"A-priori ceilings (microbenchmarks, same run): copy bandwidth {ap.bandwidth() / 1e9:.1f} GB/s, bf16 matmul "
        f"{ap.peak('bf16') / 1e12:.3f} TFLOP/s, dispatch {ap.pass_overhead_s * 1e6:.1f} us.  \n"
        f"Fitted: bandwidth {p['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, bf16 {p['flop_per_s_bf16'] / 1e12:.3f} TFLOP/s, "
        f"half-saturation {p['matmul_half_tokens']:.1f} tokens, pass overhead {p['pass_overhead_s'] * 1e3:.2f} ms, "
        f"per-layer overhead {p['layer_overhead_s'] * 1e6:.0f} us.\n\n"
        f"| verify-latency MAPE | a-priori | fitted |\n|---|---|---|\n| all points | {s['apriori_mape']:.1%} | {s['fit_mape']:.1%} |\n\n"
        "Crossover K (new tokens per sequence that stay memory bound):\n\n"
        "| batch | context | measured knee | fitted K | fitted vs measured | a-priori K |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n![CPU verify sweep](docs/cpu_verify_sweep.png)\n"
    )
    record("CPU verify sweep, fit and validation", body, "python -m benchmarks.bench_cpu_loop")
    (ROOT / "benchmarks" / "out" / "cpu_loop" / "summary.json").write_text(json.dumps(s, indent=2, default=float))
    print(json.dumps({k: v for k, v in s.items() if k != "fit_params"}, indent=1, default=float), np.nan)


if __name__ == "__main__":
    main()
