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
from collections.abc import Sequence
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
from roofline.errors import SpecroofError, check_choice, check_min
from roofline.hardware import Hardware, load_hardware
from roofline.model import ModelSpec, get_model

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
    ``budget`` (seconds or a :class:`Budget`) stops further visits once spent; the
    first visit of every point always runs.

    ``graphs`` (``--graphs``: auto, on, off): on a GPU each point's pass is captured as a CUDA
    graph and replayed (:mod:`measure.graphs`), timed by CUDA events; "on" without a GPU is an
    error, and the CPU runs eagerly. ``compile`` runs each layer through ``torch.compile`` first
    (its compile time is spent inside the budget). A model that already has a runner keeps it.
    With graphs off on a GPU, up to ``launch_points`` points are also timed both ways, and
    ``attrs["launch_overhead"]`` holds what the graphs remove per pass (eager minus graph).
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
        raise SpecroofError(
            f"context {max(L)} + {max(N)} new tokens exceeds {spec0.name}'s max context {spec0.max_context}: "
            f"use contexts up to {spec0.max_context - max(N)}"
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
        )
    finally:
        if lock is not None:
            lock.release()
    from measure.graphs import detach, launch_overhead, runner_stats

    df.attrs["passes"] = passes
    df.attrs["runner"] = runner_stats(models)
    if dev.type == "cuda" and passes == "eager" and not hf and launch_points > 0 and tree is None:
        # what the graphs would remove: a few points timed both ways (eager minus graph, per pass)
        pts = launch_overhead_points(B, N, L, launch_points)
        frames = [launch_overhead(m, pts).assign(dtype=dtype_name(m.dtype)) for m in models if not m.spec.is_moe]
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
) -> tuple[pd.DataFrame, list[Any]]:
    """The measuring loop of :func:`sweep`: shuffled visits, per-visit rows, budget and convergence. Returns the
    pooled rows and the harness models measured (``how``: (graphs, compile) to attach to each)."""
    tree_id = "chain" if tree is None else f"tree{tree.n_nodes}d{tree.depth}"
    rng = np.random.default_rng(seed)
    visits: list[dict[str, Any]] = saved.to_dict(orient="records") if not saved.empty else []
    models: list[Any] = []
    for dt in dtypes:
        runner, spec = _runner(spec_or_model, dt, dev, max(B), max(L) + max(N))
        if isinstance(runner, ModelRunner):
            if how is not None and runner.model.runner is None:
                from measure.graphs import attach

                attach(runner.model, capture=how[0], compile=how[1])
            models.append(runner.model)
        name = spec.name if spec is not None else type(spec_or_model).__name__
        vocab = spec.vocab_size if spec is not None else spec_or_model.config.vocab_size
        gen = torch.Generator().manual_seed(seed)
        rows: list[dict[str, Any]] = [
            {"model": name, "dtype": dt, "batch": b, "new_tokens": n, "context": c, "tree": tree_id}
            for b, n, c in itertools.product(B, N, L)
        ]
        tokens = [torch.randint(0, vocab, (r["batch"], r["new_tokens"]), generator=gen).to(dev) for r in rows]
        # every point priced in one call, by the fit's own route (NaN where there is no profile to price with)
        preds = (
            predict_times(pd.DataFrame(rows), spec, hw, tree=tree)
            if spec is not None and hw is not None
            else np.full(len(rows), np.nan)
        )
        points = [(r, t, float(p)) for r, t, p in zip(rows, tokens, preds, strict=True)]
        too_big = _too_big_now(spec, dt, rows, dev)
        history: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(points))}
        keys = [tuple(str(r[k]) for k in KEY) for r, _, _ in points]
        ref = reference_point(rows)
        watch = ReferenceWatch(ref)  # fed every visit in the order measured (a saved sweep's rows are in that order)
        for v in visits:
            k = tuple(str(v.get(kk)) for kk in KEY)
            if k in keys:
                j = keys.index(k)
                history[j].append(v)
                watch.record(j, _visit_min(v))
        unit = [(warmup + repeats) * (t if np.isfinite(t) else 1e-3) for _, _, t in points]
        todo_visits = sum(max(0, (rounds if rounds > 1 else 1) - len(history[i])) for i in range(len(points)))
        bar = WorkBar(sum(unit) * max(1, todo_visits / max(1, len(points))), f"verify sweep {name} {dt}", progress)
        try:
            for r in range(rounds):
                order = rng.permutation(len(points)) if rounds > 1 else np.arange(len(points))
                order = [ref, *(i for i in order.tolist() if i != ref)]  # the reference opens every visit
                for i in order:
                    row, tokens, t_pred = points[i]
                    h = history[i]
                    if len(h) > r or (h and h[-1]["status"] != "ok"):
                        continue  # saved by an earlier run, or failed (an OOM does not heal)
                    if i != ref and len(h) >= 2 and _converged(h) and not watch.sped_up_since(i):
                        continue
                    if h and bud.expired():
                        continue  # every point has its first visit; the budget says stop
                    if spec is not None and i in too_big:
                        visit = dict(_OOM)  # would not fit the memory now free: not attempted (the kernel kills)
                    else:
                        visit = _measure_visit(runner, row, tokens, tree, dev, warmup if not h else 1, repeats, threads)
                    out = {**row, "visit": len(h), **visit, "device": str(dev), "t_predicted_s": t_pred}
                    h.append(out)
                    watch.record(i, _visit_min(out))
                    if store is not None:
                        store.append(out)
                    bar.update(unit[i], f"{sum(len(x) > 0 for x in history.values())}/{len(points)} points")
                if bud.expired() and all(history.values()):
                    break
        finally:
            bar.close()
        visits = [v for v in visits if tuple(str(v.get(kk)) for kk in KEY) not in keys]
        visits += [v for h in history.values() for v in h]
    if not visits:
        return pd.DataFrame(), models
    return pool_visits(pd.DataFrame(visits)), models


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
) -> dict[str, Any]:
    """One visit of one point: ``repeats`` timed passes; an out-of-memory error becomes status ``oom``."""
    try:
        if isinstance(runner, ModelRunner):
            runner.prepare(row["batch"], row["context"], row["new_tokens"])
        else:
            runner.prepare(row["batch"], row["context"])
        t = time_fn(lambda: runner.run(tokens, tree), warmup=warmup, repeats=repeats, device=dev, threads=threads)
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


def _runner(obj: Any, dtype: str, dev: torch.device, max_batch: int, max_seq: int) -> tuple[Any, ModelSpec | None]:
    if isinstance(obj, Transformer):
        return ModelRunner(obj, max_batch, max_seq), obj.spec
    if isinstance(obj, (ModelSpec, str)):
        spec = get_model(obj)
        torch.manual_seed(0)
        return ModelRunner(Transformer(spec, dtype=dtype, device=dev), max_batch, max_seq), spec
    return HFRunner(obj), _spec_of(obj)
