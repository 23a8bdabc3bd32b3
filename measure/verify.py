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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from measure.device import default_device, describe, match_profile
from measure.models import Transformer
from measure.store import SweepStore
from measure.timing import Timing, time_fn
from roofline.errors import SpecroofError, check_min
from roofline.hardware import Hardware, load_hardware
from roofline.model import ModelSpec, get_model
from roofline.roofline import pass_time

KEY = ("model", "dtype", "batch", "new_tokens", "context", "tree")


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
    """Sweep interface over :class:`measure.models.Transformer`: set the cache length, run, roll back."""

    def __init__(self, model: Transformer, max_batch: int, max_seq: int) -> None:
        self.model = model.eval()
        self.device = model.device
        model.setup_cache(max_batch, max_seq)
        self.context = 0
        self.batch = 0

    def prepare(self, batch: int, context: int) -> None:
        # latency does not depend on the cached values: only the lengths are set
        assert self.model.cache is not None
        self.batch, self.context = batch, context
        self.model.cache.rollback([context] * self.model.cache.max_batch)

    def run(self, tokens: torch.Tensor, tree: Any = None) -> None:
        with torch.no_grad():
            self.model(tokens, tree)
        # nothing was committed: the lengths stay at ``context``


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


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
    threads: int | None = None,
    progress: bool = True,
    seed: int = 0,
) -> pd.DataFrame:
    """Time the verify pass at every (dtype, batch, new_tokens, context); one tidy row per point.

    ``spec_or_model``: a ModelSpec or preset (random weights are built per dtype),
    a :class:`Transformer`, or a ``transformers`` causal LM (its own dtype is used).
    ``tree`` (a Tree) replaces the chain: ``new_tokens`` is then ignored.
    ``hardware`` prices each point with the roofline for the ``t_predicted_s`` column
    (default: the matched datasheet profile, if any).

    ``rounds`` > 1 visits the grid that many times in a shuffled order, timing
    ``repeats`` passes per visit, and pools each point's samples: on a shared,
    noisy machine a slow period then spreads over many points instead of spoiling
    a contiguous block. Rows are saved when a point's last round completes.
    """
    dev = torch.device(device) if device is not None else default_device()
    B = [int(b) for b in check_min("batch", list(batch), 1, integer=True)]
    N = [int(n) for n in check_min("new_tokens", list(new_tokens), 1, integer=True)]
    L = [int(c) for c in check_min("context", list(context), 0, integer=True)]
    if tree is not None:
        N = [int(tree.n_nodes)]
    hw = load_hardware(hardware) if hardware is not None else None
    if hw is None:
        match = match_profile(describe(dev))
        hw = load_hardware(match) if match else None
    store = SweepStore(out, KEY) if out is not None else None
    if store is not None and not resume:
        store.clear()  # a fresh sweep: earlier rows would mix two runs
    done = store.done() if (store is not None and resume) else set()
    if store is not None:
        store.write_meta({"device": describe(dev), "hardware_profile": hw.id if hw else None, "kind": "verify sweep"})
    hf = not isinstance(spec_or_model, (ModelSpec, str, Transformer))
    dtypes = list(dtype) if not hf else [str(next(spec_or_model.parameters()).dtype).replace("torch.", "")]
    if isinstance(spec_or_model, Transformer):
        dtypes = [{torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[spec_or_model.dtype]]
    rounds = int(check_min("rounds", rounds, 1, integer=True))
    points = list(itertools.product(dtypes, B, N, L))
    rows: list[dict[str, Any]] = []
    bar = _progress(len(points) * rounds, progress)
    tree_id = "chain" if tree is None else f"tree{tree.n_nodes}d{tree.depth}"
    rng = np.random.default_rng(seed)
    try:
        for dt in dtypes:
            runner, spec = _runner(spec_or_model, dt, dev, max(B), max(L) + max(N))
            name = spec.name if spec is not None else type(spec_or_model).__name__
            vocab = spec.vocab_size if spec is not None else spec_or_model.config.vocab_size
            gen = torch.Generator().manual_seed(seed)
            todo = []
            for b, n, c in itertools.product(B, N, L):
                row: dict[str, Any] = {
                    "model": name,
                    "dtype": dt,
                    "batch": b,
                    "new_tokens": n,
                    "context": c,
                    "tree": tree_id,
                }
                if store is not None and store.key_of(row) in done:
                    bar.update(rounds)
                    continue
                todo.append((row, torch.randint(0, vocab, (b, n), generator=gen).to(dev)))
            samples: dict[int, list[float]] = {i: [] for i in range(len(todo))}
            failed: dict[int, str] = {}
            for r in range(rounds):
                order = rng.permutation(len(todo)) if rounds > 1 else np.arange(len(todo))
                for i in order.tolist():
                    row, tokens = todo[i]
                    if i not in failed:
                        try:
                            runner.prepare(row["batch"], row["context"])
                            t = time_fn(
                                lambda tk=tokens, rn=runner: rn.run(tk, tree),
                                warmup=warmup if r == 0 else 1,
                                repeats=repeats,
                                device=dev,
                                threads=threads,
                            )
                            samples[i].extend(t.samples_s)
                        except Exception as exc:
                            if not _is_oom(exc):
                                raise
                            failed[i] = "oom"
                            if dev.type == "cuda":
                                torch.cuda.empty_cache()
                    if r == rounds - 1:
                        rows.append(_finish(row, samples[i], failed.get(i), warmup, str(dev), spec, hw, tree))
                        if store is not None:
                            store.append(rows[-1])
                    bar.update(1)
    finally:
        bar.close()
    df = pd.DataFrame(rows)
    if store is not None:
        df = store.read()
    return df


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
        "repeats": ("repeats", "sum"),
        "status": ("status", lambda st: "ok" if (st == "ok").all() else next(x for x in st if x != "ok")),
    }
    rest = [c for c in df.columns if c not in keys and c not in agg]
    out = df.groupby(keys, sort=False, dropna=False).agg(**agg, **{c: (c, "first") for c in rest}).reset_index()
    return out[list(df.columns)]


def _finish(
    row: dict[str, Any],
    samples: list[float],
    status: str | None,
    warmup: int,
    device: str,
    spec: ModelSpec | None,
    hw: Hardware | None,
    tree: Any,
) -> dict[str, Any]:
    out = dict(row)
    if status is None and samples:
        out.update(status="ok", **Timing(tuple(samples), warmup, device).as_row("t"))
    else:
        out.update(status=status or "error", t_median_s=np.nan, t_min_s=np.nan, t_iqr_s=np.nan, repeats=0)
    out["device"] = device
    out["t_predicted_s"] = _predict(spec, hw, out["batch"], out["new_tokens"], out["context"], out["dtype"], tree)
    return out


def _runner(obj: Any, dtype: str, dev: torch.device, max_batch: int, max_seq: int) -> tuple[Any, ModelSpec | None]:
    if isinstance(obj, Transformer):
        return ModelRunner(obj, max_batch, max_seq), obj.spec
    if isinstance(obj, (ModelSpec, str)):
        spec = get_model(obj)
        torch.manual_seed(0)
        return ModelRunner(Transformer(spec, dtype=dtype, device=dev), max_batch, max_seq), spec
    spec = None
    try:
        spec = ModelSpec.from_hf_config(obj.config.to_dict())
    except Exception:  # an architecture the cost model does not know: measure anyway, no prediction
        spec = None
    return HFRunner(obj), spec


def _predict(spec: ModelSpec | None, hw: Hardware | None, b: int, n: int, c: int, dt: str, tree: Any) -> float:
    if spec is None or hw is None or dt not in hw.dtypes and dt not in ("fp32", "bf16", "fp16"):
        return float("nan")
    try:
        st = pass_time(spec, hw, b, None if tree is not None else n, c, dt, tree=tree)
    except SpecroofError:
        return float("nan")
    return float(st.t_step_s)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="verify sweep", unit="pt")
