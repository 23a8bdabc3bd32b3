"""Real continuous batching on this device: requests join and leave a batch of KV slots as they arrive and finish.

The engine the serving simulator (:mod:`roofline.serving`) models, run for real on the
harness's model (:class:`measure.models.Transformer`) with its static batched KV cache:

* the cache has ``slots`` rows (the most running sequences: vLLM's ``max_num_seqs``);
* a request arrives at its trace time (wall clock), waits first come first served for a
  free slot, and is prefilled there in one pass of its whole prompt (no chunking), which
  emits its first token;
* the running requests decode together in ragged batches: a plain step (one token each)
  or a speculative round (a chain of ``gamma`` drafts, or a draft tree, verified in one
  pass; each sequence keeps its own accepted prefix), with the rules of
  :mod:`measure.decode`;
* a request leaves its slot in the round that gives it its output length (a round that
  overshoots is cut there, as the simulator cuts it).

Every iteration of the one scheduler loop admits the arrivals that find a slot, runs one
decode round of the requests already running, then prefills the newcomers, who start
decoding in the next iteration: the simulator's step, with prefill as its own pass after
the decodes. Running sequences stay packed in the first rows of the cache (the model's
passes run over rows ``0 .. B - 1``): when one finishes, the last row's KV moves into
its slot, so a batch never carries a finished sequence.

With a runner attached to the models (:func:`measure.graphs.attach`, ``measure serve`` on a GPU), every decode
round's passes, the draft's chain whole, replay as CUDA graphs at the padded batch (the rows past the running ones
are free slots, so the padding writes nothing a live request reads); prefills run eagerly.

Times come from ``time.perf_counter`` (the device is synchronised after every pass);
``serve`` returns one tidy row per request (``arrival_s``, ``first_token_s``,
``finish_s``, ``ttft_s``, ``tpot_s``, ``e2e_s``) with its generated token ids, and one
row per iteration.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from measure.decode import (
    DraftModelDrafter,
    _accept,
    _commit,
    _Decoding,
    _draft,
    _probs,
    _sample,
    _TreeShape,
    _verify,
    as_drafter,
    precapture_run,
)
from measure.models import KVCache, Transformer
from measure.timing import synchronize
from roofline.core.errors import SpecroofError
from roofline.serving.policies import ServingPolicy, parse_policy
from roofline.speculation.gamma_policies import StaticGamma
from roofline.speculation.verification import SamplingParams

#: the policies the engine runs (the simulator's names): plain steps, a static chain, a static tree
ENGINE_POLICIES = ("off", "static", "tree")


@dataclass(frozen=True)
class ServeResult:
    """One replay: ``requests`` (one row per request, trace order), ``steps`` (one row per loop iteration),
    each request's generated ``tokens``, and the policy it ran."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    tokens: list[list[int]]
    policy: str
    slots: int
    #: graphs captured before the first arrival (every padded batch and bucket the replay can reach) and the
    #: seconds that took: before the clock starts, so no TTFT or TPOT holds a capture
    captures: int = 0
    capture_s: float = 0.0

    @property
    def duration_s(self) -> float:
        q = self.requests
        return float(q["finish_s"].max() - q["arrival_s"].min())

    @property
    def mean_tokens_per_round(self) -> float:
        """Tokens a speculative round gave a sequence before any cut at its output length (NaN: no rounds)."""
        s = self.steps
        rounds = float(s["decode_batch"][s["gamma"] > 0].sum())
        return float(s["round_tokens"].sum()) / rounds if rounds else float("nan")


class _Rows(KVCache):
    """Rows ``lo .. lo + n - 1`` of a cache as a cache of their own (views: writes land in the full buffers)."""

    def __init__(self, cache: KVCache, lo: int, n: int) -> None:  # no super().__init__: nothing is allocated
        self.k = [t[lo : lo + n] for t in cache.k]
        self.v = [t[lo : lo + n] for t in cache.v]
        self.lengths = np.zeros(n, dtype=np.int64)
        self.max_batch, self.max_seq = n, cache.max_seq


def _prefill_rows(model: Transformer, lo: int, prompts: list[list[int]]) -> torch.Tensor:
    """One pass of every prompt (right-padded) in cache rows ``lo ..``: the logits after each prompt's last token."""
    cache = model.cache
    assert cache is not None
    n = len(prompts)
    lens = np.array([len(p) for p in prompts], dtype=np.int64)
    padded = torch.zeros(n, int(lens.max()), dtype=torch.long, device=model.device)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = torch.as_tensor(p)
    model.cache = _Rows(cache, lo, n)
    try:
        with model.eager():  # a prefill: a shape per prompt length, and these rows' views, not the graphs' cache
            logits = model(padded)
    finally:
        model.cache = cache
    cache.lengths[lo : lo + n] = lens  # the pad slots beyond each length are stale and masked
    return logits[torch.arange(n, device=model.device), torch.as_tensor(lens - 1, device=model.device)]


def _move_row(cache: KVCache, src: int, dst: int, upto: int) -> None:
    """Copy row ``src``'s first ``upto`` cached tokens (every layer) into row ``dst``."""
    upto = min(upto, cache.max_seq)
    for buf in (*cache.k, *cache.v):
        buf[dst, :, :upto] = buf[src, :, :upto]
    cache.lengths[dst] = cache.lengths[src]


def engine_policy(policy: str | ServingPolicy) -> ServingPolicy:
    """The simulator's policy object for ``off``, ``static:G`` or ``tree:NAME`` (what the engine runs)."""
    pol = parse_policy(policy)
    if pol.kind not in ENGINE_POLICIES:
        raise SpecroofError(
            f"measure serve runs the policies off, static:G and tree:NAME (got {pol.name}): a schedule that turns "
            "drafting off between rounds leaves a draft model's cache behind"
        )
    return pol


def serve(
    target: Transformer,
    prompts: Sequence[Sequence[int]],
    arrival_s: Sequence[float],
    output_tokens: Sequence[int],
    *,
    policy: str | ServingPolicy = "off",
    drafter: Any = None,
    slots: int = 4,
    sampling: SamplingParams | None = None,
    seed: int = 0,
    tree_variant: str = "sequoia",
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    on_step: Callable[[int], None] | None = None,
) -> ServeResult:
    """Replay requests (prompts, arrival times in seconds from the start, output lengths) through continuous batching.

    ``policy``: ``off`` (plain steps), ``static:G`` (a chain of G drafts every round) or
    ``tree:NAME`` (a preset draft tree, :data:`roofline.speculation.drafters.TREE_PRESETS`); ``drafter``:
    a draft :class:`Transformer` or an early-exit layer count (:func:`measure.decode.as_drafter`).
    ``slots``: KV rows, the most requests decoding at once. ``clock`` and ``sleep`` are the
    wall clock and the wait for the next arrival when nothing runs (a test may give a fake
    clock). ``on_step(finished)`` is called after every iteration (a progress bar).
    """
    pol = engine_policy(policy)
    sp = sampling or SamplingParams(temperature=0.0)
    N = len(prompts)
    arr = np.asarray(arrival_s, dtype=float)
    out = np.asarray(output_tokens, dtype=np.int64)
    if N == 0:
        raise SpecroofError("serve needs at least one request")
    if arr.shape != (N,) or out.shape != (N,):
        raise SpecroofError(f"arrival_s and output_tokens need one entry per prompt ({N})")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(np.diff(arr) < 0):
        raise SpecroofError("arrival_s must be finite, >= 0 and sorted")
    if np.any(out < 1):
        raise SpecroofError("output_tokens must be >= 1 per request")
    if any(len(p) < 1 for p in prompts):
        raise SpecroofError("every prompt needs at least 1 token")
    if not (isinstance(slots, (int, np.integer)) and slots >= 1):
        raise SpecroofError(f"slots must be a whole number >= 1 (got {slots!r})")
    if tree_variant not in ("sequoia", "specinfer"):
        raise SpecroofError(f"tree_variant must be 'sequoia' or 'specinfer' (got {tree_variant!r})")
    shape = _TreeShape.of(pol.tree.breadth_first()) if pol.tree is not None else None
    d: Any = None
    if pol.speculates:
        if drafter is None:
            raise SpecroofError(f"policy {pol.name} speculates: give a drafter (a draft model or early-exit layers)")
        d = as_drafter(drafter, target)
        if not isinstance(d, DraftModelDrafter) and not hasattr(d, "propose_tree"):
            raise SpecroofError("measure serve drafts with a draft model or early exit (their state is a KV cache)")
    n_draft = shape.tree.n_nodes if shape is not None else pol.top_gamma
    # a round may overshoot a request's output by a full draft, and the draft runs that many slots ahead
    max_seq = int(max(len(p) for p in prompts) + out.max()) + 2 * n_draft + 4
    target.setup_cache(int(slots), max_seq)
    dmodel = d.model if isinstance(d, DraftModelDrafter) else None
    if dmodel is not None:
        dmodel.setup_cache(int(slots), max_seq)
    dev = target.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    chain = StaticGamma(pol.gamma) if pol.kind == "static" else None
    # every padded batch and context bucket continuous batching can reach, captured before the first arrival: a
    # row's committed tokens run from its prompt and first token to its prompt, its output and a round's overshoot
    reach = shape.tree.depth if shape is not None else pol.top_gamma
    hi = int(max(len(p) for p in prompts) + out.max()) + reach
    cap = precapture_run(
        target, d, range(1, int(slots) + 1), min(len(p) for p in prompts) + 1, hi, chain,
        shape.tree if shape is not None else None, sp, tree_variant,
    )  # fmt: skip

    # per row of the cache (rows 0 .. B - 1 are the running requests, packed)
    pending = torch.zeros(slots, dtype=torch.long, device=dev)
    prev = torch.zeros(slots, dtype=torch.long, device=dev)
    committed = np.zeros(slots, dtype=np.int64)  # prompt + emitted; the cache holds all but the pending token
    rid = np.full(slots, -1, dtype=np.int64)
    tokens: list[list[int]] = [[] for _ in range(N)]
    first = np.full(N, np.nan)
    finish = np.full(N, np.nan)
    admitted_s = np.full(N, np.nan)
    # per request: speculative rounds it decoded in, drafts it accepted (before any cut at its output length), and
    # rounds that ended in a rejection: a Beta-geometric acceptance model's sufficient statistics (serve_check)
    spec_rounds = np.zeros(N, dtype=np.int64)
    accepted = np.zeros(N, dtype=np.int64)
    rejected_rounds = np.zeros(N, dtype=np.int64)
    queue: deque[int] = deque()
    steps: list[dict[str, Any]] = []
    B = nxt = done = 0
    t0 = clock()
    with torch.inference_mode():
        while done < N:
            now = clock() - t0
            while nxt < N and arr[nxt] <= now:
                queue.append(nxt)
                nxt += 1
            if B == 0 and not queue:
                sleep(max(0.0, float(arr[nxt]) - now))  # idle until the next arrival
                continue
            join = [queue.popleft() for _ in range(min(len(queue), slots - B))]
            start = now  # the iteration starts when it reads the arrivals
            b_dec = B
            ctx = int(committed[:B].sum()) - B  # cached tokens of the decoding rows (the simulator's context)
            g, round_tokens, finished = 0, 0, []
            if B:
                if pol.speculates:
                    st = _Decoding(
                        pending=pending[:B].clone(),
                        prev=prev[:B].clone(),
                        committed=committed[:B].copy(),
                        emitted=[[] for _ in range(B)],
                        active=np.ones(B, dtype=bool),
                        g_next=pol.gamma,
                    )
                    x, q = _draft(d, st, shape, chain, sp, gen, tree_variant)
                    logits = _verify(target, st, x, shape)
                    res, n_acc = _accept(logits, q, x, st, shape, sp, gen, tree_variant)
                    _commit(target, d, st, x, res, n_acc, shape, 1 << 62, None)
                    pending[:B], prev[:B], committed[:B] = st.pending, st.prev, st.committed
                    new = st.emitted
                    g = int(shape.tree.depth) if shape is not None else int(x.shape[1])
                    round_tokens = int(n_acc.sum()) + B
                    ids = rid[:B]
                    spec_rounds[ids] += 1
                    accepted[ids] += n_acc
                    rejected_rounds[ids] += n_acc < g
                else:
                    logits = target(pending[:B].view(B, 1))[:, -1]
                    target.advance(1)  # rows past B are never read before a prefill sets their length
                    nxt_tok = logits.argmax(-1) if sp.greedy else _sample(_probs(logits, sp), gen)
                    prev[:B] = pending[:B]
                    pending[:B] = nxt_tok
                    committed[:B] += 1
                    new = [[t] for t in nxt_tok.tolist()]
                synchronize(dev)
                t_dec = clock() - t0
                for row in range(B):
                    r = int(rid[row])
                    tokens[r].extend(new[row][: out[r] - len(tokens[r])])
                    if len(tokens[r]) >= out[r]:
                        finish[r] = t_dec
                        finished.append(row)
                for row in sorted(finished, reverse=True):  # the last row fills each hole: rows stay packed
                    last = B - 1
                    if row != last:
                        for m in (target, dmodel):
                            if m is not None and m.cache is not None:
                                _move_row(m.cache, last, row, int(max(m.cache.lengths[last], committed[last])))
                        pending[row], prev[row] = pending[last], prev[last]
                        committed[row], rid[row] = committed[last], rid[last]
                    rid[last] = -1
                    B -= 1
            else:
                t_dec = start
            n_pre = 0
            if join:
                ps = [list(prompts[r]) for r in join]
                m_ = len(join)
                logits = _prefill_rows(target, B, ps)
                first_tok = logits.argmax(-1) if sp.greedy else _sample(_probs(logits, sp), gen)
                if dmodel is not None:
                    _prefill_rows(dmodel, B, ps)
                synchronize(dev)
                t_pre = clock() - t0
                lens = np.array([len(p) for p in ps], dtype=np.int64)
                n_pre = int(lens.sum())
                pending[B : B + m_] = first_tok
                prev[B : B + m_] = torch.as_tensor([p[-1] for p in ps], device=dev)
                committed[B : B + m_] = lens + 1
                rid[B : B + m_] = join
                for j, r in enumerate(join):
                    admitted_s[r] = start
                    first[r] = t_pre
                    tokens[r].append(int(first_tok[j]))
                keep = [j for j, r in enumerate(join) if out[r] > 1]
                for r in join:
                    if out[r] == 1:
                        finish[r] = t_pre
                if len(keep) < m_:  # one-token requests leave at once: pack the rest
                    for k, j in enumerate(keep):
                        if k != j:
                            src, dst = B + j, B + k
                            for m in (target, dmodel):
                                if m is not None and m.cache is not None:
                                    _move_row(m.cache, src, dst, int(committed[src]))
                            pending[dst], prev[dst] = pending[src], prev[src]
                            committed[dst], rid[dst] = committed[src], rid[src]
                B += len(keep)
            else:
                t_pre = t_dec
            done += len(finished) + sum(1 for r in join if out[r] == 1)
            steps.append(
                {
                    "start_s": start,
                    "end_s": t_pre,
                    "decode_batch": b_dec,
                    "decode_context_tokens": ctx,
                    "gamma": g,
                    "round_tokens": round_tokens,
                    "finished": len(finished),
                    "prefills": len(join),
                    "prefill_tokens": n_pre,
                    "t_decode_s": t_dec - start,
                    "t_prefill_s": t_pre - t_dec,
                    "running_after": B,
                    "queued_after": len(queue),
                }
            )
            if on_step is not None:
                on_step(done)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    requests = pd.DataFrame(
        {
            "request": np.arange(N),
            "arrival_s": arr,
            "admitted_s": admitted_s,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - arr,
            "tpot_s": tpot,
            "e2e_s": finish - arr,
            "input_tokens": [len(p) for p in prompts],
            "output_tokens": out,
            "generated_tokens": [len(t) for t in tokens],
            "spec_rounds": spec_rounds,
            "accepted_drafts": accepted,
            "rejected_rounds": rejected_rounds,
        }
    )
    return ServeResult(
        requests, pd.DataFrame(steps), tokens, pol.name, int(slots), int(cap["graphs"]), float(cap["seconds"])
    )
