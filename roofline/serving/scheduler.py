"""A continuous-batching scheduler like vLLM's (V1) and SGLang's, stepped on priced passes.

One module despite its length: the fast-forward over decode-only steps must leave the state the step-by-step loop
would, so both stay in the one :func:`simulate_run` with its samplers.

Every step the scheduler, in this order:

1. decodes every running request whose prompt is in its KV cache, drafting the policy's
   gamma (one gamma for the whole step: one verify pass), clipped so the decodes fit the
   token budget;
2. reserves KV blocks for what the step writes (each decode's ``kv + gamma + 1`` tokens) and,
   while they do not fit, preempts the most recently admitted request (recompute: its blocks
   are freed and it goes back to the front of the queue, to prefill its prompt and the tokens
   it has emitted again);
3. spends the rest of the token budget on prefill chunks: first requests already prefilling,
   then the queue in order (preempted first, then arrivals), while there are sequence slots and
   free blocks for a newcomer's whole prompt (no request jumps the queue);
4. prices the step (:class:`roofline.serving.prices.StepPrices`) and advances the clock.

With ``prefill="separate"`` (an engine without chunked prefill, as
``measure.serve`` runs) a prompt is prefilled whole, in a pass of its own after the step's decode
round: up to ``max_tokens`` prompt tokens a step, whatever the decodes take. The step costs the
round, then one target pass over the prefills alone, then the draft model's pass over them
when the policy drafts with a separate model; the decodes' tokens arrive when their round ends,
the newcomers' first tokens when the prefill passes end.

A decode emits ``min(R, gamma) + 1`` tokens, ``R`` the run of accepted drafts, geometric in
the request's own per-token acceptance alpha (P(R >= j) = alpha^j): progress is ragged.
Prefill's last chunk emits the first token. The first prefill step after the server idled (nothing
running, nothing queued: it waited for the next arrival) costs ``prices.idle_start_s`` more.

Steps that only decode, with nothing that could join, are advanced many at a time: the
acceptance of K rounds is drawn at once and the run is cut at the first round where a
request finishes, the next arrival could be admitted, or KV blocks would run out. State is
numpy arrays over requests; nothing is kept per step but bounded traces.

At light load a step holds a handful of requests and the loop's cost is the number of numpy calls,
not their size (about a microsecond each, more when they broadcast or reduce along an axis): integer
sums over a few requests are done in Python, scalars are read from lists (so are the tokens left of a run's
few requests, and a prefill step's few decodes' tokens and finishers), and with one alpha for
every request the draws are turned into a round's tokens a block at a time. A decoding request's
tokens still to emit are ``input + output - 1 - kv`` (its cache holds its prompt and every token it
emitted but the last), so decoding updates its ``kv`` alone. A run of plain rounds over a few
requests takes its batch, context and blocks held per round from closed forms (each request's
finish round and block boundaries) instead of (rounds x requests) arrays, and a speculative run
over a few requests finds each one's finish round by searching its own token counts. Each of these
is the same arithmetic as the array form (integers, or the same float operations elementwise), so a
run's numbers do not depend on them; the tests run both forms.

Asked for (``marks=``), a run notes the moments its server stood empty, with its running totals:
where :mod:`roofline.serving.split` splices runs of a long run's chunks simulated in parallel.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.serving.metrics import ITL_BINS, itl_bins
from roofline.serving.policies import ServingPolicy
from roofline.serving.prices import TREE, StepPrices, check_prefill
from roofline.serving.workload import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: decode rounds drawn at once when nothing else can happen (bounds the draw to K x batch numbers)
MAX_ROUNDS_AT_ONCE = 512
#: the goodput policy re-chooses gamma at least this often within a run of decode rounds
GOODPUT_REVISIT_ROUNDS = 16
#: up to this many requests a sum of integers is cheaper in Python than as a numpy reduction
SMALL_BATCH = 48
#: up to this many requests a run of plain rounds is priced from closed forms (per-request Python loops)
CLOSED_FORM_BATCH = 12
#: up to this many drawn (rounds x requests) numbers, of CLOSED_FORM_BATCH requests at most, a run's finish
#: rounds are searched in Python lists
PY_CELLS = 256


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of the scheduler: vLLM's ``max_num_seqs``, ``max_num_batched_tokens``, ``block_size`` and KV capacity."""

    max_seqs: int = 256
    max_tokens: int = 2048
    block_size: int = 16
    kv_capacity_tokens: int = 1 << 40
    trace_points: int = 2048
    #: "fused": prefill chunks ride in the decodes' pass (chunked prefill); "separate": whole prompts, own pass
    prefill: str = "fused"

    def __post_init__(self) -> None:
        for name, lo in (("max_seqs", 1), ("max_tokens", 1), ("block_size", 1), ("trace_points", 2)):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= lo):
                raise SpecroofError(f"{name} must be a whole number >= {lo} (got {v!r})")
        if self.max_seqs > self.max_tokens:
            raise SpecroofError(
                f"max_seqs ({self.max_seqs}) must not exceed max_tokens ({self.max_tokens}): every decode takes a token"
            )
        if self.kv_capacity_tokens < self.block_size:
            raise SpecroofError(f"kv capacity must hold at least one block of {self.block_size} tokens")
        check_prefill(self.prefill)

    @property
    def kv_blocks(self) -> int:
        return int(self.kv_capacity_tokens // self.block_size)


@dataclass(frozen=True)
class Trace:
    """Batch size and KV utilisation over time, sampled (at most ``trace_points`` points, evenly thinned)."""

    time_s: FloatArray
    batch: IntArray
    kv_utilisation: FloatArray

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"time_s": self.time_s, "batch": self.batch, "kv_utilisation": self.kv_utilisation})


class _Sampler:
    """Keeps every ``stride``-th point; when full, drops every other one and doubles the stride (bounded memory)."""

    def __init__(self, size: int) -> None:
        self.size, self.stride, self.seen = size, 1, 0
        self.t: list[float] = []
        self.b: list[int] = []
        self.k: list[float] = []

    def add(self, t: float, b: int, k: float) -> None:
        if self.seen % self.stride == 0:
            self.t.append(t)
            self.b.append(b)
            self.k.append(k)
            if len(self.t) >= self.size:
                self.t, self.b, self.k = self.t[::2], self.b[::2], self.k[::2]
                self.stride *= 2
        self.seen += 1

    def trace(self) -> Trace:
        return Trace(np.asarray(self.t), np.asarray(self.b, dtype=np.int64), np.asarray(self.k))


@dataclass(frozen=True)
class RunResult:
    """One simulated run: per-request times, the ITL histogram, time-weighted totals and the traces."""

    requests: pd.DataFrame
    itl_counts: npt.NDArray[np.int64]
    busy_s: float
    batch_seconds: float
    kv_block_seconds: float
    kv_blocks: int
    max_kv_utilisation: float
    max_step_tokens: int
    rounds: int
    draft_tokens: int
    accepted_tokens: int
    trace: Trace
    #: loop iterations: runs of decode-only rounds advanced at once, and steps with prefill chunks
    decode_runs: int = 0
    prefill_steps: int = 0
    #: the moments the server stood empty, when asked for (``simulate_run(..., marks=)``): where a run can be spliced
    idle: IdleMarks | None = None
    #: the pieces it was simulated in (:mod:`roofline.serving.split`; 1: whole)
    chunks: int = 1


@dataclass(frozen=True)
class IdleMarks:
    """The moments a run's server stood empty, waiting for request ``request[m]`` (local index) to arrive.

    Everything before such a moment is over (every earlier request finished, no KV held), so what follows
    depends only on the requests from ``request[m]`` on and the random numbers drawn: two runs empty before the
    same arrival can be spliced there (:mod:`roofline.serving.split`). ``totals[m]`` are the run's running totals
    at that moment (:data:`MARK_TOTALS`), ``max_kv[m]`` and ``max_tokens[m]`` the maxima over the stretch since the
    previous mark, and ``itl[j]`` the ITL histogram so far at the marks of request ``j`` inside the asked windows.
    """

    request: IntArray
    totals: FloatArray
    max_kv: FloatArray
    max_tokens: IntArray
    itl: dict[int, npt.NDArray[np.int64]]
    #: the maxima over the stretch after the last mark, to the run's end
    tail_max_kv: float = 0.0
    tail_max_tokens: int = 0


#: the running totals an idle mark keeps, in the order of :attr:`IdleMarks.totals`
MARK_TOTALS = (
    "busy_s", "batch_seconds", "kv_block_seconds", "rounds", "draft_tokens", "accepted_tokens", "decode_runs",
    "prefill_steps",
)  # fmt: skip


class _Gaps:
    """Inter-token gaps, buffered and binned into the ITL histogram in bulk (one numpy pass per 64k gaps).

    Gaps that count once (one request's gap) and gaps that count for a whole batch (a round's length, once per
    request in it) are buffered apart: the first need no weights written.
    """

    SIZE = 1 << 16

    def __init__(self) -> None:
        self.hist = np.zeros(ITL_BINS, dtype=np.int64)
        self.ones = np.empty(self.SIZE)
        self.n1 = 0
        self.gaps = np.empty(self.SIZE)
        self.weights = np.empty(self.SIZE, dtype=np.int64)
        self.n = 0

    def add_ones(self, gaps: FloatArray) -> None:
        m = gaps.size
        if self.n1 + m > self.SIZE:
            self.flush()
            if m > self.SIZE:
                self.hist += np.bincount(itl_bins(gaps), minlength=ITL_BINS)
                return
        self.ones[self.n1 : self.n1 + m] = gaps
        self.n1 += m

    def add(self, gaps: FloatArray, weight: int | npt.NDArray[np.int64]) -> None:
        m = gaps.size
        if self.n + m > self.SIZE:
            self.flush()
            if m > self.SIZE:
                w = np.broadcast_to(weight, m)
                self.hist += np.bincount(itl_bins(gaps), weights=w, minlength=ITL_BINS).astype(np.int64)
                return
        self.gaps[self.n : self.n + m] = gaps
        self.weights[self.n : self.n + m] = weight
        self.n += m

    def flush(self) -> None:
        if self.n1:
            self.hist += np.bincount(itl_bins(self.ones[: self.n1]), minlength=ITL_BINS)
            self.n1 = 0
        if self.n:
            self.hist += np.bincount(
                itl_bins(self.gaps[: self.n]), weights=self.weights[: self.n], minlength=ITL_BINS
            ).astype(np.int64)
            self.n = 0

    def counts(self) -> npt.NDArray[np.int64]:
        self.flush()
        return self.hist


class _LogUniforms:
    """log(1 - U), U uniform in [0, 1), drawn from the run's generator in blocks.

    ``take(n)`` serves the next ``n`` numbers of the generator's stream (a block is the same
    numbers as the draws it replaces, in order), so a run gets exactly the numbers it would
    drawing each round's on demand, for one numpy call per block instead of two per step.
    """

    SIZE = 1 << 14

    def __init__(
        self, rng: np.random.Generator, transform: Callable[[FloatArray], npt.NDArray[Any]] | None = None
    ) -> None:
        self.rng = rng
        self.transform = transform  # applied to each block as it is drawn (elementwise: the same numbers as per take)
        self.buf: npt.NDArray[Any] = np.empty(0)
        self.pos = 0

    def take(self, n: int) -> npt.NDArray[Any]:
        if self.pos + n > self.buf.size:
            fresh = np.log1p(-self.rng.random(max(self.SIZE, n)))
            if self.transform is not None:
                fresh = self.transform(fresh)
            self.buf = np.concatenate([self.buf[self.pos :], fresh]) if self.pos < self.buf.size else fresh
            self.pos = 0
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v


def _one_alpha(alpha: FloatArray) -> bool:
    """Whether every request has the same acceptance alpha (the draws can then be turned into runs in bulk)."""
    return alpha.size > 0 and bool(np.all(alpha == alpha[0]))


def _isum(x: IntArray) -> int:
    """Sum of a 1-d integer array (exact either way: integers)."""
    return sum(x.tolist()) if x.size <= SMALL_BATCH else int(x.sum())


def _blocks(kv: IntArray, extra: int, bs: int) -> int:
    """KV blocks of requests holding ``kv + extra`` tokens each: sum of (kv + extra) // bs."""
    if kv.size <= SMALL_BATCH:
        return sum([(x + extra) // bs for x in kv.tolist()])
    return int(((kv + extra) // bs).sum())


def _held(kv: IntArray, kv_l: list[int], extra: int, bs: int) -> int:
    """KV blocks of requests holding ``kv + extra`` tokens each, from the list of ``kv`` when it was made (a few)."""
    if kv_l or not kv.size:
        return sum([(x + extra) // bs for x in kv_l])
    return int(((kv + extra) // bs).sum())


def expected_tokens_table(alpha: FloatArray, max_gamma: int) -> FloatArray:
    """E(alpha_i, g) = (1 - alpha^(g+1)) / (1 - alpha) for g = 0..max_gamma (g + 1 at alpha = 1), shape (n, G + 1)."""
    g = np.arange(max_gamma + 1)[None, :]
    a = alpha[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 - a ** (g + 1)) / (1.0 - a)
    return np.where(a >= 1.0, g + 1.0, e)


def simulate_run(
    w: Workload,
    prices: StepPrices,
    policy: ServingPolicy,
    alpha: FloatArray,
    cfg: SchedulerConfig,
    rng: np.random.Generator,
    first_token_s: FloatArray | None = None,
    marks: tuple[tuple[int, int], ...] | None = None,
) -> RunResult:
    """Run the scheduler over the workload ``w`` until every request has finished.

    ``first_token_s`` (a decode server behind separate prefill servers) says the requests arrive
    prefilled: their prompt's KV is in the cache they bring, their first token was emitted at
    that time, and they join the batch without a prefill chunk.

    ``marks`` (windows ``[a, b)`` of request indices) asks for :class:`IdleMarks` in the result: the totals at
    every moment the server stood empty, and the ITL histogram at those before a request inside a window.
    """
    N = w.n
    arr, inp, out = w.arrival_s, w.input_tokens, w.output_tokens
    bs, cap = cfg.block_size, cfg.kv_blocks
    top_g = policy.top_gamma
    if policy.kind == "tree" and (prices.tree_rows is None or prices.tree_tokens != policy.verify_tokens):
        raise SpecroofError(f"these prices hold no table for policy {policy.name}: build them with its tree")
    if policy.kind != "tree" and top_g > prices.max_gamma:
        raise SpecroofError(f"price tables cover gamma <= {prices.max_gamma}; policy {policy.name} needs {top_g}")
    separate = cfg.prefill == "separate"
    if separate:
        if first_token_s is None and int(np.max(inp)) > cfg.max_tokens:
            raise SpecroofError(
                f"prefill='separate' prefills whole prompts: max_tokens ({cfg.max_tokens}) must be >= the longest "
                f"prompt ({int(np.max(inp))})"
            )
        if policy.speculates and prices.draft_prefills and prices.draft_pass is None:
            raise SpecroofError("these prices hold no draft-model prefill: build them with step_prices(..., "
                                "prefill='separate')")  # fmt: skip
    biggest = int(np.max(inp + out)) + top_g + 1
    if -(-biggest // bs) > cap:
        raise SpecroofError(
            f"a request of {biggest} tokens (input + output + drafts) does not fit the KV cache of {cap * bs} tokens"
        )
    # the run of accepted drafts R: floor(log U / log alpha) is geometric with P(R >= j) = alpha^j
    with np.errstate(divide="ignore"):
        log_a = np.where(alpha >= 1.0, -1e-300, np.log(alpha))
    inv_log_a = 1.0 / log_a
    # one alpha for every request (the usual case): each block of draws is turned into a round's tokens at the
    # policy's top gamma, min(R, top) + 1, once; at a smaller gamma g they are min(that, g + 1), no more arithmetic
    same_alpha = _one_alpha(alpha)
    if same_alpha:
        inv0 = float(inv_log_a[0])
        log_u = _LogUniforms(rng, lambda lu: np.minimum(np.floor(lu * inv0), top_g).astype(np.int64) + 1)
    else:
        log_u = _LogUniforms(rng)
    jr = np.arange(max(1, MAX_ROUNDS_AT_ONCE))  # round numbers 0..K-1
    rows_at = jr[:, None]  # and as a column
    cols = np.arange(cfg.max_seqs)
    # every mean context a run prices lies within the price grid (no request holds more than input + output)
    inside_grid = bool(prices.l_grid[0] <= 0 and prices.l_grid[-1] >= biggest - top_g - 1)
    e_table = expected_tokens_table(alpha, top_g)  # E(alpha_i, g): goodput's objective, and a run's length guess

    kv = np.zeros(N, dtype=np.int64)  # tokens whose KV is cached
    # a decoding request holds the KV of its prompt and of every token it emitted but the last: kv = input +
    # emitted - 1, so its tokens still to emit are tot - kv (nothing to update but kv as it decodes)
    tot = inp + out - 1
    tot_l = tot.tolist()  # (scalar reads in Python ints)
    pre_left = inp.copy()  # tokens still to prefill (prompt, or prompt + emitted after a preemption)
    reserve = inp.copy()  # tokens whose blocks are held from admission (the whole prefill)
    first = np.full(N, np.nan)
    finish = np.full(N, np.nan)
    last = np.zeros(N)
    preempted = np.zeros(N, dtype=np.int64)
    itl = _Gaps()
    if first_token_s is not None:
        if np.any(out < 2):
            raise SpecroofError("prefilled requests must still have tokens to decode (output >= 2)")
        pre_left[:] = 0
        kv[:] = inp
        first[:] = first_token_s
        last[:] = first_token_s

    running = np.zeros(0, dtype=np.int64)  # in admission order
    requeued: deque[int] = deque()  # preempted requests, ahead of new arrivals
    nxt = 0  # the next request never admitted (arrival order)
    ids = np.arange(N, dtype=np.int64)
    n_arrived = 0  # requests with arrival <= now
    now, done = 0.0, 0
    busy = batch_s = kv_s = 0.0
    max_kv, max_tokens_seen = 0.0, 0
    rounds = drafted = accepted = 0
    decode_runs = prefill_steps = 0
    sampler = _Sampler(cfg.trace_points)
    dec = pf = running
    pf_blocks = 0
    dirty = True  # the running set or a request's phase changed: split it again
    cold = False  # the server idled since its last step (the next prefill step pays prices.idle_start_s)
    n_pf = 0  # running requests still prefilling

    tree_tokens = policy.verify_tokens
    arr_l = arr.tolist()  # scalar reads of the arrival times, in Python floats
    shrinkable = policy.kind in ("off", "static")
    gamma_at: dict[int, int] = {}  # a policy other than goodput: gamma depends on the batch alone

    def _tokens(draws: npt.NDArray[Any], g: int, dec: IntArray) -> IntArray:
        """Tokens each of the decodes ``dec`` emits in a round drafting ``g`` (one row of draws a round):
        min(R, g) + 1, R the run of accepted drafts."""
        if same_alpha:  # the draws are min(R, top gamma) + 1 already (integers)
            r: IntArray = draws if g == top_g else np.minimum(draws, g + 1)
            return r
        runs = np.floor(draws * inv_log_a[dec])
        np.minimum(runs, g, out=runs)
        runs += 1.0
        return runs.astype(np.int64)

    def choose_gamma(dec: IntArray) -> int:
        b = dec.size
        if b == 0:
            return 0
        if policy.kind != "goodput":
            g = gamma_at.get(b)
            if g is None:
                g = gamma_at[b] = _gamma_for(b)
            return g
        return _goodput_gamma(dec)

    def _gamma_for(b: int) -> int:
        cap_g = cfg.max_tokens // b - 1
        if policy.kind == "tree":  # the whole tree or nothing: a step too small for it decodes plainly
            return policy.top_gamma if b * tree_tokens <= cfg.max_tokens else 0
        return max(0, min(policy.gamma_for(b), cap_g))

    def _goodput_gamma(dec: IntArray) -> int:
        b = dec.size
        top = max(0, min(top_g, cfg.max_tokens // b - 1))
        mean_ctx = float(kv[dec].sum()) / b
        e = e_table[dec, : top + 1].sum(axis=0)
        t = np.array([prices.decode_seconds(g, b, mean_ctx) for g in range(top + 1)])
        return int(np.argmax(e / t))

    mark_at: list[int] = []
    mark_totals: list[tuple[float, ...]] = []
    mark_kv: list[float] = []
    mark_tokens: list[int] = []
    mark_itl: dict[int, npt.NDArray[np.int64]] = {}

    while done < N:
        if n_arrived < N and arr_l[n_arrived] <= now:
            n_arrived = bisect.bisect_right(arr_l, now)
        if running.size == 0 and not requeued and nxt >= n_arrived:
            if marks is not None:  # the server stands empty: a moment the run can be spliced at
                mark_at.append(nxt)
                mark_totals.append(
                    (busy, batch_s, kv_s, rounds, drafted, accepted, decode_runs, prefill_steps)
                )  # fmt: skip
                mark_kv.append(max_kv)  # the maxima over the stretch since the last mark, which start again
                mark_tokens.append(max_tokens_seen)
                max_kv, max_tokens_seen = 0.0, 0
                if any(a <= nxt < b for a, b in marks):
                    mark_itl[nxt] = itl.counts().copy()
            now = max(now, arr_l[nxt])  # idle until the next arrival
            cold = True  # the next step starts after a wait
            continue
        if dirty:
            if n_pf:
                prefilling = pre_left[running] > 0
                dec, pf = running[~prefilling], running[prefilling]
                pf_blocks = _blocks(reserve[pf], bs - 1, bs)
            else:  # nobody prefilling (light load, most steps): every running request decodes
                dec, pf, pf_blocks = running, running[:0], 0
            dirty = False
        g = choose_gamma(dec)
        key, width = (TREE, tree_tokens) if g and tree_tokens else (g, g + 1)  # price key, verify tokens per request
        kvd = kv[dec]  # (unchanged until the step is priced: admissions and preemptions leave dec's kv alone)
        kvd_l: list[int] = kvd.tolist() if dec.size <= SMALL_BATCH else []
        need = _held(kvd, kvd_l, width - 1 + bs, bs) + pf_blocks
        while need > cap:  # preempt the latest admitted request (recompute) until the step fits
            v = int(running[-1])
            running = running[:-1]
            n_pf -= int(pre_left[v] > 0)
            if pre_left[v] == 0:  # decoding: it prefills its prompt and the tokens it emitted again
                reserve[v] = kv[v] + 1
            kv[v] = 0
            pre_left[v] = reserve[v]
            preempted[v] += 1
            requeued.appendleft(v)
            prefilling = pre_left[running] > 0
            dec, pf = running[~prefilling], running[prefilling]
            pf_blocks = int(((reserve[pf] + (bs - 1)) // bs).sum())
            g = choose_gamma(dec)
            key, width = (TREE, tree_tokens) if g and tree_tokens else (g, g + 1)
            kvd = kv[dec]
            kvd_l = kvd.tolist() if dec.size <= SMALL_BATCH else []
            need = _held(kvd, kvd_l, width - 1 + bs, bs) + pf_blocks
        B = int(dec.size)
        # a separate prefill pass has the whole token budget; a fused one shares it with the decodes
        budget = cfg.max_tokens if separate else cfg.max_tokens - B * width
        chunk_idx: list[int] = []
        chunk_len: list[int] = []
        for i in pf.tolist():
            if budget <= 0:
                break
            c = min(int(pre_left[i]), budget)
            chunk_idx.append(i)
            chunk_len.append(c)
            budget -= c
        free = cap - need
        seats = cfg.max_seqs - running.size
        admitted: list[int] = []
        nxt0, rejoined = nxt, False
        while budget > 0 and seats > 0:
            if requeued:
                cand = requeued[0]
            elif nxt < n_arrived:
                cand = nxt
            else:
                break
            blocks = (int(reserve[cand]) + bs - 1) // bs
            if blocks > free:
                break  # first come, first served: nobody passes the head of the queue
            todo = int(pre_left[cand])
            if separate and todo > budget and chunk_idx:
                # whole prompts only: it waits for the next step (alone in a pass it goes whatever its length: a
                # preempted request's prompt and emitted tokens may exceed the budget)
                break
            if requeued:
                requeued.popleft()
                rejoined = True
            else:
                nxt += 1
            free -= blocks
            seats -= 1
            admitted.append(cand)
            if todo == 0:  # it arrives prefilled: it decodes from the next step
                continue
            n_pf += 1
            c = todo if separate else min(todo, budget)
            chunk_idx.append(cand)
            chunk_len.append(c)
            budget -= c
        if admitted:
            # (new arrivals alone are the next ids in order: a slice, not a list to convert)
            running = np.concatenate((running, np.asarray(admitted, dtype=np.int64) if rejoined else ids[nxt0:nxt]))
            dirty = True
            if not chunk_idx:
                continue  # only prefilled newcomers: plan the step again with them decoding
        b_run = int(running.size)

        if not chunk_idx:
            # ---- decode rounds only and nobody can join: advance K rounds at once. With nobody waiting and a
            # gamma that does not depend on the batch, requests that finish simply leave the batch within the run
            decode_runs += 1
            cold = False
            rem: Any
            if kvd_l:  # a few requests: their tokens left in Python ints
                dec_l = dec.tolist()
                rem = rem_l = [tot_l[i] - x for i, x in zip(dec_l, kvd_l, strict=True)]
            else:
                rem = tot[dec] - kvd
                rem_l = rem.tolist()
            small = B <= SMALL_BATCH  # per-request bookkeeping in Python lists (integers: the same numbers)
            s_kv = sum(kvd_l) if small else int(kvd.sum())
            queue = bool(requeued) or nxt < n_arrived
            shrink = shrinkable and not queue
            rmax = max(rem_l)
            rmin = rmax if shrink else min(rem_l)  # (in a shrinking run the first to finish does not end it)
            horizon = rmax if shrink else rmin  # rounds by which every request (or the first) must have finished
            if nxt < N and not queue:
                t0 = prices.decode_seconds(key, B, float(s_kv) / B)
                horizon = min(horizon, int((arr_l[nxt] - now) / t0) + 2)  # rounds until the next arrival
            fin_round: IntArray | None = None
            listed = False  # each request's tokens over the run's rounds are in cum_l
            # plain rounds of a handful of requests: every request emits one token a round, so its context, the
            # batch and the blocks held in each round have closed forms over the rounds alone (no (rounds x
            # requests) arrays; integers, so the same numbers)
            closed = g == 0 and small and B <= CLOSED_FORM_BATCH
            if g == 0:
                K = max(1, min(MAX_ROUNDS_AT_ONCE, horizon))
                fin_l = [r - 1 for r in rem_l]  # round in which each request emits its last token
                before = rows_at[:K]  # tokens emitted before each round: one a round
            else:
                # long enough for the request nearest its end to finish, most of the time (else the next
                # iteration carries on)
                guess = horizon if shrink else int(1.5 * rmin / e_table[int(dec[rem_l.index(rmin)]), g]) + 4
                K = max(1, min(MAX_ROUNDS_AT_ONCE, rmax if shrink else rmin, guess))
                if policy.kind == "goodput":
                    K = min(K, GOODPUT_REVISIT_ROUNDS)
                step = _tokens(log_u.take(K * B).reshape(K, B), g, dec)
                cum = np.add.accumulate(step, axis=0)  # (cumsum's own loop)
                before = cum - step
                # tokens grow every round: the round that finishes a request is the number of rounds before it
                # that leave it short (K when none does)
                if B <= CLOSED_FORM_BATCH and K * B <= PY_CELLS:  # a few numbers: each request's tokens, searched
                    cum_l = cum.T.tolist()
                    listed = True
                    fin_l = [bisect.bisect_left(c, r) for c, r in zip(cum_l, rem_l, strict=True)]
                else:
                    fin_round = (cum < rem).sum(axis=0)
                    fin_l = fin_round.tolist()
            # requests leave within the run: mask them out of the rounds after their last (unmasked, every
            # request decodes in every round, its context only grows, and so do the blocks held)
            k = min(K, max(fin_l) + 1) if shrink else min(K, min(fin_l) + 1)
            masked = shrink and min(fin_l) < k - 1  # somebody finishes before the last round
            if closed:
                if masked:
                    # b_j = requests with fin >= j; ctx_j = their kv plus j each: the kv of those finished before
                    # round j, taken off (finish rounds in order, their kv summed as they come)
                    order = sorted(range(B), key=fin_l.__getitem__)
                    gone = [0]
                    for p in order:
                        gone.append(gone[-1] + kvd_l[p])
                    n_gone = np.asarray([fin_l[p] for p in order]).searchsorted(jr[:k], side="left")
                    b_j = B - n_gone
                    ctx_j = (s_kv - np.asarray(gone)[n_gone]) + b_j * jr[:k]
            elif shrink or masked:
                base = kvd + before[:k]  # each request's cached context in each round
                if masked:
                    if fin_round is None:
                        fin_round = np.asarray(fin_l, dtype=np.int64)
                    active = rows_at[:k] <= fin_round  # (k, B): still decoding in round j
                    b_j = active.sum(axis=1)
                    ctx_j = (active * base).sum(axis=1)
            else:
                base = kvd + before[:k]
            if masked:
                t = prices.decode_time_batches(key, b_j, ctx_j / b_j, max_batch=B, inside=inside_grid)
            else:
                # one batch size throughout; the contexts' sums are integers, exact either way
                ctx_j = float(s_kv) + B * jr[:k] if g == 0 else base.sum(axis=1)
                t = prices.decode_time(key, B, ctx_j / B)
            ends = np.add.accumulate(t)  # (cumsum's own loop)
            ends += now
            if nxt < N and not queue and (shrink or (seats > 0 and budget > 0)):
                # the next arrival joins at the first step that starts after it
                k = min(k, max(1, int((ends - t).searchsorted(arr_l[nxt], side="left"))))

            # blocks each round holds: every decoding request's kv + gamma + 1 tokens, and the prefills' reserve
            if closed:
                # (kv + j + bs) // bs over rounds j <= the request's last: its whole blocks at round 0, one more
                # at every round where it crosses a block boundary, all of them gone after its last round
                km1 = k - 1
                steps = [0] * k
                steps[0] = pf_blocks
                for x, f in zip(kvd_l, fin_l, strict=True):
                    q, r = divmod(x + bs, bs)
                    steps[0] += q
                    end_j = f if f < km1 else km1
                    for j in range(bs - r, end_j + 1, bs):
                        steps[j] += 1
                    if end_j < km1:
                        steps[end_j + 1] -= (x + end_j + bs) // bs
                held_l = list(accumulate(steps))
                held_max = max(held_l) if masked else held_l[km1]
                if held_max > cap:
                    # stop before the first round that would need a preemption
                    k = max(1, next(j for j, h in enumerate(held_l) if h > cap))
                    del held_l[k:]
                    held_max = max(held_l)
                held = np.fromiter(held_l, np.int64, k)
            else:
                held_i = (base[:k] + (width - 1 + bs)) // bs
                if masked:
                    held_i *= active[:k]
                held = held_i.sum(axis=1)
                if pf_blocks:
                    held += pf_blocks
                held_max = int(held.max()) if masked else int(held[k - 1])
                if held_max > cap:
                    k = max(1, int((held > cap).argmax()))  # stop before the first round that would need a preemption
                    held = held[:k]
                    held_max = int(held.max()) if masked else int(held[k - 1])
            km1 = k - 1
            # request-rounds: request i decodes in rounds 0..min(fin_i, k - 1) of the run
            if small:
                n_rounds = sum([f if f < km1 else km1 for f in fin_l]) + B
            else:
                n_rounds = int(np.minimum(fin_round if fin_round is not None else np.asarray(fin_l), km1).sum()) + B
            emitted: Any
            if kvd_l and g == 0:
                emitted = [k if k < r else r for r in rem_l]
            elif listed:
                emitted = [c[km1] if c[km1] < r else r for c, r in zip(cum_l, rem_l, strict=True)]
            else:
                emitted = np.minimum(k, rem) if g == 0 else np.minimum(cum[km1], rem)
            kv[dec] = kvd + emitted
            itl.add_ones(ends[0] - last[dec])
            tk = t[:k]
            end = float(ends[km1])
            if k > 1:
                itl.add(t[1:k], b_j[1:k] if masked else B)
            # every request still decoding emitted its last token of the run when the run ended; a finisher's
            # last token time is its finish, and it leaves
            last[dec] = end
            span = end - now
            busy += span
            batch_s += float(np.add.reduce((b_j[:k] if masked else B) * tk)) + (b_run - B) * span
            kv_s += float(np.add.reduce(held * tk))
            max_kv = max(max_kv, held_max / cap)
            max_tokens_seen = max(max_tokens_seen, B * width)
            rounds += n_rounds
            if g:
                drafted += n_rounds * g
                # accepted drafts of request i over its rounds 0..last_round[i]: its tokens, less one per round
                if listed:
                    accepted += sum([c[f if f < km1 else km1] for c, f in zip(cum_l, fin_l, strict=True)]) - n_rounds
                else:
                    assert fin_round is not None  # (searched with numpy when not listed)
                    last_round = np.minimum(fin_round, km1)
                    accepted += _isum(cum[last_round, cols[:B]]) - n_rounds
            sampler.add(now, b_run, need / cap)
            if small:
                fin = []
                for i, f in zip(dec_l, fin_l, strict=True):
                    if f < k:
                        finish[i] = ends[f]
                        fin.append(i)
            else:
                fr = fin_round if fin_round is not None else np.asarray(fin_l, dtype=np.int64)
                done_now = fr < k
                fin = dec[done_now]
                if fin.size:
                    finish[fin] = ends[fr[done_now]]
            now = end
        else:
            # ---- one step with prefill chunks (and any decodes)
            prefill_steps += 1
            n_pre = sum(chunk_len)
            pre_ctx = float(kv[chunk_idx[0]]) if len(chunk_idx) == 1 else float(sum(int(kv[i]) for i in chunk_idx))
            dec_ctx = float(sum(kvd_l) if B <= SMALL_BATCH else int(kvd.sum()))
            if separate:
                t_round = prices.decode_seconds(key, B, dec_ctx / B) if B else 0.0
                t_step = t_round + prices.prefill_time(len(chunk_idx), n_pre, pre_ctx, draft=policy.speculates)
            else:
                t_step = prices.step_time(key, B, dec_ctx, n_pre, len(chunk_idx), pre_ctx)
            if cold:  # the first step after the server idled: the engine's cold start
                cold = False
                if prices.idle_start_s:
                    t_step += prices.idle_start_s
            end = now + t_step
            t_dec_end = now + t_round if separate else end  # when the decodes' tokens arrive
            fin_list: list[int] = []
            if kvd_l and B <= CLOSED_FORM_BATCH:  # a few decodes: tokens left, emitted, who finishes in Python lists
                dec_l = dec.tolist()
                rem_l = [tot_l[i] - x for i, x in zip(dec_l, kvd_l, strict=True)]
                if g == 0:  # every running decode has a token left to emit: one each
                    kv[dec] = kvd + 1
                    fin_list = [i for i, r in zip(dec_l, rem_l, strict=True) if r <= 1]
                else:
                    drawn = _tokens(log_u.take(B), g, dec).tolist()
                    e1_l = [d if d < r else r for d, r in zip(drawn, rem_l, strict=True)]
                    drafted += B * g
                    accepted += sum(e1_l) - B
                    kv[dec] = kvd + e1_l
                    fin_list = [i for i, r, e in zip(dec_l, rem_l, e1_l, strict=True) if r <= e]
                itl.add_ones(t_dec_end - last[dec])
                last[dec] = t_dec_end
                rounds += B
                if fin_list:
                    finish[fin_list] = t_dec_end
            elif B:
                rem = tot[dec] - kvd
                if g == 0:
                    e1 = 1  # every running decode has a token left to emit
                else:
                    e1 = np.minimum(_tokens(log_u.take(B), g, dec), rem)
                    drafted += B * g
                    accepted += _isum(e1) - B
                kv[dec] = kvd + e1
                itl.add_ones(t_dec_end - last[dec])
                last[dec] = t_dec_end
                rounds += B
                fin_dec = dec[rem <= e1]
                if fin_dec.size:
                    finish[fin_dec] = t_dec_end
                    fin_list.extend(fin_dec.tolist())
            # the chunks: a handful of requests, cheaper one by one than as arrays
            for i, c in zip(chunk_idx, chunk_len, strict=True):
                left = int(pre_left[i]) - c
                pre_left[i] = left
                kv_i = int(kv[i]) + c
                kv[i] = kv_i
                if left == 0:  # its prefill is done: this step emits its next token
                    dirty = True
                    n_pf -= 1
                    if math.isnan(first[i]):
                        first[i] = end
                    else:
                        itl.add_ones(np.array([end - last[i]]))
                    last[i] = end
                    if kv_i >= tot_l[i]:  # its first token (after a preemption: its next) was its last
                        finish[i] = end
                        fin_list.append(i)
            used = cap - free  # the decodes' and prefills' blocks and the newcomers' whole prompts
            busy += t_step
            batch_s += b_run * t_step
            kv_s += used * t_step
            max_kv = max(max_kv, used / cap)
            max_tokens_seen = max(max_tokens_seen, max(B * width, n_pre) if separate else B * width + n_pre)
            sampler.add(now, b_run, used / cap)
            fin = fin_list  # every finisher's time is set: the decodes' at their round's end, the others' at the step's
            now = end
        if len(fin):
            done += len(fin)
            running = running[np.isnan(finish[running])]
            dirty = True

    first = np.where(np.isnan(first), finish, first)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    requests = pd.DataFrame(
        {
            "request": np.arange(N),
            "arrival_s": arr,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - arr,
            "tpot_s": tpot,
            "e2e_s": finish - arr,
            "input_tokens": inp,
            "output_tokens": out,
            "alpha": alpha,
            "preemptions": preempted,
        }
    )
    if not math.isfinite(float(np.max(finish))) or np.any(kv != tot):
        # invariants, not input errors: every request finishes, having emitted exactly its output
        raise AssertionError("serving simulation ended with unfinished or overrun requests")
    idle = None
    if marks is not None:
        idle = IdleMarks(
            np.asarray(mark_at, dtype=np.int64),
            np.asarray(mark_totals, dtype=float).reshape(len(mark_at), len(MARK_TOTALS)),
            np.asarray(mark_kv),
            np.asarray(mark_tokens, dtype=np.int64),
            mark_itl,
            max_kv,
            max_tokens_seen,
        )
        max_kv = max([max_kv, *mark_kv])  # (the maxima started again at every mark)
        max_tokens_seen = max([max_tokens_seen, *mark_tokens])
    return RunResult(
        requests,
        itl.counts(),
        busy,
        batch_s,
        kv_s,
        cap,
        max_kv,
        max_tokens_seen,
        rounds,
        drafted,
        accepted,
        sampler.trace(),
        decode_runs,
        prefill_steps,
        idle,
    )
