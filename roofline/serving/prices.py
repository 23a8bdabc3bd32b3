"""Step prices for the serving simulator: tables of pass times computed in one vectorised call each.

A simulation takes hundreds of thousands of steps, so it cannot call the roofline per
step. It prices a grid once and interpolates:

* ``target[b, n, l]``: one pass of the target over ``b`` sequences of ``n`` new tokens each at
  context ``l`` (:func:`roofline.costing.passtime.pass_time`);
* ``draft[g, b, l]`` and ``verify[g, b, l]``: the drafter's ``draft_time`` and ``verify_time``
  for ``g`` drafts (the terms :func:`roofline.speculation.speculative.speedup` adds up, with the same
  :class:`roofline.speculation.speculative.Ctx`), plus the engine's per-round host time.

A decode-only step of ``b`` requests with mean cached context ``l`` costs
``draft + verify (+ round)`` at (g, b, l), or the plain pass ``target[b, 1, l]`` at g = 0: on
the grid these are exactly the terms of the closed-form speedup. A step that also carries
prefill chunks is one pass of its token count: ``T`` tokens over ``B`` sequences with
their mean context, ``target[B, T / B, C / B]`` (weights, KV reads and every linear layer's
FLOPs are exact; attention FLOPs use the mean tokens and mean context per sequence), and
under speculation the decode part keeps its drafter's prices:
``t = t_decode(g) + target(all) - target(decodes alone)``. An engine without chunked prefill
(``prefill="separate"`` in the scheduler) runs the decode round and then one pass of the
prefills alone, ``target[S, T / S, C / S]``, plus the same pass of the draft model when the
drafter is a separate model (``draft_pass``, the drafter's own model over the same grid).
``host_s + host_per_seq_s b`` is host time of every decode round of ``b`` sequences (plain or
speculative) on top of its passes: what a measured engine spends outside them, given apart
from the profile; ``prefill_host_s`` is the same for every separate prefill step (an engine
that pads the prompts and slices the cache for them before its passes), and ``idle_start_s``
is added to the first prefill step after the server idled (an engine whose first pass after a
wait runs cold: caches refilled, clocks raised; docs/cost-model.md, "the first step after idle").

Time is piecewise linear in batch and context (bytes and FLOPs are linear in both; max()
switches between them), so linear interpolation between grid points is exact on each
linear piece and the grid is dense where it is not (every batch and token count up to 16
and 32, then geometric steps of 1.25 in batch and 1.05 in tokens).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from roofline.core.errors import DoesNotFit, SpecroofError
from roofline.costing.engine import Engine
from roofline.costing.hardware import Hardware
from roofline.costing.passtime import device_memory, memory_footprint
from roofline.costing.pricing import Pricing, pricing_of
from roofline.passes.dtypes import dtype_bytes
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters import Ctx, Drafter, _SmallModel
from roofline.speculation.parallel import ep_context, ep_expert_weight_bytes
from roofline.speculation.trees import Tree

try:  # np.interp's own compiled loop, without the wrapper's checks (a run prices thousands of short arrays)
    from numpy._core.multiarray import interp as _interp
except ImportError:  # pragma: no cover - another numpy layout: the public function, the same numbers
    _interp = np.interp

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: the price key of a tree step (chain steps are keyed by their gamma)
TREE = -1

#: pricing ignores the model's context limit (requests are checked against it before): the grid's
#: last context point may sit a few tokens past it for the verify pass's drafts
_UNBOUNDED_CONTEXT = 10**9


def _grid(top: int, dense: int, ratio: float = 1.25) -> IntArray:
    """Every integer up to ``dense``, then geometric steps to ``top`` (inclusive)."""
    pts = list(range(1, min(dense, top) + 1))
    x = float(pts[-1])
    while pts[-1] < top:
        x *= ratio
        pts.append(min(top, max(pts[-1] + 1, int(round(x)))))
    return np.asarray(pts, dtype=np.int64)


def _unbounded(d: Any) -> Any:
    """A drafter whose own model (if any) is priced without its context limit."""
    spec = getattr(d, "spec", None)
    if isinstance(spec, ModelSpec) and dataclasses.is_dataclass(d):
        return dataclasses.replace(d, spec=spec.replace(max_context=_UNBOUNDED_CONTEXT))  # type: ignore[type-var]
    return d


def _lerp(grid: list[float], x: float) -> tuple[int, float]:
    """Index i and weight w with x = (1 - w) grid[i] + w grid[i + 1], clamped to the grid."""
    if x <= grid[0]:
        return 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 2, 1.0
    i = bisect.bisect_right(grid, x) - 1
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


@dataclass(frozen=True)
class StepPrices:
    """Price tables (seconds) and the interpolation over them; build with :func:`step_prices`."""

    b_grid: IntArray
    n_grid: IntArray
    l_grid: FloatArray
    target: FloatArray
    draft: FloatArray
    verify: FloatArray
    round_s: float
    drafter: str
    #: a tree step's draft + verify + round seconds over (batch, context), and its verify tokens per request
    tree_rows: FloatArray | None = None
    tree_tokens: int = 0
    #: the draft model's own pass over (batch, tokens, context), for its prefill (None: not built, or no draft model)
    draft_pass: FloatArray | None = None
    #: whether the drafter is a separate model, whose cache a separate prefill fills with a pass of its own
    draft_prefills: bool = False
    #: host seconds of every decode round beyond its passes (plain or speculative), on top of ``round_s``
    host_s: float = 0.0
    #: and host seconds per decoding sequence of that round (an engine's per-row bookkeeping)
    host_per_seq_s: float = 0.0
    #: host seconds of every separate prefill step beyond its passes (``prefill="separate"``)
    prefill_host_s: float = 0.0
    #: seconds added to the first prefill step after the server idled (nothing running, nothing queued)
    idle_start_s: float = 0.0
    _curves: dict[tuple[int, int], FloatArray] = field(default_factory=dict, compare=False, repr=False)
    _rows: dict[int, FloatArray] = field(default_factory=dict, compare=False, repr=False)
    _curve_lists: dict[tuple[int, int], list[float]] = field(default_factory=dict, compare=False, repr=False)
    _flat_rows: dict[int, tuple[FloatArray, ...]] = field(default_factory=dict, compare=False, repr=False)
    _nested: dict[int, list[list[list[float]]]] = field(default_factory=dict, compare=False, repr=False)
    _b_grid_list: list[float] = field(init=False, compare=False, repr=False)
    _n_grid_list: list[float] = field(init=False, compare=False, repr=False)
    _l_grid_list: list[float] = field(init=False, compare=False, repr=False)
    _b_cell: IntArray = field(init=False, compare=False, repr=False)
    _b_weight: FloatArray = field(init=False, compare=False, repr=False)
    _b_cells: list[tuple[int, float]] = field(init=False, compare=False, repr=False)
    _on_grid_to: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("b_grid", "n_grid", "l_grid"):
            object.__setattr__(self, f"_{name}_list", [float(v) for v in getattr(self, name)])
        cells = [_lerp(self._b_grid_list, float(b)) for b in range(int(self.b_grid[-1]) + 1)]
        object.__setattr__(self, "_b_cell", np.asarray([c[0] for c in cells], dtype=np.int64))
        object.__setattr__(self, "_b_weight", np.asarray([c[1] for c in cells]))
        object.__setattr__(self, "_b_cells", cells)
        # every batch 0..this one is a grid point, interpolated with weight 0 (the tables hold finite seconds)
        off_grid = [b for b, (_, w) in enumerate(cells) if w != 0.0]
        object.__setattr__(self, "_on_grid_to", (off_grid[0] if off_grid else len(cells)) - 1)

    @property
    def max_gamma(self) -> int:
        return self.draft.shape[0] - 1

    def _step_rows(self, gamma: int) -> FloatArray:
        """Seconds of a decode-only step over (batch grid, context grid): plain, a chain of ``gamma``, or TREE."""
        rows = self._rows.get(gamma)
        if rows is None:
            if gamma == TREE:
                if self.tree_rows is None:
                    raise SpecroofError("these prices hold no tree: build them with step_prices(..., tree=)")
                rows = self.tree_rows
            elif gamma == 0:
                rows = self.target[:, 0, :]  # n_grid[0] = 1: the plain decode pass
            else:
                rows = self.draft[gamma] + self.verify[gamma] + self.round_s
            if self.host_s or self.host_per_seq_s:
                rows = rows + (self.host_s + self.host_per_seq_s * self.b_grid[:, None])  # linear in b: exact
            self._rows[gamma] = rows
        return rows

    def decode_curve(self, gamma: int, batch: int) -> FloatArray:
        """Seconds of a decode-only step of ``batch`` requests drafting ``gamma`` each, at every grid context."""
        key = (gamma, batch)
        c = self._curves.get(key)
        if c is None:
            i, w = _lerp(self._b_grid_list, float(batch))
            rows = self._step_rows(gamma)
            # a grid of one batch size (--max-seqs 1) has no next row to blend with
            c = rows[i] if i + 1 >= len(rows) else (1.0 - w) * rows[i] + w * rows[i + 1]
            self._curves[key] = c
        return c

    def decode_time(self, gamma: int, batch: int, mean_context: Any) -> Any:
        """Seconds of decode-only steps at mean cached context ``mean_context`` (scalar or array)."""
        return _interp(mean_context, self.l_grid, self.decode_curve(gamma, batch), None, None)

    def decode_seconds(self, gamma: int, batch: int, mean_context: float) -> float:
        """:meth:`decode_time` at one scalar context, in Python floats: the same arithmetic as ``np.interp``
        (slope times offset plus the left value), without a numpy call per step."""
        key = (gamma, batch)
        fp = self._curve_lists.get(key)
        if fp is None:
            fp = self._curve_lists[key] = [float(v) for v in self.decode_curve(gamma, batch)]
        xp = self._l_grid_list
        x = float(mean_context)
        if not x > xp[0]:
            return fp[0] if x <= xp[0] else x  # below the grid (or NaN, which np.interp passes through)
        if x >= xp[-1]:
            return fp[-1]
        j = bisect.bisect_right(xp, x) - 1
        if xp[j] == x:
            return fp[j]
        slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
        return slope * (x - xp[j]) + fp[j]

    def decode_time_batches(
        self, gamma: int, batch: Any, mean_context: Any, *, max_batch: int | None = None, inside: bool = False
    ) -> FloatArray:
        """Seconds of decode-only steps whose batch changes from step to step (arrays, bilinear in batch and context).

        ``max_batch`` (no batch above it) and ``inside`` (every context within the grid) are promises from a caller
        that knows them: they skip work whose result is known, the clamp and, when every batch is a grid point
        (weight 0 along batch: ``lo + 0 (hi - lo)`` is ``lo``), the upper batch row. Same numbers either way."""
        # (arrays of the right type already are used as they are: the conversions cost a call each, per run)
        tabs = self._flat_rows.get(gamma)
        if tabs is None:
            tabs = self._flat_rows[gamma] = self._bilinear_tables(gamma)
        flat, d_flat, flat_up, d_flat_up, d_l, row_at, lg_inner = tabs
        # integer batches within the grid: their interpolation cell and weight are looked up, not searched
        b = batch if type(batch) is np.ndarray and batch.dtype == np.int64 else np.asarray(batch, dtype=np.int64)
        lg = self.l_grid
        x = (
            mean_context
            if type(mean_context) is np.ndarray and mean_context.dtype == np.float64
            else np.asarray(mean_context, dtype=float)
        )
        if not inside:
            x = np.minimum(np.maximum(x, lg[0]), lg[-1])
        # the cell along context, searched among the inner grid points: for x in [l_0, l_last] that is
        # min(searchsorted(l, x, "right") - 1, len(l) - 2) without the two extra calls
        k = lg_inner.searchsorted(x, side="right")
        lk = lg[k]
        wl = (x - lk) / d_l[k]
        at = row_at[b] + k  # the batch cell's first element in the flat table
        lo = flat[at] + wl * d_flat[at]
        if max_batch is not None and max_batch <= self._on_grid_to:
            return lo
        wb = self._b_weight[b]
        hi = flat_up[at] + wl * d_flat_up[at]
        return np.asarray(lo + wb * (hi - lo))

    def _bilinear_tables(self, gamma: int) -> tuple[FloatArray, ...]:
        """The (batch, context) table as one contiguous row, with its steps along context, the same two for the next
        batch row, and the context grid's steps: a bilinear lookup is gathers, the differences done once (the same
        subtractions, so the same numbers)."""
        rows = np.ascontiguousarray(self._step_rows(gamma))
        n_b, n_l = rows.shape
        d = np.zeros_like(rows)
        d[:, :-1] = rows[:, 1:] - rows[:, :-1]
        up = np.zeros_like(rows)
        up[:-1] = rows[1:]
        d_up = np.zeros_like(rows)
        d_up[:-1] = d[1:]
        lg = self.l_grid
        return rows.ravel(), d.ravel(), up.ravel(), d_up.ravel(), np.diff(lg), self._b_cell * n_l, lg[1:-1]

    def target_time(self, batch: float, tokens_per_seq: float, mean_context: float) -> float:
        """One target pass over ``batch`` sequences of ``tokens_per_seq`` new tokens at ``mean_context`` (trilinear)."""
        return self._pass_time(self.target, batch, tokens_per_seq, mean_context)

    def prefill_time(self, prefills: int, prefill_tokens: int, prefill_context: float, *, draft: bool) -> float:
        """A prefill pass of its own: ``prefills`` sequences, ``prefill_tokens`` tokens in all (cached contexts
        summing to ``prefill_context``), through the target and, with ``draft`` and a draft model, the drafter."""
        n, c = prefill_tokens / prefills, prefill_context / prefills
        t = self._pass_time(self.target, prefills, n, c)
        if draft and self.draft_prefills:
            if self.draft_pass is None:
                raise SpecroofError("these prices hold no draft-model prefill: build them with step_prices(..., "
                                    "prefill='separate')")  # fmt: skip
            t += self._pass_time(self.draft_pass, prefills, n, c)
        return t + self.prefill_host_s

    def _pass_time(self, table: FloatArray, batch: float, tokens_per_seq: float, mean_context: float) -> float:
        if isinstance(batch, int) and 0 <= batch < len(self._b_cells):
            i, wi = self._b_cells[batch]  # a whole batch: its cell, looked up (the same _lerp, done once)
        else:
            i, wi = _lerp(self._b_grid_list, batch)
        j, wj = _lerp(self._n_grid_list, tokens_per_seq)
        k, wk = _lerp(self._l_grid_list, mean_context)
        nested = self._nested.get(id(table))
        if nested is None:  # the table as nested lists, once: Python floats index in nanoseconds, .item() does not
            nested = self._nested[id(table)] = table.tolist()
        # scalar arithmetic: a step is priced in microseconds, not in numpy calls. A weight of exactly 0 (a whole
        # batch or token count on the grid) leaves its term out: (1 - 0) x + 0 y is x for the finite seconds here
        uk = 1 - wk
        lo_b = nested[i]
        a0 = lo_b[j]
        if wj == 0.0:
            lo = uk * a0[k] + wk * a0[k + 1]
        else:
            a1 = lo_b[j + 1]
            lo = (1 - wj) * (uk * a0[k] + wk * a0[k + 1]) + wj * (uk * a1[k] + wk * a1[k + 1])
        if wi == 0.0:
            return float(lo)
        hi_b = nested[i + 1]
        b0, b1 = hi_b[j], hi_b[j + 1]
        hi = (1 - wj) * (uk * b0[k] + wk * b0[k + 1]) + wj * (uk * b1[k] + wk * b1[k + 1])
        return float((1 - wi) * lo + wi * hi)

    def step_time(
        self,
        gamma: int,
        decodes: int,
        decode_context: float,
        prefill_tokens: int,
        prefills: int,
        prefill_context: float,
    ) -> float:
        """Seconds of one step: ``decodes`` requests (sum of cached contexts ``decode_context``) drafting ``gamma``
        (or the tree, ``gamma=TREE``), plus ``prefills`` prefill chunks of ``prefill_tokens`` tokens in all (their
        cached contexts sum to ``prefill_context``); see the module docstring."""
        if prefills == 0:
            return self.decode_seconds(gamma, decodes, decode_context / decodes)
        seqs = decodes + prefills
        width = self.tree_tokens if gamma == TREE else gamma + 1
        tokens = decodes * width + prefill_tokens
        t_all = self.target_time(seqs, tokens / seqs, (decode_context + prefill_context) / seqs)
        if decodes == 0:
            return t_all
        if gamma == 0:
            # a plain round's price is the target's one-token pass plus the round's host time, so
            # t_decode - target(decodes alone) is that host time: the two lookups would cancel
            return t_all + (self.host_s + self.host_per_seq_s * decodes)
        t_dec = self.decode_seconds(gamma, decodes, decode_context / decodes)
        t_dec_target = self.target_time(decodes, width, decode_context / decodes)
        return t_dec + max(0.0, t_all - t_dec_target)


def pricing_context(
    target: ModelSpec | str,
    hardware: Pricing | Hardware | str,
    *,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    engine: Engine | str | None = None,
    tp: int | None = None,
    ep: int = 1,
    ep_link_GB_per_s: float | None = None,
) -> Ctx:
    """The :class:`Ctx` the simulator prices with: the target (without its context limit) and one Pricing;
    ``ep`` > 1 prices the target's passes under expert parallelism (:func:`roofline.speculation.parallel.ep_context`)."""
    pr = pricing_of(hardware, engine=engine, dtype=dtype, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    ctx = Ctx(get_model(target).replace(max_context=_UNBOUNDED_CONTEXT), pr)
    return ep_context(ctx, ep, link_GB_per_s=ep_link_GB_per_s)


def step_prices(
    ctx: Ctx,
    drafter: Drafter | None,
    *,
    max_gamma: int,
    max_batch: int,
    max_tokens: int,
    max_context: int,
    context_points: int = 49,
    tree: Tree | None = None,
    prefill: str = "fused",
    round_host_s: float = 0.0,
    round_host_per_seq_s: float = 0.0,
    prefill_host_s: float = 0.0,
    idle_start_s: float = 0.0,
) -> StepPrices:
    """Price tables for steps of up to ``max_batch`` sequences, ``max_tokens`` tokens and ``max_context`` context.

    ``tree`` adds a tree step's table: the drafter's ``tree_draft_time`` for its level widths and one
    tree-masked verify pass of its nodes plus the pending token (as :func:`roofline.speculation.predict.predict_speedup`).
    ``prefill="separate"`` adds the draft model's own pass table (its prefill; a drafter that is a separate
    model). ``round_host_s + round_host_per_seq_s b`` is host time added to every decode round of ``b``
    sequences, plain or speculative, ``prefill_host_s`` to every separate prefill step, and ``idle_start_s`` to
    the first prefill step after the server idled (seconds; the first three are signed, a measured engine's
    correction to the profile, and may take off a step at most what its passes cost; ``idle_start_s`` >= 0).
    """
    check_prefill(prefill)
    for what, v in (
        ("round_host_s", round_host_s),
        ("round_host_per_seq_s", round_host_per_seq_s),
        ("prefill_host_s", prefill_host_s),
        ("idle_start_s", idle_start_s),
    ):
        if not (isinstance(v, (int, float, np.integer)) and math.isfinite(v)):
            raise SpecroofError(f"{what} must be a finite number of seconds (got {v!r})")
    if idle_start_s < 0:
        raise SpecroofError(f"idle_start_s must be >= 0 (got {idle_start_s!r}): a cold start adds time")
    b_grid = _grid(max_batch, 16)
    n_grid = _grid(max(max_tokens, max_gamma + 1), 32, 1.05)
    l_grid = np.unique(np.rint(np.linspace(0, max_context + max_gamma + 1, context_points))).astype(np.int64)
    target = np.empty((b_grid.size, n_grid.size, l_grid.size))
    # in slices of batch rows: a full grid's per-operator arrays would hold every point at once
    step = max(1, 20_000 // (n_grid.size * l_grid.size))
    for s in range(0, b_grid.size, step):
        B = b_grid[s : s + step, None, None]
        target[s : s + step] = ctx.pass_s(ctx.target, B, n_grid[None, :, None], l_grid[None, None, :], tp=ctx.tp)
    G = max_gamma + 1
    draft = np.zeros((G, b_grid.size, l_grid.size))
    verify = np.zeros((G, b_grid.size, l_grid.size))
    verify[0] = target[:, 0, :]
    # the draft passes run inside the round's step where the engine says so: they do not pay the step's host time
    dctx = (
        ctx if ctx.pricing.draft_passes is ctx.pricing else Ctx.of(ctx.target, ctx.pricing.draft_passes, ctx.draft_tp)
    )
    # a round's host time beyond the engine's fixed per-round time: per sequence, and the per-step host time where
    # plain decoding hides it and a speculative round does not (docs/cost-model.md, section 32); rides on the
    # draft table, which only speculative steps read
    round_s = ctx.pricing.round_host_s
    # (less the engine's fixed worker time where the drafter's worker does not run it: section 55)
    round_extra = np.asarray(ctx.pricing.round_host_at(b_grid, drafter), dtype=float) - round_s
    if max_gamma > 0:
        if drafter is None:
            raise SpecroofError("a speculating policy needs a drafter")
        d = _unbounded(drafter)
        g = np.arange(1, G, dtype=np.int64)[:, None, None]
        B, L = b_grid[None, :, None], l_grid[None, None, :]
        draft[1:] = np.broadcast_to(d.draft_time(dctx, g, B, L), (G - 1, b_grid.size, l_grid.size))
        draft[1:] += np.broadcast_to(round_extra, b_grid.shape)[None, :, None]
        verify[1:] = np.broadcast_to(d.verify_time(ctx, g, B, L), (G - 1, b_grid.size, l_grid.size))
    name = "" if drafter is None else str(getattr(drafter, "name", drafter))
    tree_rows, tree_tokens = None, 0
    if tree is not None:
        if drafter is None:
            raise SpecroofError("a tree policy needs a drafter")
        d = _unbounded(drafter)
        depths = np.concatenate([[1], tree.depths + 1])  # the pending token is the root
        own = (
            d.tree_verify_time(ctx, tree, b_grid[:, None], l_grid[None, :]) if hasattr(d, "tree_verify_time") else None
        )
        verify_t = (
            own
            if own is not None
            else ctx.pass_s(ctx.target, b_grid[:, None], None, l_grid[None, :], tree=depths, tp=ctx.tp)
        )
        widths = [int(x) for x in tree.widths]
        # tree_draft_time takes one batch and context: the grid is small (hundreds of points)
        draft_t = np.array([[d.tree_draft_time(dctx, widths, int(b), int(c)) for c in l_grid] for b in b_grid])
        tree_rows = draft_t + verify_t + round_s + np.broadcast_to(round_extra, b_grid.shape)[:, None]
        tree_tokens = int(tree.n_nodes) + 1
    draft_prefills = isinstance(drafter, _SmallModel)
    draft_pass = None
    if draft_prefills and prefill == "separate":
        spec = _unbounded(drafter).spec
        draft_pass = np.empty_like(target)
        for s in range(0, b_grid.size, step):
            B = b_grid[s : s + step, None, None]
            draft_pass[s : s + step] = ctx.pass_s(spec, B, n_grid[None, :, None], l_grid[None, None, :])
    prices = StepPrices(
        b_grid, n_grid, l_grid.astype(float), target, draft, verify, round_s, name, tree_rows, tree_tokens,
        draft_pass, draft_prefills, float(round_host_s), float(round_host_per_seq_s), float(prefill_host_s),
        float(idle_start_s),
    )  # fmt: skip
    _check_host_line(prices)
    return prices


def _check_host_line(p: StepPrices) -> None:
    """Refuse host terms that make a step the scheduler can price cost no time: the host line is signed (a
    correction to the profile at the engine's operating points: docs/cost-model.md, section 24), but it can take
    off a round's passes at most what they cost."""
    if p.host_s or p.host_per_seq_s:
        keys = [0] + list(range(1, p.max_gamma + 1)) + ([TREE] if p.tree_rows is not None else [])
        for g in keys:
            rows = p._step_rows(g)  # (host included)
            if not np.all(rows > 0):
                b, _ = np.unravel_index(int(np.argmin(rows)), rows.shape)
                host = p.host_s + p.host_per_seq_s * float(p.b_grid[b])
                kind = "plain" if g == 0 else ("tree" if g == TREE else f"gamma-{g}")
                raise SpecroofError(
                    f"round_host_s + round_host_per_seq_s x b ({1e6 * host:+.0f} us at b = {int(p.b_grid[b])}) "
                    f"leaves a {kind} decode round of {int(p.b_grid[b])} sequences no time: a host correction can "
                    "take off at most what the round's passes cost"
                )
    if p.prefill_host_s < 0:
        fastest = float(p.target.min())  # the cheapest prefill pass of the grid
        if fastest + p.prefill_host_s <= 0:
            raise SpecroofError(
                f"prefill_host_s ({1e6 * p.prefill_host_s:+.0f} us) leaves a prefill pass of "
                f"{1e3 * fastest:.3g} ms no time: a host correction can take off at most what the pass costs"
            )


#: how a step prices its prefills: in the decodes' pass (chunked prefill), or as a pass of their own after them
PREFILL_MODES = ("fused", "separate")


def check_prefill(prefill: str) -> str:
    if prefill not in PREFILL_MODES:
        raise SpecroofError(f"prefill must be one of {', '.join(PREFILL_MODES)} (got {prefill!r})")
    return prefill


def kv_capacity_tokens(
    ctx: Ctx,
    drafter: Drafter | None,
    *,
    max_tokens: int,
    memory_fraction: float = 0.9,
    ep: int = 1,
) -> int:
    """Tokens of KV cache that fit after the weights, the drafter and one step's activations.

    ``memory_fraction`` is the share of device memory the server may take (vLLM's
    ``gpu_memory_utilization``, default 0.9: https://docs.vllm.ai/en/stable/models/engine_args.html).
    Over ``tp`` devices the memory, the target's weights and its KV add up; the drafter's
    weights and KV count against the same total. Over ``ep`` expert-parallel GPUs
    (:mod:`roofline.speculation.parallel`) each GPU holds every weight but the routed experts, ``1 / ep`` of
    those, the drafter and its sequences' KV: the group's capacity is ``ep`` times one GPU's.
    """
    pr = ctx.pricing
    if pr.hardware.memory_bytes is None:
        raise SpecroofError(
            f"hardware {pr.hardware.id!r} has no memory capacity in its profile: give kv_capacity_tokens"
        )
    if not 0 < memory_fraction <= 1:
        raise SpecroofError(f"memory fraction must lie in (0, 1] (got {memory_fraction})")
    spec = ctx.target
    fp = memory_footprint(spec, 1, 0, weight_dtype=pr.stored_weight_dtype, act_dtype=pr.dtype, new_tokens=max_tokens)
    per_token = float(spec.kv_bytes(1, dtype_bytes(pr.kv_dtype or pr.dtype)))
    fixed = float(device_memory(spec, pr, 1, 0)) + float(np.asarray(fp.activation_bytes))
    if ep > 1 and not pr.offloaded:
        fixed -= ep_expert_weight_bytes(spec, dtype_bytes(pr.stored_weight_dtype)) * (1.0 - 1.0 / ep)
    if drafter is not None:
        probe = 1024
        d = _unbounded(drafter)
        at0 = float(np.asarray(d.extra_memory_bytes(ctx, 1, 0)))
        at_probe = float(np.asarray(d.extra_memory_bytes(ctx, 1, probe)))
        fixed += at0
        per_token += (at_probe - at0) / probe
    usable = pr.memory_bytes * memory_fraction
    if per_token <= 0:
        return 1 << 40  # a model with no KV cache (an abstract one): memory never limits the batch
    if usable - fixed < per_token * 1024:
        raise DoesNotFit(
            f"{spec.name} leaves no room for a KV cache on {pr.describe()}: {fixed / 1e9:.1f} GB of weights, "
            f"drafter and activations against {usable / 1e9:.1f} GB usable" + (f" per GPU of ep={ep}" if ep > 1 else "")
        )
    return int(ep * math.floor((usable - fixed) / per_token))
