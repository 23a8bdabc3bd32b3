"""Verification-latency sweeps: time the verify pass over batch x new tokens x context x dtype.

Each point is one forward pass of ``new_tokens`` tokens per sequence over a cache
holding ``context`` tokens (a chain, or a draft tree), timed with the one timer.
Rows carry the roofline prediction for the same point, so the fit and the
validation read one tidy table. With ``out`` the rows are saved as they are
measured; ``resume`` skips saved points; an out-of-memory error becomes a row
with status ``oom``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from measure.budget import Budget, WorkBar
from measure.device import describe, device_memory, match_profile, resolve_device
from measure.fit import predict_times
from measure.models import TORCH_DTYPES, Transformer, dtype_name
from measure.store import META, RESULTS, Column, FolderLock, SweepStore, check_columns, read_results
from measure.timing import time_fn
from roofline.core.errors import SpecroofError, check_choice, check_min
from roofline.costing.hardware import Hardware, load_hardware
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.trees import Tree

KEY = ("model", "dtype", "batch", "new_tokens", "context", "tree")

#: what each column of a sweep's results.csv may hold: checked on resume and before a fit
COLUMNS: dict[str, Column] = {
    "model": Column("text"),
    "dtype": Column("text"),
    "batch": Column("count", 1, 1e7),
    "new_tokens": Column("count", 1, 1e7),
    "context": Column("count", 0, 1e9),
    "tree": Column("text"),
    "visit": Column("count", 0, 1e6),
    "status": Column("text", choices=("ok", "oom")),
    "t_median_s": Column("number", 0, 1e6, optional=True),
    "t_min_s": Column("number", 0, 1e6, optional=True),
    "t_iqr_s": Column("number", 0, 1e6, optional=True),
    "repeats": Column("count", 0, 1e9),
    "t_predicted_s": Column("number", 0, 1e9, optional=True),
}

#: columns a sweep writes on some devices only, checked where a file has them: the host's share of a pass
#: (wall minus CUDA-event time), measured on a GPU
EXTRA_COLUMNS: dict[str, Column] = {"t_host_median_s": Column("number", 0, 1e6, optional=True)}


def read_sweep_rows(path: str | Path) -> pd.DataFrame:
    """A sweep's saved rows, each checked (header, types, ranges; an ``ok`` row has its times)."""
    df = read_results(path, COLUMNS)
    extra = {k: c for k, c in EXTRA_COLUMNS.items() if k in df.columns}
    if extra:
        check_columns(df, extra, repr(str(path)))
    if not df.empty:
        ok = df["status"].astype(str) == "ok"
        lacking = ok & (df["t_min_s"].isna() | df["t_median_s"].isna() | ~(df["t_min_s"] > 0))
        if lacking.any():
            i = int(np.argmax(lacking.to_numpy()))
            raise SpecroofError(
                f"{str(path)!r} line {i + 2}: status 'ok' without a positive t_min_s and t_median_s: the file was "
                "damaged; fix or remove that line (nothing was appended to it)"
            )
    return df


class HFRunner:
    """Measure any ``transformers`` causal LM through the sweep interface (chain passes only).

    The cache is a real prefill of ``context`` tokens; after each timed pass the
    cache is cropped back, so every repetition sees the same context.
    """

    def __init__(self, model: Any) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.context = 0
        self.batch = 0

    def prepare(self, batch: int, context: int) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.batch, self.context = batch, context
        if context:
            ids = torch.randint(0, self.model.config.vocab_size, (batch, context), device=self.device)
            with torch.no_grad():
                self.model(ids, past_key_values=self.cache, use_cache=True)

    def run(self, tokens: torch.Tensor, tree: Any = None) -> None:
        if tree is not None:
            raise SpecroofError("tree-masked passes need specroof's own Transformer (measure.models)")
        with torch.no_grad():
            self.model(tokens, past_key_values=self.cache, use_cache=True)
        self.cache.crop(self.context)


class ModelRunner:
    """Sweep interface over :class:`measure.models.Transformer`: set the cache length, run, roll back.

    The KV cache is allocated when a point needs it (inside the sweep's out-of-memory
    handler), grown as larger points come, so one point that does not fit becomes an
    ``oom`` row instead of costing every point of the sweep.
    """

    def __init__(self, model: Transformer, max_batch: int, max_seq: int) -> None:
        self.model = model.eval()
        self.device = model.device
        self.max_batch, self.max_seq = max_batch, max_seq
        self.context = 0

    def prepare(self, batch: int, context: int, new_tokens: int = 0) -> None:
        cache = self.model.cache
        need_seq = min(self.max_seq, context + max(new_tokens, 1))
        if self.model.runner is not None:
            # the graphs read the cache's buffers where they are: one cache for the whole grid, not one grown as
            # larger points come (each new cache would drop every graph captured so far)
            batch, need_seq = max(batch, self.max_batch), self.max_seq
        if cache is None or cache.max_batch < batch or cache.max_seq < need_seq:
            have_b = cache.max_batch if cache is not None else 0
            have_s = cache.max_seq if cache is not None else 0
            self.model.cache = None  # free the old one first: the new one may need its memory
            self.model.setup_cache(max(batch, have_b), max(need_seq, have_s))
            cache = self.model.cache
        assert cache is not None
        # latency does not depend on the cached values: only the lengths are set
        self.context = context
        cache.rollback([context] * cache.max_batch)

    def run(self, tokens: torch.Tensor, tree: Any = None) -> None:
        with torch.inference_mode():  # as measure.decode runs it (no autograd bookkeeping per op)
            self.model(tokens, tree)
        # nothing was committed: the lengths stay at ``context``


def _is_oom(exc: BaseException) -> bool:
    """CUDA's and the CPU allocator's out-of-memory errors (torch raises the latter as a plain RuntimeError)."""
    text = str(exc).lower()
    return isinstance(exc, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))) or (
        isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
    )


#: bumped when a change to the harness would make old timings incomparable with new ones
HARNESS_VERSION = "sweep-v2"

#: a point stops being revisited once a visit improves its minimum by less than this (relative), unless
#: the reference point has since got faster by more than this
CONVERGED = 0.02


def _fingerprint(
    spec: ModelSpec | None, name: str, dtypes: Sequence[str], dev: torch.device, passes: str = "eager"
) -> str:
    """What a saved row was measured on: the model's shape, dtypes, device, how passes ran (eager, CUDA graphs,
    compiled) and harness version."""
    shape = (
        "x".join(
            str(v) for v in (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_ff, spec.vocab_size)
        )
        if spec is not None
        else "external"
    )
    how = "" if passes == "eager" else f"{passes}:"  # (an eager sweep's fingerprint is as it always was)
    return f"{name}:{shape}:{','.join(dtypes)}:{dev.type}:{how}{HARNESS_VERSION}"


def sweep(
    spec_or_model: ModelSpec | str | Transformer | Any,
    batch: Sequence[int] = (1,),
    new_tokens: Sequence[int] = (1,),
    context: Sequence[int] = (0,),
    dtype: Sequence[str] = ("bf16",),
    *,
    tree: Any = None,
    device: str | torch.device | None = None,
    hardware: Hardware | str | None = None,
    repeats: int = 5,
    warmup: int = 2,
    rounds: int = 1,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    budget: Budget | float | None = None,
    threads: int | None = None,
    progress: bool = True,
    seed: int = 0,
    graphs: str = "auto",
    compile: bool = False,
    launch_points: int = 6,
    essential: int = 1,
    keep_s: float = 0.0,
    refuse_short: bool = False,
) -> pd.DataFrame:
    """Time the verify pass at every (dtype, batch, new_tokens, context); one tidy row per point.

    ``spec_or_model``: a ModelSpec or preset (random weights are built per dtype),
    a :class:`Transformer`, or a ``transformers`` causal LM (its own dtype is used).
    ``tree`` (a Tree) replaces the chain: ``new_tokens`` is then ignored.
    ``hardware`` prices each point with the roofline for the ``t_predicted_s`` column
    (default: the matched datasheet profile, if any).

    ``rounds`` > 1 visits the grid up to that many times in a shuffled order, timing
    ``repeats`` passes per visit, and pools each point's samples: on a shared, noisy
    machine a slow period then spreads over many points instead of spoiling a
    contiguous block. A point is not visited again once a visit improved its minimum
    by less than 2% (it has converged), unless the machine has since got faster: the
    cheapest point (the reference) opens every visit and is always revisited, and a
    reference minimum more than 2% below the one it had at a point's last visit
    reopens that point, so every minimum is taken from the machine's fastest period
    and not from the state it was in when its point happened to converge.
    ``budget`` (seconds, counted from the call, or a :class:`Budget`) bounds every visit, the
    first ones included, and the models' building (docs/cost-model.md, section 44): the first
    ``essential`` points in the order of need (:func:`point_order`) are visited whatever they cost
    and calibrate what a visit costs here; the others are visited only while they fit what the
    budget has left less ``keep_s`` (the caller's next steps), in the order of need. A point never
    visited is a row with status ``budget`` (not saved: a resume visits it), named in
    ``attrs["dropped"]`` with why. With ``refuse_short`` (``measure sweep``) an essential point
    whose first pass shows the rest of its visit cannot fit what is left is refused instead, in one
    line naming the budget it needs: nothing the sweep could measure fits.

    ``graphs`` (``--graphs``: auto, on, off): on a GPU each point's pass is captured as a CUDA
    graph and replayed (:mod:`measure.graphs`), timed by CUDA events; "on" without a GPU is an
    error, and the CPU runs eagerly. ``compile`` runs each layer through ``torch.compile`` first
    (its compile time is spent inside the budget). A model that already has a runner keeps it.
    With graphs off on a GPU, up to ``launch_points`` points are also timed both ways, and
    ``attrs["launch_overhead"]`` holds what the graphs remove per pass (the same static pass uncaptured minus replayed).
    ``attrs["passes"]`` says how passes ran; ``attrs["runner"]`` the captures and their seconds.

    With ``out``, every visit is a row of ``results.csv``, written and fsync'd as it
    completes; ``resume`` continues a saved sweep of the same model, dtype and device
    (a different one is an error), and a folder that holds results is never cleared
    unless ``overwrite`` is given. Everything is validated before anything is written.
    """
    dev = resolve_device(device)
    B = [int(b) for b in check_min("batch", list(batch), 1, integer=True)]
    N = [int(n) for n in check_min("new_tokens", list(new_tokens), 1, integer=True)]
    L = [int(c) for c in check_min("context", list(context), 0, integer=True)]
    if not B or not N or not L:
        raise SpecroofError("batch, new_tokens and context each need at least one value")
    if tree is not None:
        N = [int(tree.n_nodes)]
    repeats = int(check_min("repeats", repeats, 1, integer=True))
    rounds = int(check_min("rounds", rounds, 1, integer=True))
    warmup = int(check_min("warmup", warmup, 0, integer=True))
    if resume and overwrite:
        raise SpecroofError("give --resume or --overwrite, not both")
    if resume and out is None:
        raise SpecroofError("resume needs an output folder (--out) to resume from")
    from measure.graphs import inductor_missing, use_graphs

    on = use_graphs(graphs, dev)
    if compile:
        missing = inductor_missing(dev)
        if missing:
            raise SpecroofError(missing)
    hf = not isinstance(spec_or_model, (ModelSpec, str, Transformer))
    if hf and (graphs == "on" or compile):
        raise SpecroofError(
            "--graphs on and --compile need specroof's own model (--model, --spec, or --hf with a checkpoint folder): "
            "a transformers model object runs eagerly"
        )
    if hf:
        dtypes = [str(next(spec_or_model.parameters()).dtype).replace("torch.", "")]
    elif isinstance(spec_or_model, Transformer):
        dtypes = [dtype_name(spec_or_model.dtype)]
    else:
        dtypes = [check_choice("dtype", d, tuple(TORCH_DTYPES)) for d in dtype]
    spec0 = _spec_of(spec_or_model)
    if spec0 is not None and max(L) + max(N) > spec0.max_context:
        room_ctx, room_new = spec0.max_context - max(N), spec0.max_context - max(L)
        fix = (
            f"use contexts up to {room_ctx}"
            if room_ctx >= 0
            else f"use at most {room_new} new tokens"
            if room_new >= 1
            else f"new tokens and context together must stay within {spec0.max_context}"
        )
        raise SpecroofError(
            f"context {max(L)} + {max(N)} new tokens exceeds {spec0.name}'s max context {spec0.max_context}: {fix}"
        )
    hw = load_hardware(hardware) if hardware is not None else None
    if hw is None:
        match = match_profile(describe(dev))
        hw = load_hardware(match) if match else None
    bud = budget if isinstance(budget, Budget) else Budget(budget)
    name0 = spec0.name if spec0 is not None else type(spec_or_model).__name__
    held = spec_or_model.runner if isinstance(spec_or_model, Transformer) else None
    passes = held.mode if held is not None else "eager" if hf or not (on or compile) else _mode_name(on, compile)
    if spec0 is not None and spec0.is_moe and passes != "eager":
        if graphs == "on" or compile:
            raise SpecroofError(
                f"{spec0.name}: the harness's MoE layer routes on the host, so its passes cannot be captured or "
                "compiled: use --graphs off"
            )
        passes, on = "eager", False
    fingerprint = _fingerprint(spec0, name0, dtypes, dev, passes)
    _check_fits(spec0, dtypes, B, N, L, dev)
    if dev.type == "cuda" and passes.startswith("graphs") and held is None and spec0 is not None:
        _check_capture_fits(spec0, dtypes, B, N, L, dev)
    store = SweepStore(out, (*KEY, "visit"), COLUMNS) if out is not None else None
    lock = FolderLock(out) if out is not None else None
    if lock is not None:
        lock.acquire()
    try:
        if store is not None:
            _check_store(store, fingerprint, resume, overwrite)
            if overwrite:
                store.clear()
            store.write_meta(
                {
                    "device": describe(dev),
                    "hardware_profile": hw.id if hw else None,
                    "kind": "verify sweep",
                    "fingerprint": fingerprint,
                }
            )
        saved = read_sweep_rows(store.path) if (store is not None and resume) else pd.DataFrame()
        how = (on, compile) if held is None and passes != "eager" else None
        df, models = _sweep_points(
            spec_or_model,
            dtypes,
            B,
            N,
            L,
            tree,
            dev,
            hw,
            repeats,
            warmup,
            rounds,
            store,
            saved,
            bud,
            threads,
            progress,
            seed,
            how,
            essential=essential,
            keep_s=keep_s,
            refuse_short=refuse_short,
        )
    finally:
        if lock is not None:
            lock.release()
    from measure.graphs import detach, runner_stats
    from measure.microbench import launch_overhead

    df.attrs["passes"] = passes
    df.attrs["runner"] = runner_stats(models)
    if dev.type == "cuda" and passes == "eager" and not hf and launch_points > 0 and tree is None:
        # what the graphs would remove: a few points timed both ways (eager minus graph, per pass)
        pts = launch_overhead_points(B, N, L, launch_points)
        frames = []
        for m in models:
            if m.spec.is_moe:
                continue
            dt = dtype_name(m.dtype)
            mine = _launch_within(df, dt, pts, bud.remaining_s - keep_s - CLOSING_S if bud.limited else math.inf)
            if len(mine) < len(pts):
                left_out = [p for p in pts if p not in mine]
                df.attrs.setdefault("dropped", {})[f"{dt} launch overhead at {len(left_out)} of {len(pts)} points"] = (
                    "not timed both ways: the budget had no room for them"
                )
            if mine:
                frames.append(launch_overhead(m, mine).assign(dtype=dt))
        df.attrs["launch_overhead"] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if how is not None and not isinstance(spec_or_model, Transformer):
        for m in models:
            detach(m)  # (the sweep built them: nothing else holds their graphs)
    return df


def _mode_name(graphs: bool, compile: bool) -> str:
    """How passes run: "graphs", "graphs+compile", "static+compile" (uncaptured, compiled) or "eager"."""
    if not graphs and not compile:
        return "eager"
    return ("graphs" if graphs else "static") + ("+compile" if compile else "")


#: passes :func:`measure.microbench.launch_overhead` runs per point: two interleaved rounds of 3 warm-up and 20 timed
#: passes, uncaptured and replayed, after one first use of each and the profiled pass that counts its kernels (2 more)
LAUNCH_PASSES = 2 * 2 * (3 + 20) + 4


def _launch_within(
    df: pd.DataFrame, dtype: str, points: Sequence[tuple[int, int, int]], seconds: float
) -> list[tuple[int, int, int]]:
    """The launch-overhead points (in their order) whose passes, at the sweep's median eager time of each, fit
    ``seconds`` with PLAN_MARGIN; a point the sweep did not measure is left out."""
    if df.empty or "t_median_s" not in df:
        return []
    ok = df[(df["status"] == "ok") & (df["dtype"].astype(str) == dtype)]
    t = {(int(r.batch), int(r.new_tokens), int(r.context)): float(r.t_median_s) for r in ok.itertuples()}
    kept, total = [], 0.0
    for p in points:
        if p not in t:
            continue
        c = PLAN_MARGIN * LAUNCH_PASSES * t[p]
        if total + c <= seconds:
            kept.append(p)
            total += c
    return kept


def launch_overhead_points(
    batch: Sequence[int], new_tokens: Sequence[int], context: Sequence[int], most: int = 6
) -> list[tuple[int, int, int]]:
    """The few (batch, new tokens, context) points a sweep with graphs off on a GPU also times as graphs: the
    smallest and largest batch, at one token, the widest width up to 16 and the widest swept, the first context."""
    ns = sorted(set(new_tokens))
    widths = sorted({ns[0], max([n for n in ns if n <= 16] or ns[:1]), ns[-1]})
    pts = [(b, n, int(context[0])) for b in sorted({min(batch), max(batch)}) for n in widths]
    return pts[:most]


def _check_capture_fits(
    spec: ModelSpec, dtypes: Sequence[str], B: list[int], N: list[int], L: list[int], dev: torch.device
) -> None:
    """Refuse, before the weights are allocated, a sweep whose largest batch does not fit the device's free memory
    with its graphs (measure.graphs.check_batch_fits names the largest batch that does)."""
    from measure.graphs import check_batch_fits

    _, free = device_memory(dev)
    if free is None:
        return
    for dt in dtypes:
        el = torch.empty((), dtype=TORCH_DTYPES[dt]).element_size()
        f = footprint_bytes(spec, dt, 1, max(N), max(L))
        # every captured pass keeps its logits in the graphs' pool, for each batch swept, per sequence of the largest
        outputs = sum(N) * spec.vocab_size * el * sum(B) / max(B)
        check_batch_fits(
            max(B),
            free,
            f["kv"],
            f["activations"] + outputs,
            weight_bytes=f["weights"],
            what=f"{spec.name}'s verify sweep in {dt} with CUDA graphs",
        )


def footprint_bytes(spec: ModelSpec, dtype: str, batch: Any, new_tokens: Any, context: Any) -> dict[str, Any]:
    """Bytes a verify pass of ``spec`` holds at (batch, new_tokens, context): weights, KV cache, activations.

    An estimate from the shapes (broadcasts over arrays): the static cache of
    ``batch`` x (context + new_tokens) slots, the residual stream, the MLP's
    intermediate, the logits and the attention scores and mask of one layer at a time.
    """
    el = torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()
    b, n, c = (np.asarray(x, dtype=float) for x in (batch, new_tokens, context))
    seq = c + np.maximum(n, 1)
    weights = float(spec.total_params) * el
    kv = b * seq * spec.kv_elements_per_token * el
    ff = max(spec.d_ff, spec.d_ff_expert * max(1, spec.experts_per_token) + spec.d_ff_shared * spec.n_shared_experts)
    act = b * n * (4 * spec.d_model + 3 * ff + spec.vocab_size) * el
    attn = b * n * seq * (spec.n_heads * el + 1)  # scores of one layer, and the boolean mask
    return {"weights": weights, "kv": kv, "activations": act + attn, "total": weights + kv + act + attn}


def _check_fits(
    spec: ModelSpec | None, dtypes: Sequence[str], B: list[int], N: list[int], L: list[int], dev: torch.device
) -> None:
    """Refuse, before anything is allocated, a grid whose largest point cannot fit the device's memory.

    The kernel kills a process that overcommits the CPU's memory instead of raising an
    out-of-memory error, so the check must come first, with the footprint in the message.
    """
    if spec is None or spec.is_abstract:
        return
    total, _ = device_memory(dev)
    if total is None:
        return
    for dt in dtypes:
        if dt not in TORCH_DTYPES:
            continue
        f = footprint_bytes(spec, dt, max(B), max(N), max(L))
        if f["total"] <= total:
            continue
        per_seq = (f["kv"] + f["activations"]) / max(B)
        fits = int(max(0.0, total - f["weights"]) // per_seq) if per_seq > 0 else 0
        hint = (
            f"the largest batch that fits is {fits}" if fits >= 1 else "no batch fits: use a smaller model or context"
        )
        raise SpecroofError(
            f"batch {max(B)} x (context {max(L)} + {max(N)} new tokens) of {spec.name} in {dt} needs about "
            f"{f['total'] / 1e9:.3g} GB (weights {f['weights'] / 1e9:.3g}, KV cache {f['kv'] / 1e9:.3g}, "
            f"activations {f['activations'] / 1e9:.3g}), more than this device's {total / 1e9:.3g} GB: {hint}"
        )


def _spec_of(obj: Any) -> ModelSpec | None:
    if isinstance(obj, Transformer):
        return obj.spec
    if isinstance(obj, (ModelSpec, str)):
        return get_model(obj)
    try:
        return ModelSpec.from_hf_config(obj.config.to_dict())
    except Exception:  # an architecture the cost model does not know: measure anyway, no prediction
        return None


def _check_store(store: SweepStore, fingerprint: str, resume: bool, overwrite: bool) -> None:
    """Refuse to mix runs: existing results need --resume (same fingerprint) or --overwrite."""
    meta_path = store.dir / META
    if store.has_results() and not resume and not overwrite:
        raise SpecroofError(
            f"{str(store.dir)!r} already holds results: --resume to continue them, --overwrite to replace them, "
            "or choose another --out"
        )
    if not (resume and store.has_results()):
        return
    # rows are appended only to a store whose fingerprint says they were measured as this run measures
    if not meta_path.exists():
        raise SpecroofError(
            f"cannot resume: {str(store.dir)!r} holds results but no {META}, so what they measured cannot be "
            "verified; --overwrite to start again, or choose another --out"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SpecroofError(f"{str(meta_path)!r} is damaged (not JSON): cannot tell what was measured") from None
    old = meta.get("fingerprint") if isinstance(meta, dict) else None
    if old is None:
        raise SpecroofError(
            f"cannot resume: {str(meta_path)!r} records no fingerprint, so what the results measured cannot be "
            "verified; --overwrite to start again, or choose another --out"
        )
    if old != fingerprint:
        raise SpecroofError(f"cannot resume: {str(store.dir)!r} holds {old}, this run measures {fingerprint}")


#: the planning margin on a visit's predicted seconds: on a shared machine a pass's time moves by tens of percent
#: (docs/cost-model.md, sections 38 and 40)
PLAN_MARGIN = 1.25
#: seconds a limited sweep keeps at its budget's end: pooling the visits, the summary and the table (0.1-0.4 s on
#: the project's 2-core CPU beside a busy core), and the interpreter's exit
CLOSING_S = 1.0
#: the status of a point a limited budget never visited (a row of the returned table, never of results.csv)
BUDGET_STATUS = "budget"
#: a visit given up after a warm-up pass: the rest of it would not fit (never a row)
ABANDONED = "abandoned"


def axis_levels(values: Sequence[Any]) -> dict[Any, int]:
    """Each value's level in a coarse-to-fine order over its sorted axis: both ends 0, the middle 1, the middles of
    the two halves 2, and so on (``1, 2, 4, 8, 16, 32, 64``: 1 and 64, then 8, then 2 and 16, then 4 and 32)."""
    vals = sorted(set(values))
    level = {vals[0]: 0, vals[-1]: 0}
    spans, depth = [(0, len(vals) - 1)], 1
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                level.setdefault(vals[mid], depth)
                nxt += [(lo, mid), (mid, hi)]
        spans, depth = nxt, depth + 1
    return level


def point_order(rows: Sequence[dict[str, Any]], cost: Sequence[float] | None = None) -> list[int]:
    """A sweep's points, most needed first: what a short budget keeps (docs/cost-model.md, section 44).

    The reference (:func:`reference_point`: it calibrates what the others cost), then coarse to fine over every
    axis at once (:func:`axis_levels`: a point at the ends of batch, new tokens and context before one in the
    middle of any), the cheaper first within a level (``cost``, the predicted seconds: default the tokens).
    A fit reads the curve's two regimes off the ends of the new-token axis; the middle places the knee.
    """
    if not rows:
        return []
    ref = reference_point(rows)
    lv = {k: axis_levels([r[k] for r in rows]) for k in ("batch", "new_tokens", "context")}
    price = list(cost) if cost is not None else [float(r["batch"] * r["new_tokens"]) for r in rows]

    def need(i: int) -> tuple[int, int, float]:
        levels = [lv[k][rows[i][k]] for k in lv]
        return max(levels), sum(levels), price[i]

    return [ref, *sorted((i for i in range(len(rows)) if i != ref), key=need)]


class VisitCosts:
    """What a visit of a sweep point costs here, learned from the visits measured so far (section 44).

    A pass of a point the roofline prices at ``t`` takes ``a + s * t``, ``(a, s)`` fitted (relative least squares,
    both >= 0) to every visit's median pass so far (one visit: ``s`` alone): the host's time per pass, and how far
    the machine runs from the price. A visit runs its warm-up and repeated passes, and a first visit also a one-off:
    the mean of the first visits' wall time beyond their passes so far (the cache grown, a shape captured or
    compiled); a later visit, likewise the later ones'.
    """

    def __init__(self, warmup: int, repeats: int) -> None:
        self.warmup, self.repeats = warmup, repeats
        self.points: list[tuple[float, float]] = []  # (price, measured median pass)
        self.extra: dict[bool, list[float]] = {True: [], False: []}
        self.a, self.s = 0.0, 1.0

    def record(self, price: float, pass_s: float, passes: int, wall_s: float, first: bool) -> None:
        """A visit done: its price per pass, its median pass, the passes it ran and its wall time."""
        if np.isfinite(pass_s) and pass_s > 0 and np.isfinite(price) and price > 0:
            self.points.append((price, pass_s))
            self._refit()
            self.extra[first].append(max(0.0, wall_s - passes * pass_s))
        else:  # (an oom row: no pass timed; its wall time is the visit's one-off)
            self.extra[first].append(max(0.0, wall_s))

    def _refit(self) -> None:
        p, t = (np.array(v, dtype=float) for v in zip(*self.points, strict=True))
        if len(p) < 2 or np.ptp(p) <= 0:
            self.a, self.s = 0.0, float(np.sum(t) / np.sum(p))
            return
        from scipy.optimize import nnls

        (a, s), _ = nnls(np.column_stack([1.0 / t, p / t]), np.ones_like(t))
        if s <= 0:  # every pass the host's: the prices still order the points
            a, s = 0.0, float(np.sum(t) / np.sum(p))
        self.a, self.s = float(a), float(s)

    def pass_s(self, price: float) -> float:
        return self.a + self.s * price

    def visit_s(self, price: float, first: bool) -> float:
        extra = self.extra[first] or self.extra[True]
        one_off = float(np.mean(extra)) if extra else 0.0
        return (self.warmup + self.repeats if first else 1 + self.repeats) * self.pass_s(price) + one_off


def plan_prices(
    spec: ModelSpec | None, rows: list[dict[str, Any]], hw: Hardware | None, dev: torch.device, tree: Any
) -> np.ndarray:
    """Each point's price for planning: the roofline's on ``hw``, else on a shipped profile of the device's kind
    (what :class:`VisitCosts` learns rescales it), else its tokens (a model the cost model does not know)."""
    tokens = np.array([r["batch"] * r["new_tokens"] for r in rows], dtype=float) * 1e-3
    if spec is None or not rows:
        return tokens
    for profile in (hw, "epyc-9654" if dev.type == "cpu" else "h100-sxm-80gb", "h100-sxm-80gb"):
        if profile is None:
            continue
        try:
            p = predict_times(pd.DataFrame(rows), spec, profile, tree=tree)
        except SpecroofError:
            continue
        if np.isfinite(p).all() and (p > 0).all():
            return np.asarray(p, dtype=float)
    return tokens


def point_name(row: dict[str, Any]) -> str:
    """A point as the output names it: ``bf16 batch 4 x 64 new tokens at context 512``."""
    return f"{row['dtype']} batch {row['batch']} x {row['new_tokens']} new tokens at context {row['context']}"


def _sweep_points(
    spec_or_model: Any,
    dtypes: list[str],
    B: list[int],
    N: list[int],
    L: list[int],
    tree: Any,
    dev: torch.device,
    hw: Hardware | None,
    repeats: int,
    warmup: int,
    rounds: int,
    store: SweepStore | None,
    saved: pd.DataFrame,
    bud: Budget,
    threads: int | None,
    progress: bool,
    seed: int,
    how: tuple[bool, bool] | None = None,
    essential: int = 1,
    keep_s: float = 0.0,
    refuse_short: bool = False,
) -> tuple[pd.DataFrame, list[Any]]:
    """The measuring loop of :func:`sweep`: shuffled visits, per-visit rows, budget and convergence. Returns the
    pooled rows and the harness models measured (``how``: (graphs, compile) to attach to each).

    With a limited budget (docs/cost-model.md, section 44) the first ``essential`` points of the first dtype, in
    the order of need (:func:`point_order`), are visited first whatever they cost: they calibrate what a visit
    costs here (:class:`VisitCosts`). Then, before every visit, the first visits still to make are planned in that
    order against what the budget has left (less ``keep_s`` and :data:`CLOSING_S`): each is kept while it fits with
    those kept before it (a later, cheaper one still tried), a dtype's model build counted with its first point.
    A first visit is made only while it is kept, a later one only while it fits beside every kept first visit.
    Points never visited are rows with status ``budget`` (not saved), named in ``attrs["dropped"]`` with why."""
    tree_id = "chain" if tree is None else f"tree{tree.n_nodes}d{tree.depth}"
    rng = np.random.default_rng(seed)
    visits: list[dict[str, Any]] = saved.to_dict(orient="records") if not saved.empty else []
    models: list[Any] = []
    spec_all = _spec_of(spec_or_model)
    name0 = spec_all.name if spec_all is not None else type(spec_or_model).__name__
    grid = list(itertools.product(B, N, L))
    rows = {
        dt: [
            {"model": name0, "dtype": dt, "batch": b, "new_tokens": n, "context": c, "tree": tree_id}
            for b, n, c in grid
        ]
        for dt in dtypes
    }
    keys = {dt: [tuple(str(r[k]) for k in KEY) for r in rows[dt]] for dt in dtypes}
    ref = reference_point(rows[dtypes[0]])
    prices = {dt: plan_prices(spec_all, rows[dt], hw, dev, tree) for dt in dtypes}
    order = point_order(rows[dtypes[0]], list(prices[dtypes[0]]))
    # the first visits in the order of need, the dtypes interleaved: a short budget keeps a point in every dtype
    items = [(d, i) for i in order for d in range(len(dtypes))]
    history: dict[tuple[int, int], list[dict[str, Any]]] = {it: [] for it in items}
    for v in visits:
        k = tuple(str(v.get(kk)) for kk in KEY)
        for d, dt in enumerate(dtypes):
            if k in keys[dt]:
                history[(d, keys[dt].index(k))].append(v)
    costs = VisitCosts(warmup, repeats)
    built: dict[int, float] = {}  # seconds each dtype's model took to build (0: given, not built)
    must = {(0, i) for i in order[: max(1, essential)]}  # the first dtype's: they calibrate the costs
    limited = bud.limited
    wall = bud.clock

    def build_s(d: int) -> float:
        if d in built:
            return 0.0
        return max(built.values()) if built else 0.0

    def plan() -> tuple[list[tuple[int, int]], list[tuple[int, int]], float]:
        """The first visits still to make that fit what is left, in the order of need; those that do not; the
        seconds the kept ones are predicted to take (with the margin, and the builds)."""
        pending = [it for it in items if not history[it] and it not in abandoned]
        if not limited:
            return pending, [], 0.0
        left = bud.remaining_s - keep_s - CLOSING_S
        kept, dropped, total, building = [], [], 0.0, set()
        for it in pending:
            d, i = it
            c = PLAN_MARGIN * costs.visit_s(float(prices[dtypes[d]][i]), first=True)
            c += build_s(d) if d not in building else 0.0
            if it in must or total + c <= left:
                kept.append(it)
                total += c
                building.add(d)
            else:
                dropped.append(it)
        return kept, dropped, total

    def units(it: tuple[int, int], first: bool) -> float:
        """A visit's passes at its price: the bar's unit (it rescales them by the seconds they took)."""
        return ((warmup + repeats) if first else (1 + repeats)) * float(prices[dtypes[it[0]]][it[1]])

    def work(its: Sequence[tuple[int, int]]) -> float:
        return sum(units(it, True) + (rounds - 1) * units(it, False) for it in its)

    bar = WorkBar(
        work(items), f"verify sweep {name0}", progress, budget=bud if limited else None, tail_s=keep_s + CLOSING_S
    )
    planned_once = False
    dropped_said: list[tuple[int, int]] = []
    abandoned: dict[tuple[int, int], float] = {}  # points given up after a warm-up: the seconds of its pass

    def one_dtype(d: int, dt: str) -> None:
        """The visits of dtype ``dt`` (the ``d``-th): its model built, its rounds, then what an early estimate left out."""
        mine = [it for it in items if it[0] == d]
        if limited and d > 0 and not any(it[0] == d for it in plan()[0]) and not any(history[it] for it in mine):
            return  # no point of this dtype fits: its model is not built
        t0 = wall()
        runner, spec = _runner(spec_or_model, dt, dev, max(B), max(L) + max(N))
        if isinstance(runner, ModelRunner):
            if how is not None and runner.model.runner is None:
                from measure.graphs import attach

                attach(runner.model, capture=how[0], compile=how[1])
            if dev.type == "cpu" and runner.model.auto_kernels:
                runner.model.choose_kernels()  # the kernel race a first cache would run: the build's, not a visit's
            models.append(runner.model)
        built[d] = wall() - t0 if not isinstance(spec_or_model, Transformer) and not _is_hf(spec_or_model) else 0.0
        vocab = spec.vocab_size if spec is not None else spec_or_model.config.vocab_size
        gen = torch.Generator().manual_seed(seed)
        tokens = [torch.randint(0, vocab, (b, n), generator=gen).to(dev) for b, n, _ in grid]
        # every point priced in one call, by the fit's own route (NaN where there is no profile to price with)
        preds = (
            predict_times(pd.DataFrame(rows[dt]), spec, hw, tree=tree)
            if spec is not None and hw is not None
            else np.full(len(grid), np.nan)
        )
        too_big = _too_big_now(spec, dt, rows[dt], dev)
        if isinstance(runner, ModelRunner) and runner.model.runner is not None:
            # every point's pass captured before any visit (the points that would not fit are never run)
            fits = [p for j, p in enumerate(grid) if j not in too_big]
            allows = (lambda s: bud.allows(PLAN_MARGIN * s + keep_s + CLOSING_S)) if limited else None
            if fits:
                try:
                    _precapture_grid(runner, fits, tree, allows)
                except Exception as exc:  # the whole cache does not fit: each point's visit says so, as before
                    if not _is_oom(exc):
                        raise
                    runner.model.cache = None
        # fed every visit in the order measured (a saved sweep's rows are in that order)
        watch = ReferenceWatch(ref)
        for i in range(len(grid)):
            for v in history[(d, i)]:
                watch.record(i, _visit_min(v))

        def visit(i: int, r: int) -> None:
            it = (d, i)
            h = history[it]
            first = not h
            w0 = wall()
            if spec is not None and i in too_big:
                out = dict(_OOM)  # would not fit the memory now free: not attempted (the kernel kills)
            else:
                used = warmup if first else 1
                # a point is given up after a warm-up pass if the rest of its visit would not fit; an essential one
                # runs whole, unless ``refuse_short``: then it needs what is left (the caller's next steps wait for
                # it), and where even that is short nothing this sweep could measure fits: it is refused below
                essential = it in must and first
                allows = (
                    None
                    if not limited or (essential and not refuse_short)
                    else lambda s: bud.allows(PLAN_MARGIN * s + (0.0 if essential else keep_s) + CLOSING_S)
                )
                # a captured or compiled model's first pass of a shape is its capture or its compile: not judged by
                staged = isinstance(runner, ModelRunner) and runner.model.runner is not None
                out = _measure_visit(
                    runner, rows[dt][i], tokens[i], tree, dev, used, repeats, threads, allows, int(first and staged)
                )
            if out["status"] == ABANDONED and it in must and first:
                rest = PLAN_MARGIN * (warmup + repeats - int(out["passes"])) * float(out["t_probe_s"])
                raise SpecroofError(
                    f"a budget of {bud.stated:g} s is too short for this sweep here: {bud.elapsed_s:.0f} s went to "
                    f"the imports, building {name0} in {dt} (its kernels chosen, compiled or captured) and a first "
                    f"pass of {point_name(rows[dt][i])}, and that point, which the sweep needs at least, would take "
                    f"~{rest:.1f} s more; give a --budget of at least {bud.asking(bud.elapsed_s + rest + CLOSING_S + keep_s)} s"
                )
            if out["status"] == ABANDONED:
                passes = int(out["passes"])
                costs.record(float(prices[dt][i]), float(out["t_probe_s"]), passes, wall() - w0, first)
                abandoned[it] = float(out["t_probe_s"])
                return
            row = {**rows[dt][i], "visit": len(h), **out, "device": str(dev), "t_predicted_s": float(preds[i])}
            h.append(row)
            watch.record(i, _visit_min(row))
            if store is not None:
                store.append(row)
            passes = (warmup if first else 1) + repeats
            costs.record(float(prices[dt][i]), float(row.get("t_median_s", np.nan)), passes, wall() - w0, first)
            bar.update(units(it, first), f"{sum(bool(x) for x in history.values())}/{len(items)} points")

        def fits(i: int, first: bool) -> bool:
            """Whether visiting point ``i`` now keeps the first visits the budget planned."""
            nonlocal planned_once
            if not limited:
                return True
            kept, dropped, total = plan()
            if not planned_once and not any(it in must and not history[it] for it in items):
                planned_once = True  # the calibration done: the plan the run starts from
                bar.set_total(work(items) - work(dropped))
                dropped_said.extend(dropped)
            if first:
                return (d, i) in kept
            later = PLAN_MARGIN * costs.visit_s(float(prices[dt][i]), first=False)
            return bud.allows(later + total + keep_s + CLOSING_S)

        for r in range(rounds):
            perm = rng.permutation(len(grid)) if rounds > 1 else np.arange(len(grid))
            # the essential points open the first round (they calibrate the plan); the reference every visit
            head = [ref, *(i for _, i in items if (d, i) in must and i != ref)] if r == 0 else [ref]
            seq = [*head, *(i for i in (order if r == 0 and rounds == 1 else perm.tolist()) if i not in head)]
            for i in seq:
                h = history[(d, i)]
                if len(h) > r or (h and h[-1]["status"] != "ok"):
                    continue  # saved by an earlier run, or failed (an OOM does not heal)
                if i != ref and len(h) >= 2 and _converged(h) and not watch.sped_up_since(i):
                    continue
                if (d, i) in abandoned:
                    continue
                if (d, i) not in must or h:
                    if not fits(i, first=not h):
                        continue
                visit(i, r)
            if limited and bud.expired():
                break
        # first visits an early estimate left out, in the order of need, while they fit now
        for it in mine:
            if not history[it] and fits(it[1], first=True):
                visit(it[1], 0)

    try:
        for d, dt in enumerate(dtypes):
            one_dtype(d, dt)
    finally:
        bar.close()
    keyset = {k for dt in dtypes for k in keys[dt]}
    visits = [v for v in visits if tuple(str(v.get(kk)) for kk in KEY) not in keyset]
    visits += [v for it in items for v in history[it]]
    never = [it for it in items if not history[it]]
    df = pool_visits(pd.DataFrame(visits)) if visits else pd.DataFrame()
    if never:
        unvisited = [
            {**rows[dtypes[d]][i], "status": BUDGET_STATUS, "t_median_s": np.nan, "t_min_s": np.nan,
             "t_iqr_s": np.nan, "repeats": 0, "device": str(dev), "t_predicted_s": np.nan, "visits": 0}
            for d, i in never
        ]  # fmt: skip
        df = pd.concat([df, pd.DataFrame(unvisited)], ignore_index=True) if len(df) else pd.DataFrame(unvisited)
    if len(df):  # in the grid's order (the visits ran in the order of need, or shuffled)
        rank = {(dt, *k): j for j, (dt, k) in enumerate((dt, k) for dt in dtypes for k in keys[dt])}
        at = [rank.get((str(r["dtype"]), *(str(r[k]) for k in KEY)), len(rank)) for r in df.to_dict("records")]
        df = df.iloc[np.argsort(at, kind="stable")].reset_index(drop=True)
    at_start = {it for it in dropped_said}
    df.attrs["dropped"] = {
        point_name(rows[dtypes[d]][i]): (
            f"given up after a warm-up pass of {abandoned[(d, i)]:.2g} s: its visit would not fit"
            if (d, i) in abandoned
            else "dropped up front: it did not fit the budget with the points before it"
            if (d, i) in at_start
            else "the budget ran out before it"
        )
        for d, i in never
    }
    return df, models


def unvisited_words(df: pd.DataFrame) -> str:
    """The points a budget never visited (status ``budget``), in a line: ``bf16 batch 4 at context 512: 2, 8 and
    64 new tokens; ...`` (empty when there are none)."""
    if df.empty or "status" not in df:
        return ""
    never = df[df["status"] == BUDGET_STATUS]
    parts = []
    for (dt, b, c), g in never.groupby(["dtype", "batch", "context"], sort=False):
        ns = [str(int(n)) for n in sorted(g["new_tokens"])]
        listed = ns[0] if len(ns) == 1 else ", ".join(ns[:-1]) + " and " + ns[-1]
        parts.append(f"{dt} batch {int(b)} at context {int(c)}: {listed} new tokens")
    return "; ".join(parts)


def _is_hf(obj: Any) -> bool:
    """A ``transformers`` model object (measured through :class:`HFRunner`), not a preset, spec or Transformer."""
    return not isinstance(obj, (ModelSpec, str, Transformer))


#: the row of a point that does not fit the memory
_OOM: dict[str, Any] = {"status": "oom", "t_median_s": np.nan, "t_min_s": np.nan, "t_iqr_s": np.nan, "repeats": 0}


def _too_big_now(spec: ModelSpec | None, dtype: str, rows: list[dict[str, Any]], dev: torch.device) -> set[int]:
    """Indices of CPU points whose estimated footprint exceeds the memory available now: ``oom`` rows, untried.

    On a GPU an allocation that does not fit raises a clean out-of-memory error, which
    becomes an ``oom`` row anyway; on a CPU the kernel may kill the process instead.
    """
    if spec is None or spec.is_abstract or dev.type != "cpu" or not rows or dtype not in TORCH_DTYPES:
        return set()
    _, avail = device_memory(dev)
    if avail is None:
        return set()
    df = pd.DataFrame(rows)
    f = footprint_bytes(spec, dtype, df["batch"], df["new_tokens"], df["context"])
    # the weights are already allocated when points run; a margin for the allocator and the interpreter
    need = (f["kv"] + f["activations"]) * 1.25
    return {int(i) for i in np.nonzero(need > avail)[0]}


def _converged(h: list[dict[str, Any]]) -> bool:
    """A point whose last visit improved its minimum by less than ``CONVERGED``."""
    mins = [float(v["t_min_s"]) for v in h if v.get("status") == "ok"]
    if len(mins) < 2:
        return False
    return min(mins[:-1]) <= mins[-1] * (1 + CONVERGED) and min(mins) >= min(mins[:-1]) / (1 + CONVERGED)


def _visit_min(v: dict[str, Any]) -> float:
    """A visit's minimum time, NaN where it did not measure (an ``oom`` row)."""
    try:
        t = float(v.get("t_min_s", np.nan))
    except (TypeError, ValueError):
        return float("nan")
    return t if v.get("status", "ok") == "ok" else float("nan")


def reference_point(rows: Sequence[dict[str, Any]]) -> int:
    """The sweep's reference: its cheapest point (fewest tokens, then shortest context), revisited every round.

    Cheap, so revisiting it costs little; one-token and memory bound, so it follows the
    memory bandwidth, the rate that drifts most on a shared machine.
    """
    return min(
        range(len(rows)), key=lambda i: (rows[i]["batch"] * rows[i]["new_tokens"], rows[i]["context"], rows[i]["batch"])
    )


class ReferenceWatch:
    """The sweep's reference point, watched: its best minimum so far, and what that was at each point's last visit.

    :meth:`record` every visit in the order measured; :meth:`sped_up_since` then says
    whether the machine got faster since a point's last visit (the reference's best fell
    by more than ``tol`` below its best "then": at the point's last visit, or at the
    reference's first visit for a point visited before it). Constant time per visit.
    """

    def __init__(self, ref: int, tol: float = CONVERGED) -> None:
        self.ref, self.tol = ref, tol
        self.best = math.inf
        self.then: dict[int, float] = {}

    def record(self, point: int, t_min: float) -> None:
        if point == self.ref and math.isfinite(t_min) and t_min < self.best:
            if not math.isfinite(self.best):  # its first visit: "then" of the points visited before it
                self.then = {p: t_min for p in self.then}
            self.best = t_min
        self.then[point] = self.best

    def sped_up_since(self, point: int) -> bool:
        then = self.then.get(point)
        if then is None or not math.isfinite(self.best):
            return False
        return self.best < then / (1 + self.tol)


def sweep_drift(visits: pd.DataFrame) -> dict[str, float]:
    """How far the machine's speed moved over a sweep: the reference point's per-visit minima.

    ``visits`` is a sweep's per-visit rows (``results.csv``). Returns ``drift`` (the
    largest visit minimum over the smallest, less 1) and ``visits``, per dtype the
    worst; empty where the reference was visited fewer than twice.
    """
    if visits.empty or "visit" not in visits.columns:
        return {}
    ok = visits[visits.get("status", "ok") == "ok"]
    out: dict[str, float] = {}
    for _, g in ok.groupby([c for c in ("model", "dtype") if c in ok.columns], sort=False):
        pts = g.drop_duplicates([k for k in KEY if k in g.columns])
        shape = ["batch", "new_tokens", "context"]
        ref = pts.iloc[reference_point(pts.to_dict(orient="records"))][shape]
        t = g.loc[(g[shape] == ref).all(axis=1), "t_min_s"].to_numpy(dtype=float)
        if len(t) >= 2 and float(t.min()) > 0:
            d = float(t.max() / t.min() - 1)
            if d >= out.get("drift", -1.0):
                out = {"drift": d, "visits": float(len(t))}
    return out


def _measure_visit(
    runner: Any,
    row: dict[str, Any],
    tokens: torch.Tensor,
    tree: Any,
    dev: torch.device,
    warmup: int,
    repeats: int,
    threads: int | None,
    allows: Callable[[float], bool] | None = None,
    unchecked: int = 0,
) -> dict[str, Any]:
    """One visit of one point: ``repeats`` timed passes; an out-of-memory error becomes status ``oom``.

    With ``allows`` (a budget's: whether that many seconds still fit), the warm-up passes are timed one by one and
    after each the visit goes on only if ``allows(passes still to run x that pass's wall time)``; else it is given
    up (status ``abandoned``, ``t_probe_s`` the pass's time): a point priced far below what it takes costs a budget
    one pass, not its visit. The first ``unchecked`` passes are not judged by: a shape's first pass captures or
    compiles it (a one-off, not what the others will take).
    """
    try:
        if isinstance(runner, ModelRunner):
            runner.prepare(row["batch"], row["context"], row["new_tokens"])
        else:
            runner.prepare(row["batch"], row["context"])

        def run() -> None:
            runner.run(tokens, tree)

        if allows is not None:
            for k in range(warmup):
                probe = time_fn(run, warmup=0, repeats=1, device=dev, threads=threads)
                pass_s = max((*probe.samples_s, *probe.wall_samples_s))
                if k >= unchecked and not allows((warmup - k - 1 + repeats) * pass_s):
                    return {"status": ABANDONED, "t_probe_s": pass_s, "passes": k + 1}
            warmup = 0
        t = time_fn(run, warmup=warmup, repeats=repeats, device=dev, threads=threads)
    except Exception as exc:
        if not _is_oom(exc):
            raise
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            return {**_OOM, "t_host_median_s": np.nan}  # (the columns a GPU's rows have)
        return dict(_OOM)
    return {"status": "ok", **t.as_row("t")}


def pool_visits(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point from per-visit rows (``results.csv``): see :func:`pool_sweeps`."""
    if df.empty:
        return df
    if "visit" not in df.columns:
        return df
    visits = df.groupby([k for k in KEY if k in df.columns], sort=False)["visit"].transform("size")
    pooled = pool_sweeps([df.assign(visits=visits).drop(columns=["visit"])])
    return pooled


def load_sweep(folder: str | Path) -> pd.DataFrame:
    """A saved sweep folder's points, one row each (visits pooled); an error if there is none."""
    path = Path(folder) / RESULTS
    if not path.is_file():
        raise SpecroofError(f"no {RESULTS} in {str(folder)!r}: run `specroof measure sweep --out DIR` first")
    df = read_sweep_rows(path)
    if df.empty:
        raise SpecroofError(f"{str(path)!r} holds no rows yet")
    return pool_visits(df)


def pool_sweeps(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Pool sweeps of the same points measured at different times into one row per point.

    The minimum is the minimum over all of them, the median and IQR are the medians of
    the per-sweep figures, repetitions add up; a point is ``ok`` only if every sweep
    measured it.
    """
    if not frames:
        raise SpecroofError("no sweeps to pool")
    df = pd.concat(frames, ignore_index=True)
    keys = [k for k in ("model", *KEY) if k in df.columns]
    keys = list(dict.fromkeys(keys))
    agg = {
        "t_min_s": ("t_min_s", "min"),
        "t_median_s": ("t_median_s", "median"),
        "t_iqr_s": ("t_iqr_s", "median"),
        **({"t_host_median_s": ("t_host_median_s", "median")} if "t_host_median_s" in df.columns else {}),
        "repeats": ("repeats", "sum"),
        "status": ("status", lambda st: "ok" if (st == "ok").all() else next(x for x in st if x != "ok")),
    }
    rest = [c for c in df.columns if c not in keys and c not in agg]
    out = df.groupby(keys, sort=False, dropna=False).agg(**agg, **{c: (c, "first") for c in rest}).reset_index()
    return out[list(df.columns)]


def _precapture_grid(
    runner: ModelRunner, grid: Sequence[tuple[int, int, int]], tree: Any, allows: Callable[[float], bool] | None
) -> dict[str, float]:
    """Capture every point's pass before any visit, largest first (docs/cost-model.md, section 45): a point's first
    visit then times replays only. The cache is allocated first at the grid's largest size and length 0 (the
    captures' warm-up passes write slots no point reads before its own context is set). Where ``allows`` says a
    budget has no room for another capture, the rest are captured in their first visit's warm-up, never inside a
    timed pass. The count and seconds are in the runner's stats (``attrs["runner"]``)."""
    from measure.graphs import Shape, padded_batch
    from measure.models import context_bucket

    gr = runner.model.runner
    runner.prepare(max(b for b, _, _ in grid), 0)
    c = runner.model.cache
    assert gr is not None and c is not None
    t = tree if tree is None or isinstance(tree, Tree) else Tree(tree)
    shapes = [
        Shape("pass", padded_batch(b, c.max_batch), n, context_bucket(ctx + n, c.max_seq), tree=t)
        for b, n, ctx in grid
        if gr.serves(n) and ctx + n <= c.max_seq
    ]
    return gr.precapture(shapes, allows)


def _runner(obj: Any, dtype: str, dev: torch.device, max_batch: int, max_seq: int) -> tuple[Any, ModelSpec | None]:
    if isinstance(obj, Transformer):
        return ModelRunner(obj, max_batch, max_seq), obj.spec
    if isinstance(obj, (ModelSpec, str)):
        spec = get_model(obj)
        torch.manual_seed(0)
        return ModelRunner(Transformer(spec, dtype=dtype, device=dev), max_batch, max_seq), spec
    return HFRunner(obj), _spec_of(obj)
