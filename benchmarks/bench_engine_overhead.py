"""What the engine adds to a decode step: PyTorch eager against the same step replayed as a CUDA graph.

The step is a Llama-style decoder layer stack written with static shapes (gpt-fast's
way: preallocated KV cache, fixed context), so the same Python code runs eagerly
(one kernel launch per operator, each from the host) and captured once as a CUDA
graph (one launch per step). For each width and depth we time both; then

    t_eager(L) - t_graph(L) = host_pass + L x host_layer

is fitted by least squares over the depths: ``host_layer`` is the launch and
dispatch cost of one layer under eager PyTorch, ``host_pass`` the per-pass part
(embedding, head, sampling of the argmax). A wide model (Llama-2-7B's shape) shows
how much of the eager cost hides under the GPU's own work when passes are large.

    python -m benchmarks.bench_engine_overhead [--device cuda] [--json OUT.json] [--record]

On a CPU the graph half is skipped (CUDA graphs need a GPU): only eager is timed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    """Decoder shape: width, layers, heads, MLP width, vocabulary."""

    name: str
    d: int
    layers: int
    heads: int
    ff: int
    vocab: int = 32000


def build_step(shape: Shape, context: int, device: torch.device, dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    """One decode step of batch 1 at a fixed context, every tensor preallocated (graph-capturable)."""
    g = torch.Generator(device=device).manual_seed(0)

    def w(*size: int) -> torch.Tensor:  # drawn on the device: 7B random weights drawn on a host take a minute
        return torch.randn(*size, generator=g, device=device, dtype=dtype) * 0.02

    hd = shape.d // shape.heads
    layers = [
        dict(
            n1=torch.ones(shape.d, device=device, dtype=dtype),
            qkv=w(3 * shape.d, shape.d),
            o=w(shape.d, shape.d),
            n2=torch.ones(shape.d, device=device, dtype=dtype),
            gu=w(2 * shape.ff, shape.d),
            down=w(shape.d, shape.ff),
            k=w(1, shape.heads, context, hd),
            v=w(1, shape.heads, context, hd),
        )
        for _ in range(shape.layers)
    ]
    embed = w(shape.vocab, shape.d)
    head = w(shape.vocab, shape.d)
    norm = torch.ones(shape.d, device=device, dtype=dtype)
    token = torch.zeros(1, 1, dtype=torch.long, device=device)
    slot = context - 1  # the new token's key and value overwrite the last slot: same work every step

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * weight

    def step() -> torch.Tensor:
        h = F.embedding(token, embed)  # (1, 1, d)
        for lw in layers:
            q, k, v = F.linear(rms(h, lw["n1"]), lw["qkv"]).view(1, 1, 3, shape.heads, hd).unbind(2)
            lw["k"][:, :, slot] = k.transpose(1, 2)[:, :, 0]
            lw["v"][:, :, slot] = v.transpose(1, 2)[:, :, 0]
            a = F.scaled_dot_product_attention(q.transpose(1, 2), lw["k"], lw["v"])
            h = h + F.linear(a.transpose(1, 2).reshape(1, 1, shape.d), lw["o"])
            gate, up = F.linear(rms(h, lw["n2"]), lw["gu"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, lw["down"])
        logits = F.linear(rms(h, norm), head)
        token.copy_(logits.argmax(-1))
        return token

    return step


def time_step(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 5) -> float:
    """Median wall seconds of one call, the device synchronised after each (what a decode loop sees)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def as_graph(step: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """Capture ``step`` once as a CUDA graph; the returned callable replays it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm up on a side stream, as capture requires
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def weight_bytes(shape: Shape, bytes_per: int) -> int:
    """Bytes of the layer and head weights a step streams (the embedding row is negligible)."""
    per_layer = 4 * shape.d * shape.d + 3 * shape.d * shape.ff
    return (shape.layers * per_layer + shape.vocab * shape.d) * bytes_per


def run(device: torch.device, context: int, repeats: int) -> dict[str, object]:
    dtype = torch.bfloat16
    narrow = [Shape(f"llama-68m-like x{n}", 768, n, 12, 3072) for n in (2, 8, 16, 32)]
    wide = [Shape("llama-2-7b-like", 4096, 32, 32, 11008)] if device.type == "cuda" else []
    rows = []
    with torch.no_grad():
        for shape in narrow + wide:
            step = build_step(shape, context, device, dtype)
            eager = time_step(step, device, repeats)
            graph = time_step(as_graph(step), device, repeats) if device.type == "cuda" else float("nan")
            rows.append(
                dict(
                    shape=shape.name,
                    layers=shape.layers,
                    d=shape.d,
                    weight_GB=weight_bytes(shape, 2) / 1e9,
                    eager_us=eager * 1e6,
                    graph_us=graph * 1e6,
                    eager_GB_per_s=weight_bytes(shape, 2) / eager / 1e9,
                    graph_GB_per_s=weight_bytes(shape, 2) / graph / 1e9,
                )
            )
            print(
                f"{shape.name:>22}: eager {eager * 1e6:8.1f} us   graph {graph * 1e6:8.1f} us"
                f"   ({weight_bytes(shape, 2) / 1e9:.3f} GB of weights)",
                flush=True,
            )
            del step
            if device.type == "cuda":
                torch.cuda.empty_cache()
    n = np.array([r["layers"] for r in rows[: len(narrow)]], dtype=float)
    fits: dict[str, float] = {}
    for key in ("eager_us", "graph_us"):
        y = np.array([r[key] for r in rows[: len(narrow)]], dtype=float)
        if np.all(np.isfinite(y)):
            slope, intercept = np.polyfit(n, y, 1)
            fits[f"{key[:-3]}_per_layer_us"], fits[f"{key[:-3]}_per_pass_us"] = float(slope), float(intercept)
    if "graph_per_layer_us" in fits:
        fits["host_per_layer_us"] = fits["eager_per_layer_us"] - fits["graph_per_layer_us"]
        fits["host_per_pass_us"] = fits["eager_per_pass_us"] - fits["graph_per_pass_us"]
    return {"device": str(device), "context": context, "rows": rows, "fit": fits}


def record_from(path: str) -> None:
    """BENCHMARKS.md section from a --json file (the run happened on a lent GPU; this machine only writes it)."""
    from benchmarks.record import record

    res = json.load(open(path))
    lines = [
        f"| {r['shape']} | {r['layers']} | {r['weight_GB']:.3f} | {r['eager_us']:.1f} | {r['graph_us']:.1f} "
        f"| {r['eager_GB_per_s']:.0f} | {r['graph_GB_per_s']:.0f} |"
        for r in res["rows"]
    ]
    fit = res["fit"]
    body = "\n".join(
        [
            f"Batch-1 decode step at context {res['context']}, bf16, random weights; median wall time, synchronised.",
            "",
            "| shape | layers | weights GB | eager us | CUDA graph us | eager GB/s | graph GB/s |",
            "|---|---|---|---|---|---|---|",
            *lines,
            "",
            "Least-squares lines over the narrow (d=768) depths: " + ", ".join(f"{k} {v:.2f}" for k, v in fit.items()),
        ]
    )
    record(
        "bench_engine_overhead",
        body,
        "python -m benchmarks.bench_engine_overhead --json engine.json (on the GPU), then --record-from engine.json",
        machine_line=f"{res['device_name']}, torch {res['torch']}",
        date=res.get("date"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument(
        "--record-from", metavar="JSON", help="write the figures of an earlier --json run into BENCHMARKS.md"
    )
    a = ap.parse_args()
    if a.record_from:
        record_from(a.record_from)
        return
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"engine overhead on {name}, torch {torch.__version__}, context {a.context}", flush=True)
    res = run(dev, a.context, a.repeats)
    res["device_name"], res["torch"] = name, torch.__version__
    res["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(res["fit"], indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
