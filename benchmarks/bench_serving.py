"""Serving simulator speed: 100,000 requests per (policy, rate) point on this CPU, and a sweep in processes.

Llama-3.1-8B on an H100 SXM with a Llama-3.2-1B draft (alpha 0.75) under the ``serving``
engine, prompts uniform in 128-1024 tokens and outputs in 16-256, Poisson arrivals at a light
(4 req/s), a near-saturation (24 req/s) and an overloaded (64 req/s) rate, without speculation
and with 3 drafts per step. Wall and CPU seconds per point in one process; the same point over
``--workers`` processes (a light-load run is cut where its server stood empty and its pieces run
in parallel: roofline.serving.split); then the six points as one sweep over ``--workers``
processes. Writes the section "serving simulator" of BENCHMARKS.md.

    .venv/bin/python -m benchmarks.bench_serving [--requests 100000] [--workers 2] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.record import record
from roofline.serving import simulate

SETUP = dict(
    hardware="h100-sxm-80gb",
    target="llama-3.1-8b",
    drafter="model:llama-3.2-1b",
    acceptance=0.75,
    engine="serving",
    input_len="uniform:128-1024",
    output_len="uniform:16-256",
)
RATES = (4.0, 24.0, 64.0)
POLICIES = ("off", "static:3")


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-record", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    load_before = load_average()
    rows = []
    for rate in RATES:
        for policy in POLICIES:
            w0, c0 = time.perf_counter(), time.process_time()
            res = simulate(policy=[policy], rates=[rate], requests=args.requests, **SETUP)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            s = res.summary.iloc[0]
            # the same point over the workers: cut at the server's empty moments when the pilot finds enough
            w0 = time.perf_counter()
            cut = simulate(policy=[policy], rates=[rate], requests=args.requests, workers=args.workers, **SETUP)
            cut_wall = time.perf_counter() - w0
            chunks = cut.settings["chunks"][f"{policy}@{rate:g}"]
            c = cut.summary.iloc[0]
            rows.append((rate, policy, wall, cpu, s, cut_wall, chunks, c))
            print(
                f"{rate:>5g} req/s {policy:<9} wall {wall:6.2f} s  cpu {cpu:6.2f} s  batch {s['mean_batch']:.1f}  "
                f"over {args.workers} workers {cut_wall:6.2f} s ({chunks} chunk(s))",
                flush=True,
            )
    w0 = time.perf_counter()
    simulate(policy=list(POLICIES), rates=list(RATES), requests=args.requests, workers=args.workers, **SETUP)
    sweep_wall = time.perf_counter() - w0
    print(f"sweep of {len(RATES) * len(POLICIES)} points over {args.workers} processes: {sweep_wall:.1f} s wall")

    lines = [
        f"{args.requests:,} requests per point: Llama-3.1-8B on an H100 SXM, Llama-3.2-1B draft at alpha 0.75, "
        "engine `serving`, prompts uniform 128-1024 tokens, outputs 16-256, Poisson arrivals. "
        f"Load average (1/5/15 min) before: {load_before}; after: {load_average()} "
        "(other processes shared the two cores: CPU seconds are the steadier figure).",
        "",
        "| rate (req/s) | policy | wall s | CPU s | mean batch | TPOT p50 ms | TTFT p50 ms | output tok/s | "
        f"wall s, {args.workers} workers | chunks | TPOT p50 ms, cut | TTFT p50 ms, cut |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate, policy, wall, cpu, s, cut_wall, chunks, c in rows:
        lines.append(
            f"| {rate:g} | {policy} | {wall:.2f} | {cpu:.2f} | {s['mean_batch']:.1f} | {s['tpot_p50_s'] * 1e3:.2f} | "
            f"{s['ttft_p50_s'] * 1e3:.1f} | {s['throughput_tok_s']:.0f} | {cut_wall:.2f} | {chunks} | "
            f"{c['tpot_p50_s'] * 1e3:.2f} | {c['ttft_p50_s'] * 1e3:.1f} |"
        )
    lines += [
        "",
        f"Wall, CPU s, mean batch and the latencies: each point in one process (`workers=1`). Over {args.workers} "
        "workers a point whose pilot (its first 1,000 requests) found the server empty before at least 1% of "
        "arrivals is cut into chunks of 10,000 requests simulated in parallel and spliced where the server stood "
        "empty (docs/cost-model.md, section 26): the same distribution, other random numbers, so the speculative "
        "figures of the cut run differ a little; a point not cut runs whole in one of the processes.",
        "",
        f"The six points as one sweep (`workers={args.workers}`): {sweep_wall:.1f} s wall.",
    ]
    print("\n".join(lines))
    if not args.no_record:
        record(
            "serving simulator",
            "\n".join(lines),
            f".venv/bin/python -m benchmarks.bench_serving --requests {args.requests} --workers {args.workers}",
        )


if __name__ == "__main__":
    main()
