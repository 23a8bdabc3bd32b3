"""Why batched speculative passes were slow on a GPU: a diagnostic, run once on a lent GPU.

Forward times of the offline target and draft at batch 1 and 4, one and three new
tokens, equal and ragged lengths, under each SDPA backend (the key length changes on
every call, as in decoding); then three speculative runs in a row per batch size (the
first pays every first use of a shape) and a profile of one.

    python -m benchmarks.diag_batched_gpu [--graphs]

On an H200 (torch 2.11) it showed the cuDNN attention backend planning per shape: the
first speculative run took 2.1 s and the next 71 ms (BENCHMARKS.md, "measure spec on a GPU").

``--graphs`` (a GPU) then runs the same speculative runs with every pass captured as a CUDA
graph (measure.graphs), prints each round's device and host milliseconds (CUDA events, and
the round's wall time less them), and the launch overhead the graphs remove per pass of the
target and of the draft at batch 1 and 4, one and three new tokens.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from measure.decode import speculative_generate
from measure.models import Transformer
from measure.pair import load_pair

BACKENDS = [
    None,
    SDPBackend.MATH,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
]
RAGGED = np.array([100, 97, 103, 90])


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def t_forward(model: Transformer, B: int, n: int, ragged: bool, backend: SDPBackend | None, reps: int = 20) -> float:
    """Median milliseconds of one forward of ``n`` new tokens for ``B`` sequences, key length changing every call."""
    dev = model.device
    model.setup_cache(4, 512)
    base = RAGGED[:B] if ragged else np.full(B, 100)
    tok = torch.zeros(B, n, dtype=torch.long, device=dev)
    out = []
    with torch.no_grad(), sdpa_kernel([backend]) if backend is not None else nullcontext():
        for i in range(reps + 3):
            model.cache.rollback(base + (i % 7))
            sync(dev)
            t0 = time.perf_counter()
            model(tok)
            sync(dev)
            out.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(out[3:]))


def backend_table(models: dict[str, Transformer]) -> None:
    for name, m in models.items():
        for B, n, ragged in ((1, 1, False), (1, 3, False), (4, 1, False), (4, 1, True), (4, 3, False), (4, 3, True)):
            cells = []
            for be in BACKENDS:
                try:
                    cells.append(f"{t_forward(m, B, n, ragged, be):8.3f}")
                except RuntimeError:  # a backend that refuses the shape
                    cells.append(f"{'x':>8}")
            print(f"{name} B={B} n={n} ragged={ragged}: default/math/eff/flash/cudnn ms:", " ".join(cells), flush=True)


def speculative_runs(target: Transformer, draft: Transformer) -> None:
    dev = target.device
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    rng = np.random.default_rng(0)
    for B in (1, 4):
        prompts = [rng.integers(0, target.spec.vocab_size, size=n).tolist() for n in (40, 37, 45, 30)[:B]]
        for i in range(3):
            t0 = time.perf_counter()
            r = speculative_generate(target, draft, prompts, 2, 24)
            wall = time.perf_counter() - t0
            cols = [c for c in ("t_draft_s", "t_verify_s", "t_accept_s", "t_commit_s", "t_host_s") if c in r.rounds]
            phases = r.rounds.groupby("round")[cols].first()
            ms = (phases.median() * 1e3).round(3).to_dict()
            print(f"spec B={B} call {i}: wall {wall * 1e3:.1f} ms, decode {r.decode_s * 1e3:.1f} ms, median ms: {ms}")
        with profile(activities=acts) as prof:
            speculative_generate(target, draft, prompts, 2, 24)
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=15, max_name_column_width=50))


def graph_runs(target: Transformer, draft: Transformer) -> None:
    """The speculative runs again with every pass a CUDA graph, and what the graphs remove per pass (the same static
    pass uncaptured and replayed: the same kernels both ways)."""
    from measure.graphs import attach, detach
    from measure.microbench import launch_overhead

    for name, m in (("target", target), ("draft", draft)):
        lo = launch_overhead(m, [(1, 1, 100), (1, 3, 100), (4, 1, 100), (4, 3, 100)])
        print(f"{name}: uncaptured minus graph per pass (ms), kernels per pass")
        cols = ["t_uncaptured_s", "t_graph_s", "launch_overhead_s"]
        print((lo.set_index(["batch", "new_tokens"])[cols] * 1e3).round(3).assign(kernels=lo["kernels"].to_numpy()))
    for m in (target, draft):
        attach(m, capture=True)
    try:
        speculative_runs(target, draft)
    finally:
        for m in (target, draft):
            detach(m)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", action="store_true", help="also the runs as CUDA graphs (a GPU)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    target, draft, _ = load_pair(device=dev, dtype="bf16", width=16 if dev.type == "cuda" else 1)
    backend_table({"target": target, "draft": draft})
    speculative_runs(target, draft)
    if args.graphs and dev.type == "cuda":
        graph_runs(target, draft)


if __name__ == "__main__":
    main()
