"""How steady is this machine? A weight stream and an in-cache matrix product, alternated for a minute.

A speculative round mixes the two kinds of work: one-token passes stream weights from memory, verify
passes of many rows spend more of their time on arithmetic. On a shared machine the two rates can move
independently (another tenant's memory traffic slows the first, its arithmetic on a sibling hyperthread
the second), so a memory-bound baseline probe cannot vouch for a compute-heavier pass timed beside it.
This benchmark times both, one after the other, and reports each one's spread pass to pass and over
one-second windows, and how far they move together. It is what `measure spec` rows marked noisy
("repetitions disagreed") come from, measured on its own.

    python -m benchmarks.bench_machine_noise [--seconds 60] [--no-record]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from benchmarks.record import record
from measure.timing import time_fn

#: fp32 weights streamed per memory sample: well beyond any last-level cache
STREAM_BYTES = 2**29
#: an in-cache product (256 x 512 @ 512 x 512, 0.5 MiB of operands) repeated to about the stream's duration
MATMUL = (256, 512, 512)


def _stream(weights: list[torch.Tensor], x: torch.Tensor) -> None:
    for w in weights:
        torch.mv(w, x)


def sample(seconds: float) -> dict[str, np.ndarray]:
    """Alternate one weight stream and one burst of in-cache products until ``seconds`` have passed."""
    rows = 4096
    cols = STREAM_BYTES // 4 // rows // 16
    weights = [torch.randn(rows, cols) for _ in range(16)]
    x = torch.randn(cols)
    a, b = torch.randn(MATMUL[0], MATMUL[1]), torch.randn(MATMUL[1], MATMUL[2])
    one = time_fn(lambda: _stream(weights, x), warmup=3, repeats=3).median_s
    burst = max(1, int(one / max(time_fn(lambda: a @ b, warmup=3, repeats=20).median_s, 1e-9)))

    def compute() -> None:
        for _ in range(burst):
            a @ b

    mem: list[float] = []
    comp: list[float] = []
    at: list[float] = []
    elapsed = 0.0
    while elapsed < seconds:
        m = time_fn(lambda: _stream(weights, x), warmup=0, repeats=1).samples_s[0]
        c = time_fn(compute, warmup=0, repeats=1).samples_s[0]
        at.append(elapsed)
        elapsed += m + c
        mem.append(m)
        comp.append(c)
    return {
        "t_s": np.array(at),
        "stream_GB_per_s": STREAM_BYTES / np.array(mem) / 1e9,
        "matmul_GFLOP_per_s": 2 * np.prod(MATMUL) * burst / np.array(comp) / 1e9,
    }


def summarise(s: dict[str, np.ndarray], window_s: float = 1.0) -> dict[str, dict[str, float]]:
    """Per rate: its median, its 10th-90th percentile range pass to pass and over windows (relative), and the
    correlation of the two rates' window medians."""
    win = (s["t_s"] // window_s).astype(int)
    keys = np.unique(win)
    out: dict[str, dict[str, float]] = {}
    meds = {}
    for name in ("stream_GB_per_s", "matmul_GFLOP_per_s"):
        v = s[name]
        w = np.array([np.median(v[win == k]) for k in keys])
        meds[name] = w
        p10, p50, p90 = np.percentile(v, [10, 50, 90])
        out[name] = {
            "median": float(p50),
            "pass_p10_p90": float((p90 - p10) / p50),
            "window_min_max": float((w.max() - w.min()) / np.median(w)),
            "window_p10_p90": float(np.subtract(*np.percentile(w, [90, 10])) / np.median(w)),
        }
    both = np.corrcoef(meds["stream_GB_per_s"], meds["matmul_GFLOP_per_s"])[0, 1] if len(keys) > 2 else np.nan
    out["together"] = {"window_correlation": float(both), "windows": float(len(keys)), "samples": float(len(win))}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--no-record", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = p.parse_args()
    load0 = os.getloadavg()
    s = summarise(sample(args.seconds))
    load1 = os.getloadavg()
    rows = [
        "| rate | median | pass to pass, p10-p90 | 1 s windows, p10-p90 | 1 s windows, min-max |",
        "|---|---|---|---|---|",
    ]
    for name, unit in (("stream_GB_per_s", "GB/s"), ("matmul_GFLOP_per_s", "GFLOP/s")):
        r = s[name]
        rows.append(
            f"| {'weight stream (torch.mv, 512 MiB fp32)' if unit == 'GB/s' else 'in-cache matmul (fp32)'} | "
            f"{r['median']:.1f} {unit} | {r['pass_p10_p90']:.0%} | {r['window_p10_p90']:.0%} | {r['window_min_max']:.0%} |"
        )
    t = s["together"]
    body = (
        f"{torch.get_num_threads()} threads, {args.seconds:.0f} s, {t['samples']:.0f} alternations in "
        f"{t['windows']:.0f} one-second windows; load average {load0[0]:.2f} at the start and {load1[0]:.2f} at "
        "the end (this benchmark's own threads included). Ranges are relative to the median.\n\n"
        + "\n".join(rows)
        + f"\n\nCorrelation of the two rates' window medians: {t['window_correlation']:.2f}. Where the matmul's "
        "windows range wider than the stream's, a memory-bound baseline probe cannot see what moves a "
        "compute-heavier verify pass; `measure spec` therefore also marks a row noisy when its repetitions' own "
        "speedups disagree by more than its error (`rep_spread`)."
    )
    print(body)
    if not args.no_record:
        record("machine noise", body, "python -m benchmarks.bench_machine_noise")


if __name__ == "__main__":
    main()
