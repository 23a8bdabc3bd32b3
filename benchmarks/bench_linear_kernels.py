"""Every CPU kernel of the harness's projections, streaming from memory: GB/s of weight per kernel and shape.

The figures behind ``measure.models.run_linear``'s kernels and the probe that picks among them.
For each weight shape of the offline pair's target widened x4 (the 0.22 GB fp32 target
``measure spec`` runs here), enough distinct copies of the weight are made that one round reads
at least ``--stream-mb`` (well past the last-level cache), and every kernel candidate for a
``--rows``-row product reads all of them once per round. Kernels are timed in interleaved
rounds, in rotating order; a rate is weight bytes over a round's time, median over rounds (best
in brackets), with a copy-bandwidth sample per round beside them. Then what the probe
(``measure.models.fastest_linear``, streaming as the model does) chooses for the shape.

    python -m benchmarks.bench_linear_kernels [--dtypes fp32,bf16] [--threads 1,2] [--rows 1,2] [--rounds 9] [--no-record]

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from benchmarks.bench_step_vs_peers import copy_sampler, interleaved
from benchmarks.record import record
from measure import models
from measure.pair import PairConfig, widened_spec


def shapes(width: int) -> list[tuple[int, int]]:
    """The distinct (out, in) shapes of the widened target's projections."""
    spec = widened_spec(PairConfig().target_spec(), width)
    model = models.Transformer(spec, dtype="fp32", device="meta", init_std=None)  # shapes only: no memory
    seen: list[tuple[int, int]] = []
    for mod in model.modules():
        if isinstance(mod, models.Linear) and (mod.out_features, mod.in_features) not in seen:
            seen.append((mod.out_features, mod.in_features))
    return seen


def kernel_rates(
    n: int, k: int, rows: int, stream_bytes: int, rounds: int, dtype: torch.dtype = torch.float32
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """GB/s of weight per round for every kernel candidate, and the copy bandwidth (GB/s) sampled in each round."""
    el = torch.finfo(dtype).bits // 8
    copies = max(1, -(-stream_bytes // (n * k * el)))
    weights = [(torch.randn(n, k) * 0.01).to(dtype) for _ in range(copies)]
    transposes = [w.t().contiguous() for w in weights]
    try:  # the copies the packed kernel reads (made once, as a model's layer makes its own)
        packed = [models.pack_weight(w) for w in weights]
    except RuntimeError:
        packed = [None] * copies
    x = torch.full((1, rows, k), 0.01, dtype=dtype)
    calls = {}
    for kind in models.kernel_candidates(n, rows):
        try:
            models.run_linear(kind, x, weights[0], None, transposes[0], packed[0])
        except RuntimeError:  # no such kernel for this dtype on this CPU
            continue
        calls[kind] = lambda kind=kind: [
            models.run_linear(kind, x, w, None, t, p) for w, t, p in zip(weights, transposes, packed, strict=True)
        ]
    times, copy = interleaved(calls, rounds, copy_sampler())
    nbytes = copies * n * k * el
    return {kd: nbytes / v / 1e9 for kd, v in times.items()}, copy / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,2")
    ap.add_argument("--width", type=int, default=4, help="the offline target widened this many times")
    ap.add_argument("--stream-mb", type=float, default=200.0, help="MB of weights each round reads")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--dtypes", default="fp32", help="weight dtypes, e.g. fp32,bf16")
    ap.add_argument("--no-record", action="store_true", help="print only; leave BENCHMARKS.md alone")
    a = ap.parse_args()
    load0, t0 = os.getloadavg(), time.perf_counter()
    stream = int(a.stream_mb * 1e6)
    lines = [
        "| dtype | threads | rows | weight (out x in) | copy GB/s | kernel: GB/s of weight, median (best) | the probe's choice |",
        "|---|---:|---:|---|---:|---|---|",
    ]
    for name in a.dtypes.split(","):
        dtype = models.TORCH_DTYPES[name]
        for threads in (int(x) for x in a.threads.split(",")):
            torch.set_num_threads(threads)
            for rows in (int(x) for x in a.rows.split(",")):
                for n, k in shapes(a.width):
                    rates, copy = kernel_rates(n, k, rows, stream, a.rounds, dtype)
                    w = (torch.randn(n, k) * 0.01).to(dtype)
                    choice = models.fastest_linear(w, None, rows, stream_bytes=stream)
                    cells = ", ".join(
                        f"{kd} {np.median(v):.1f} ({v.max():.1f})"
                        for kd, v in sorted(rates.items(), key=lambda kv: -np.median(kv[1]))
                    )
                    line = f"| {name} | {threads} | {rows} | {n} x {k} | {np.median(copy):.1f} | {cells} | {choice} |"
                    print(line, flush=True)
                    lines.append(line)
    load1 = os.getloadavg()
    head = (
        f"Load average {' / '.join(f'{x:.2f}' for x in load0)} (1/5/15 min) at the start, "
        f"{' / '.join(f'{x:.2f}' for x in load1)} at the end; {time.perf_counter() - t0:.0f} s; torch "
        f"{torch.__version__}. Weights ({a.dtypes}) of the offline target widened x{a.width}; each round reads "
        f"{a.stream_mb:.0f} MB of distinct copies of the weight per kernel, {a.rounds} interleaved rounds; kernels "
        "fastest first. The probe streams min(the model's weights, 64 MB) per timing, as `Transformer.choose_kernels` "
        "runs it for a model past the last-level cache."
    )
    body = head + "\n\n" + "\n".join(lines)
    print(body)
    if not a.no_record:
        record(
            "CPU projection kernels, streaming from memory",
            body,
            f"python -m benchmarks.bench_linear_kernels --dtypes {a.dtypes} --threads {a.threads} --rows {a.rows} "
            f"--rounds {a.rounds}",
        )


if __name__ == "__main__":
    main()
