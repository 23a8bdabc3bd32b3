"""Microbenchmarks: achieved memory bandwidth, matmul FLOP/s per dtype, dispatch overhead, overlap.

Each figure is the median over repetitions (spread reported beside it), taken
with ``measure.timing``. ``measure_profile`` turns them into a hardware profile
TOML with a ``[measured]`` block that ``roofline.load_hardware`` loads.
"""

from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from measure.device import describe, match_profile
from measure.models import TORCH_DTYPES, copies_fit, prepared_linear
from measure.timing import Timing, cpu_threads, time_fn
from roofline.core.errors import SpecroofError
from roofline.costing.engine import HARNESS_ENGINE
from roofline.costing.hardware import Hardware, Measured, load_hardware, write_profile


@dataclass(frozen=True)
class Measurement:
    """One achieved figure: ``value`` in SI units (bytes/s, FLOP/s or seconds) and its timing."""

    name: str
    value: float
    unit: str
    timing: Timing
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def spread(self) -> float:
        """Relative IQR of the underlying times."""
        return self.timing.iqr_s / self.timing.median_s if self.timing.median_s else 0.0


def _default_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return 2 << 30
    llc = describe(device).get("llc_bytes") or 64 << 20
    return int(min(max(4 * llc, 512 << 20), 2 << 30))  # well beyond the last-level cache


def bandwidth(
    device: str | torch.device = "cpu",
    nbytes: int | None = None,
    repeats: int = 10,
    threads: int | None = None,
) -> dict[str, Measurement]:
    """Achieved bandwidth of a copy (read + write counted) and of a read-only reduction, bytes/s."""
    dev = torch.device(device)
    n = int(nbytes or _default_bytes(dev)) // 4
    src = torch.ones(n, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    copy = time_fn(lambda: dst.copy_(src), warmup=2, repeats=repeats, device=dev, threads=threads)
    read = time_fn(lambda: src.sum(), warmup=2, repeats=repeats, device=dev, threads=threads)
    size = n * 4
    return {
        "copy": Measurement("copy bandwidth", 2 * size / copy.median_s, "B/s", copy, {"bytes": size}),
        "read": Measurement("read bandwidth", size / read.median_s, "B/s", read, {"bytes": size}),
    }


def matmul_flops(
    dtype: str,
    device: str | torch.device = "cpu",
    shapes: Sequence[tuple[int, int, int]] | None = None,
    repeats: int = 5,
    threads: int | None = None,
    cap_s: float = 1.5,
) -> Measurement:
    """Best achieved FLOP/s of ``x @ W.T`` for ``dtype`` over verify-pass shapes (M tokens, K, N).

    The default shapes are those of a verify pass near its knee (a few hundred
    tokens against a d x d or d x 4d weight), not the large squares that flatter a
    GEMM library: the ceiling the roofline needs is the one those passes can reach.
    Shapes run smallest first; a shape whose predicted time (at the best rate so far)
    would exceed ``cap_s`` seconds over its warm-up and repetitions is skipped, so a
    device that runs ``dtype`` slowly (bf16 on a CPU without bf16 units: ~10 GFLOP/s)
    is measured in seconds, not minutes.
    """
    if dtype not in TORCH_DTYPES:
        raise SpecroofError(f"matmul benchmark supports {', '.join(TORCH_DTYPES)} (got {dtype!r})")
    dev = torch.device(device)
    if shapes is None:
        d = 4096 if dev.type == "cuda" else 2048
        ms = (256, 512, 1024, 2048) if dev.type == "cuda" else (64, 128, 256)
        shapes = [(m, d, n) for m in ms for n in (d, 4 * d)]
    best: Measurement | None = None
    for m_, k_, n_ in sorted(shapes, key=lambda s: s[0] * s[1] * s[2]):
        flop = 2.0 * m_ * k_ * n_
        if best is not None and flop / best.value * (repeats + 2) > cap_s:
            continue
        a = torch.randn(m_, k_, device=dev).to(TORCH_DTYPES[dtype])
        w = torch.randn(n_, k_, device=dev).to(TORCH_DTYPES[dtype])
        with cpu_threads(threads):
            product = _product(w, m_)
        t = time_fn(lambda a=a, f=product: f(a), warmup=2, repeats=repeats, device=dev, threads=threads)
        meas = Measurement(f"{dtype} matmul", flop / t.median_s, "FLOP/s", t, {"shape": (m_, k_, n_)})
        if best is None or meas.value > best.value:
            best = meas
    assert best is not None
    return best


def overlap(
    dtype: str = "bf16",
    device: str | torch.device = "cpu",
    repeats: int = 3,
    threads: int | None = None,
    nbytes: int | None = None,
    flop_per_s: float | None = None,
) -> Measurement:
    """How much of a GEMM's weight streaming hides under its arithmetic at the ridge, in [0, 1].

    One weight matrix well beyond the last-level cache is multiplied by 1 row (t1:
    the streaming time) and by P and 2P rows, where arithmetic dominates (their
    difference gives c, the arithmetic per row). At the ridge M* = t1 / c the roofline
    says t(M*) = t1 (full overlap) and a machine whose cores both stream and compute
    takes t1 + c M* (none); overlap = (t1 + c M* - t(M*)) / min(t1, c M*), clipped.
    ``flop_per_s`` (the matmul rate, if measured) sizes P at about 8 M*, so a device
    whose arithmetic is slow is not asked for hundreds of slow rows.
    """
    if dtype not in TORCH_DTYPES:
        raise SpecroofError(f"overlap benchmark supports {', '.join(TORCH_DTYPES)} (got {dtype!r})")
    dev = torch.device(device)
    td = TORCH_DTYPES[dtype]
    size = int(nbytes or (_default_bytes(dev) if dev.type != "cuda" else 1 << 30))
    k = 8192
    n = max(1024, size // (k * torch.finfo(td).bits // 8))
    # filled, not drawn: drawing 10^8 normals takes seconds, and the values do not change the timing
    w = torch.full((n, k), 0.01, dtype=td, device=dev)

    def t_of(m: int) -> Timing:
        x = torch.randn(m, k, device=dev).to(td)
        with cpu_threads(threads):
            product = _product(w, m)
        return time_fn(lambda: product(x), warmup=2, repeats=repeats, device=dev, threads=threads)

    t1 = t_of(1).median_s
    big = 256 if dev.type != "cuda" else 4096
    if flop_per_s:  # P ~ 8 ridge rows: arithmetic dominates, and the call stays short
        ridge_rows = t1 / (2.0 * w.numel() / flop_per_s)
        big = int(min(big, max(8, 8 * ridge_rows)))
    c = (t_of(2 * big).median_s - t_of(big).median_s) / big
    m_star = max(2, round(t1 / c))
    at = t_of(m_star)
    value = (t1 + c * m_star - at.median_s) / min(t1, c * m_star)
    return Measurement(
        f"{dtype} memory/compute overlap",
        float(min(1.0, max(0.0, value))),
        "",
        at,
        {"ridge_rows": m_star, "t1_s": t1, "row_s": c, "weight_bytes": w.numel() * w.element_size()},
    )


def _product(w: torch.Tensor, rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ w.T`` through the kernel the harness's model runs for ``rows``-row products of this shape here
    (:func:`measure.models.prepared_linear`): the ceilings measured are the ones its passes can reach. A copy of
    ``w`` (a kernel that reads a transposed or packed one) only where it takes at most a quarter of the memory
    available."""
    return prepared_linear(w, rows, copies=copies_fit(w.numel() * w.element_size(), w.device))


def dispatch_overhead(device: str | torch.device = "cpu", repeats: int = 200) -> Measurement:
    """Time of one tiny op (an add on 1 element): the per-kernel launch and framework cost, seconds."""
    dev = torch.device(device)
    x = torch.ones(1, device=dev)
    t = time_fn(lambda: x.add(1.0), warmup=20, repeats=repeats, device=dev)
    return Measurement("dispatch overhead", t.median_s, "s", t)


def run_all(
    device: str | torch.device = "cpu",
    dtypes: Sequence[str] = ("fp32", "bf16"),
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    nbytes: int | None = None,
) -> dict[str, Measurement]:
    """Every microbenchmark on ``device``: bandwidth, matmul per dtype, dispatch overhead, overlap.

    ``nbytes`` sizes the streaming benchmarks (default: 4x the last-level cache, at
    least 512 MiB on a CPU); a smaller size beyond the cache is quicker and still
    measures DRAM.
    """
    out: dict[str, Measurement] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("bandwidth", lambda: bandwidth(device, nbytes=nbytes, threads=threads))
    ]
    steps += [(f"matmul {d}", lambda d=d: matmul_flops(d, device, threads=threads)) for d in dtypes]
    steps.append(("dispatch", lambda: dispatch_overhead(device)))
    last = dtypes[-1]  # the narrowest dtype asked for: the one verify passes run in

    def _overlap() -> dict[str, Measurement]:
        rate = out[f"matmul_{last}"].value if f"matmul_{last}" in out else None
        return {"overlap": overlap(last, device, threads=threads, nbytes=nbytes, flop_per_s=rate)}

    steps.append(("overlap", _overlap))
    for name, fn in steps:
        if progress:
            progress(name)
        res = fn()
        if isinstance(res, dict):
            out.update(res)
        else:
            out[name.replace(" ", "_")] = res
    return out


def measured_hardware(
    results: dict[str, Measurement],
    device: str | torch.device = "cpu",
    base: Hardware | None = None,
    stream_bytes_per_s: float | None = None,
) -> Hardware:
    """A hardware profile: the datasheet blocks of ``base`` (if any) plus a ``[measured]`` block of ``results``.

    ``stream_bytes_per_s``: the weight-streaming rate measured elsewhere (the device probe's), where ``results``
    has no overlap benchmark to read it from."""
    info = describe(device)
    copy_bw = results["copy"].value
    # The memory ceiling of a verify pass is the rate a matrix product streams its weights (one row
    # against a matrix beyond the cache), which can sit well below a plain copy's (a CPU: ~0.75x);
    # the copy and read figures stay in the block as provenance.
    stream_bw = copy_bw
    if "overlap" in results:
        ov = results["overlap"].detail
        stream_bw = ov["weight_bytes"] / ov["t1_s"]
    elif stream_bytes_per_s is not None:
        stream_bw = stream_bytes_per_s
    compute = {k.split("_")[1]: m.value for k, m in results.items() if k.startswith("matmul_")}
    if base is None:  # no datasheet: the achieved figures stand in for the ceilings, and say so
        base = Hardware(
            id="measured",
            name=str(info["name"]),
            vendor=str(info.get("vendor", "")),
            kind=str(info["kind"]),
            bandwidth_bytes_per_s=stream_bw,
            peak_flop_per_s=compute,
            memory_bytes=info.get("memory_bytes"),
            sources={
                "memory": "no datasheet for this device: the achieved weight-streaming bandwidth (specroof measure bench)",
                "compute": "no datasheet for this device: the achieved matmul rate (specroof measure bench)",
            },
        )
    measured = Measured(
        bandwidth_bytes_per_s=stream_bw,
        peak_flop_per_s=compute,
        pass_overhead_s=results["dispatch"].value,
        overlap=results["overlap"].value if "overlap" in results else None,
        provenance={
            "copy_bandwidth_GB_per_s": copy_bw / 1e9,
            "read_bandwidth_GB_per_s": results["read"].value / 1e9,
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "method": "specroof measure bench: bandwidth = a one-row product streaming a matrix beyond the LLC "
            "through the harness's kernel for it (copy/read also given); best matmul over verify shapes per dtype, "
            "same kernels; 1-element add for dispatch; memory/compute overlap at the ridge; medians",
            "device": str(info["name"]),
            # the measured figures include the software that ran them: this profile is (this device, this engine)
            "engine": HARNESS_ENGINE + f", torch {torch.__version__}",
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
        },
    )
    return base.replace(name=f"{base.name} (measured)", measured=measured)


def measure_profile(
    out: str | Path,
    device: str | torch.device = "cpu",
    dtypes: Sequence[str] = ("fp32", "bf16"),
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    nbytes: int | None = None,
) -> Hardware:
    """Run the microbenchmarks, write a profile TOML to ``out`` and load it back (validated)."""
    path = Path(out)
    if path.is_dir():
        raise SpecroofError(f"{str(path)!r} is a folder: give a .toml file name for the profile")
    path.parent.mkdir(parents=True, exist_ok=True)
    results = run_all(device, dtypes, threads, progress, nbytes)
    match = match_profile(describe(device))
    base = load_hardware(match) if match else None
    write_profile(measured_hardware(results, device, base), path)
    return load_hardware(str(path))


#: ATen operators that make a view (or return their input): no kernel of their own (see :func:`_kernel_count`)
_VIEW_OPS = frozenset(
    "view _unsafe_view reshape _reshape_alias slice select transpose t unsqueeze squeeze expand expand_as permute "
    "as_strided alias detach chunk split split_with_sizes narrow unbind view_as flatten unflatten contiguous "
    "lift_fresh movedim numpy_T".split()
)


def _kernel_count(fn: Callable[[], Any], device: torch.device) -> int:
    """The kernels one call of ``fn`` launches, counted by ``torch.profiler``: on CUDA the device's kernels, memory
    copies and memsets; on the CPU the top-level ATen operators (each one pass over its tensors, what a CPU runs
    for a kernel). Taken on the second call, so first-use work (a cuBLAS handle, a plan) is not counted."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode():
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        with profile(activities=acts) as prof:
            fn()
            if cuda:
                torch.cuda.synchronize(device)
    events = prof.events()
    if cuda:
        kinds = {"cuda", "privateuse1"}
        return sum(1 for e in events if str(e.device_type).split(".")[-1].lower() in kinds)

    # an aten:: op no other op called counts once (a composite op's own calls run inside its one pass); a view
    # writes nothing, and a view-like composite (reshape, contiguous) counts the copies it makes
    def count(e: Any) -> int:
        if e.name.removeprefix("aten::") in _VIEW_OPS:
            return sum(count(c) for c in e.cpu_children)
        return 1

    return sum(count(e) for e in events if e.cpu_parent is None and e.name.startswith("aten::"))


def pass_kernels(
    model: Any,
    batch: int,
    new_tokens: int,
    context: int,
    *,
    tree: Any = None,
) -> dict[str, Any]:
    """Kernels a verify pass of ``new_tokens`` tokens per sequence over ``context`` cached tokens launches, per layer
    and outside the layers (embedding, final norm, head), for the static path (what a CUDA graph captures and
    replays: :meth:`measure.models.Transformer.forward_static`) and the eager one.

    Counted as the difference of a pass through two layers and through one (the model's ``n_layers`` early exit),
    so the layer's count is exact whatever the model's depth: the 8B shape can be counted on a two-layer copy."""
    from measure.models import context_bucket

    if model.spec.n_layers < 2:
        raise SpecroofError("counting kernels per layer needs a model of at least two layers")
    dev = model.device
    held = model.runner
    model.runner = None
    try:
        model.setup_cache(batch, context + new_tokens)
        assert model.cache is not None
        model.cache.rollback([context] * batch)
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, model.spec.vocab_size, (batch, new_tokens), generator=gen).to(dev)
        lengths = torch.full((batch,), context, dtype=torch.long, device=dev)
        bucket = context_bucket(context + new_tokens, model.cache.max_seq)
        among = offsets = None
        if tree is not None:
            among = torch.as_tensor(tree.ancestors_matrix(), device=dev)
            offsets = torch.as_tensor(tree.depths - 1, device=dev)
        out: dict[str, Any] = {"batch": batch, "new_tokens": new_tokens, "context": context, "kv_slots": bucket}
        for path in ("static", "eager"):
            counts = []
            for layers in (1, 2):
                if path == "static":

                    def fn(layers: int = layers) -> Any:
                        return model.forward_static(tokens, lengths, bucket, among, offsets, layers)

                else:

                    def fn(layers: int = layers) -> Any:
                        return model.forward(tokens, tree, n_layers=layers)

                counts.append(_kernel_count(fn, dev))
            out[f"{path}_per_layer"] = counts[1] - counts[0]
            out[f"{path}_outside_layers"] = 2 * counts[0] - counts[1]
        return out
    finally:
        model.runner = held


def launch_overhead(
    model: Any,
    points: Sequence[tuple[int, int, int]],
    *,
    repeats: int = 20,
    warmup: int = 3,
    capture: bool | None = None,
) -> Any:
    """What CUDA graphs remove, measured on the same kernels: each (batch, new tokens, context) point run through one
    static runner's pass uncaptured (every kernel launched from Python, one by one) and through the same pass
    captured as a graph and replayed, interleaved. Both run :meth:`measure.models.Transformer.forward_static` over
    the same context bucket, masks and KV scatter, so their difference is the launches alone (timing the model's
    eager path instead compared different kernels: unmasked attention over the exact key length against the graph's
    masked attention over a bucket). One row per point: ``t_uncaptured_s``, ``t_graph_s`` (medians; CUDA events on a
    GPU), ``launch_overhead_s`` (their difference, per pass), ``kernels`` (the pass's kernels, :func:`_kernel_count`)
    and ``kv_slots`` (the bucket both read). ``capture`` (default: on CUDA) off times the uncaptured call twice, what
    the CPU can check of the plumbing. The model's runner and cache are restored (the cache emptied)."""
    import numpy as np
    import pandas as pd

    from measure.graphs import GraphRunner
    from measure.models import block_step, context_bucket

    capture = model.device.type == "cuda" if capture is None else capture
    held, block = model.runner, model.block_fn
    legs = {"uncaptured": GraphRunner(model, capture=False), "graph": GraphRunner(model, capture=capture)}
    rows = []
    try:
        B = max(b for b, _, _ in points)
        seq = max(c + n for _, n, c in points)
        model.runner = None
        model.block_fn = block_step
        model.cache = None
        model.setup_cache(B, seq)
        gen = torch.Generator().manual_seed(0)
        for b, n, c in points:
            tokens = torch.randint(0, model.spec.vocab_size, (b, n), generator=gen).to(model.device)
            assert model.cache is not None
            model.cache.rollback([c] * model.cache.max_batch)

            def run(leg: str, tokens: torch.Tensor = tokens) -> None:
                model.runner = legs[leg]
                with torch.inference_mode():
                    model(tokens)

            for leg in legs:
                run(leg)  # the graph captured here, outside the timing; the uncaptured call's first use too
            kernels = _kernel_count(lambda: run("uncaptured"), model.device)
            t = {leg: np.inf for leg in legs}
            for _ in range(2):  # interleaved: a slow moment falls on both
                for leg in legs:
                    timing = time_fn(lambda leg=leg: run(leg), warmup=warmup, repeats=repeats, device=model.device)
                    t[leg] = min(t[leg], timing.median_s)
            rows.append({"batch": b, "new_tokens": n, "context": c,
                         "kv_slots": context_bucket(c + n, model.cache.max_seq), "kernels": kernels,
                         "t_uncaptured_s": t["uncaptured"], "t_graph_s": t["graph"],
                         "launch_overhead_s": t["uncaptured"] - t["graph"]})  # fmt: skip
    finally:
        for r in legs.values():
            r.reset()
        if held is not None:
            held.reset()  # its graphs read the cache this replaced
        model.runner, model.block_fn = held, block
        model.cache = None
    return pd.DataFrame(rows)
