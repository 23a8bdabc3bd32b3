"""Real batched speculative decoding (chains and draft trees) and the autoregressive baseline.

Both caches (target and draft) hold every committed token except the last one,
which is the pending input of the next pass. A round: the drafter proposes gamma
tokens with their distributions, the target verifies the pending token plus the
gamma drafts in one pass, the torch rules of ``measure.verification`` accept a
prefix per sequence (ragged), and each cache is rolled back to its committed
length. Nothing in a round loops over the sequences in Python, except the
prompt-lookup drafter's n-gram search, which runs on the host by nature.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch

from measure import verification as ts
from measure.models import Transformer
from measure.timing import PassTimer, synchronize
from roofline.core.errors import SpecroofError
from roofline.speculation.gamma_policies import BatchSchedule, GammaPolicy, StaticGamma
from roofline.speculation.speculative import DraftModel, EarlyExit, PromptLookup, SpecMetrics, metrics_from_counts
from roofline.speculation.trees import Tree
from roofline.speculation.verification import SamplingParams


@dataclass
class GenerationResult:
    """Emitted tokens per sequence, timings (s) and, for speculation, per-round statistics."""

    tokens: list[list[int]]
    decode_s: float
    prefill_s: float
    rounds: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: chain length, or the tree's depth: the most drafts one round can accept
    gamma: int = 0
    #: draft tokens proposed per round (gamma for a chain, the node count for a tree)
    drafted: int = 0
    tree: Tree | None = None
    #: seconds of every baseline step (``autoregressive_generate(..., step_times=True)``)
    step_s: list[float] = field(default_factory=list)
    #: the device's seconds of each of those steps' pass (CUDA events; on the CPU the pass's own seconds): a
    #: step's host share is its ``step_s`` less this
    step_device_s: list[float] = field(default_factory=list)
    #: graphs captured before the decoding started (every shape it can reach, :func:`precapture_run`; 0 on the
    #: CPU and where earlier runs captured them) and the seconds that took (neither prefill nor decode time)
    captures: int = 0
    capture_s: float = 0.0

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_s(self) -> float:
        """Emitted tokens over decode time (prefill excluded), all sequences together."""
        return self.n_tokens / self.decode_s if self.decode_s > 0 else float("nan")

    def metrics(self) -> SpecMetrics:
        """vLLM/Spec-Bench metrics over every (round, sequence) that was still running."""
        r = self.rounds
        if r.empty:
            raise SpecroofError("no speculative rounds were recorded")
        per_pos = np.array([(r["accepted"] > i).sum() for i in range(self.gamma)])
        if "drafted" in r and self.tree is None:  # gamma may change from round to round (a policy)
            drafted = int(r["drafted"].sum())
        else:
            drafted = len(r) * (self.drafted or self.gamma)
        return metrics_from_counts(
            len(r), drafted, int(r["accepted"].sum()), int(r["emitted"].sum()), self.gamma, per_pos
        )

    def rank_acceptance(self) -> np.ndarray:
        """Sequoia's vector for a tree run: P(the rank-k sibling is accepted | ranks < k were rejected).

        At every node the walk left, the accepted child's rank k means ranks 0..k
        were tried and k accepted; where it stopped, every child was tried. NaN for a
        rank never tried.
        """
        if self.tree is None or "ranks" not in self.rounds:
            raise SpecroofError("sibling-rank acceptance needs a tree run")
        width = int(np.bincount(self.tree.parents + 1).max())
        tried, accepted = np.zeros(width), np.zeros(width)
        for ranks, stop in zip(self.rounds["ranks"], self.rounds["stop_children"], strict=True):
            for k in ranks:
                tried[: k + 1] += 1
                accepted[k] += 1
            tried[:stop] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return accepted / tried

    def acceptance_curve(self) -> np.ndarray:
        """P(position i accepted | position i - 1 accepted), i = 1..gamma: the per-position curve."""
        a = self.rounds["accepted"].to_numpy()
        if "drafted" in self.rounds and self.tree is None:
            # position i was tried only in rounds that drafted at least i tokens and accepted i - 1
            g = self.rounds["drafted"].to_numpy()
            tried = np.array([((a >= i - 1) & (g >= i)).sum() for i in range(1, self.gamma + 1)], dtype=float)
            hit = np.array([(a >= i).sum() for i in range(1, self.gamma + 1)], dtype=float)
            with np.errstate(invalid="ignore", divide="ignore"):
                return hit / tried
        reach = np.array([(a >= i).sum() for i in range(self.gamma + 1)], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return reach[1:] / reach[:-1]


def _probs(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    return ts.process_logits(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p)


def _sample(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    u = torch.rand(probs.shape[:-1], generator=gen, dtype=torch.float64, device=probs.device)
    return ts.sample_from(probs, u)


def _prepare(model: Transformer, prompts: Sequence[Sequence[int]], extra: int) -> tuple[torch.Tensor, np.ndarray]:
    """Allocate the cache and prefill every prompt but its last token (right-padded, ragged lengths)."""
    if not prompts or any(len(p) < 2 for p in prompts):
        raise SpecroofError("every prompt needs at least 2 tokens")
    lens = np.array([len(p) for p in prompts], dtype=np.int64)
    B = len(prompts)
    model.setup_cache(B, int(lens.max()) + extra + 2)
    padded = torch.zeros(B, int(lens.max()) - 1, dtype=torch.long, device=model.device)
    for b, p in enumerate(prompts):
        padded[b, : len(p) - 1] = torch.as_tensor(p[:-1])
    with torch.inference_mode(), model.eager():  # a prefill: a shape per prompt length, nothing to capture
        model(padded)
    model.cache.rollback(lens - 1)  # type: ignore[union-attr]
    last = torch.as_tensor([p[-1] for p in prompts], device=model.device)
    return last, lens


def autoregressive_generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    sampling: SamplingParams | None = None,
    *,
    eos: int | None = None,
    seed: int = 0,
    step_times: bool = False,
) -> GenerationResult:
    """The baseline: one target step per token for a batch of prompts (ragged lengths).

    ``step_times=True`` records every step's seconds in ``step_s`` (the device is
    synchronised after each step, as a speculative round is by its acceptance) and its
    pass's device seconds in ``step_device_s``.
    """
    sp = sampling or SamplingParams(temperature=0.0)
    gen = torch.Generator(device=model.device).manual_seed(seed)
    t0 = time.perf_counter()
    pending, lens = _prepare(model, prompts, max_new_tokens)
    synchronize(model.device)
    t_cap = time.perf_counter()
    # step i's longest row holds max(lens) + i committed tokens
    cap = precapture_run(model, None, len(prompts), int(lens.max()), int(lens.max()) + max_new_tokens - 1)
    t1 = time.perf_counter()
    B = len(prompts)
    out = torch.zeros(B, max_new_tokens, dtype=torch.long, device=model.device)
    done = torch.zeros(B, dtype=torch.bool, device=model.device)
    steps: list[float] = []
    device_steps: list[float] = []
    timer = PassTimer(model.device)
    # inference_mode, not no_grad: no autograd metadata or version counters per op. Interleaved on an AMD EPYC
    # (AVX2, one thread) a width-64 model's one-token step, per-op host cost alone, took 15% less.
    with torch.inference_mode():
        for i in range(max_new_tokens):
            ts = time.perf_counter()
            if step_times:
                with timer.span("step"):
                    logits = model(pending.view(B, 1))[:, -1]
            else:
                logits = model(pending.view(B, 1))[:, -1]
            model.advance(1)
            nxt = logits.argmax(-1) if sp.greedy else _sample(_probs(logits, sp), gen)
            out[:, i] = nxt
            pending = nxt
            if step_times:
                synchronize(model.device)
                steps.append(time.perf_counter() - ts)
                device_steps.append(timer.read().get("step", 0.0))
            if eos is not None:
                done |= nxt == eos
                if bool(done.all()):
                    out = out[:, : i + 1]
                    break
    synchronize(model.device)
    t2 = time.perf_counter()
    return GenerationResult(
        _trim(out.tolist(), eos, max_new_tokens),
        t2 - t1,
        t_cap - t0,
        step_s=steps,
        step_device_s=device_steps,
        captures=int(cap["graphs"]),
        capture_s=t1 - t_cap if cap["graphs"] else 0.0,
    )


def _trim(rows: list[list[int]], eos: int | None, limit: int) -> list[list[int]]:
    out = []
    for r in rows:
        r = r[:limit]
        if eos is not None and eos in r:
            r = r[: r.index(eos) + 1]
        out.append(r)
    return out


# -- drafters -------------------------------------------------------------------------------


def _draft_steps(
    m: Transformer,
    feed: torch.Tensor,
    gamma: int,
    sp: SamplingParams,
    gen: torch.Generator | None,
    n_layers: int | None = None,
    stop_below: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to gamma autoregressive draft steps from ``feed``: the proposed tokens (B, g) and their q (B, g, V).

    ``stop_below`` (Hugging Face's ``assistant_confidence_threshold``): stop after a step in
    which the draft gave every sequence's token a probability below this; g <= gamma.
    """
    xs, qs = [], []
    with torch.inference_mode():
        for _ in range(gamma):
            logits = m(feed, n_layers=n_layers)[:, -1]
            m.advance(feed.shape[1])
            if sp.greedy:  # the argmax is the token; greedy verification never reads q
                x = logits.argmax(-1)
            else:
                q = _probs(logits, sp)
                x = _sample(q, gen)
                qs.append(q)
            xs.append(x)
            feed = x.view(-1, 1)
            if stop_below is not None:
                conf = torch.softmax(logits.float(), -1).gather(-1, x.view(-1, 1))
                if bool((conf < stop_below).all()):
                    break
    q_all = torch.stack(qs, 1) if qs else torch.empty(0)
    return torch.stack(xs, 1), q_all


def _choose_children(
    dist_logits: torch.Tensor, k: int, sp: SamplingParams, gen: torch.Generator | None, variant: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """k children per row of (R, V) draft logits: the top k (greedy), or k draws from q; returns (tokens, q)."""
    if sp.greedy:
        return dist_logits.topk(k, dim=-1).indices, None
    q = _probs(dist_logits, sp)
    if variant == "specinfer":  # i.i.d. draws with replacement, SpecInfer's multi-step rule
        return torch.multinomial(q.float(), k, replacement=True, generator=gen), q
    # Sequoia: without replacement, by Gumbel top-k over log q
    u = torch.rand(q.shape, generator=gen, dtype=torch.float64, device=q.device).clamp_(1e-300, 1.0)
    keys = torch.log(q) - torch.log(-torch.log(u))
    return keys.topk(k, dim=-1).indices, q


def _draft_tree(
    m: Transformer,
    prefix: torch.Tensor,
    tree: Tree,
    sp: SamplingParams,
    gen: torch.Generator | None,
    variant: str,
    n_layers: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft a breadth-first numbered ``tree`` level by level after ``prefix`` (B, k; its last token is the root).

    Each level is one pass over the prefix and every node drafted so far, tree-masked:
    the model keeps no tree state between levels, and a node's KV lands at the same
    slot in every pass. Returns node tokens (B, n) and q (B, n + 1, V): the draft's
    distribution after the root and after each node (zeros where unsampled or greedy).
    """
    B, k = prefix.shape
    n = tree.n_nodes
    V = m.spec.vocab_size
    toks = torch.zeros(B, n, dtype=torch.long, device=prefix.device)
    q_all = torch.zeros(B, n + 1, V, dtype=torch.float64, device=prefix.device) if not sp.greedy else torch.empty(0)
    parents = tree.parents
    depths = tree.depths
    for d in range(1, tree.depth + 1):
        known = int((depths < d).sum())  # BFS order: the nodes above this level are the first ``known``
        level = np.nonzero(depths == d)[0]
        par = np.unique(parents[level])  # this level's parents (-1 = the root)
        shape = np.concatenate([np.arange(-1, k - 1), np.where(parents[:known] < 0, k - 1, parents[:known] + k)])
        logits = m(torch.cat([prefix, toks[:, :known]], 1), Tree(shape), n_layers=n_layers)
        rows = torch.as_tensor(np.where(par < 0, k - 1, par + k), device=prefix.device)
        width = int(max((parents[level] == p_).sum() for p_ in par))
        kids, q = _choose_children(logits[:, rows].reshape(B * len(par), V), width, sp, gen, variant)
        kids = kids.view(B, len(par), width)
        for j, p_ in enumerate(par.tolist()):  # host loop over this level's parents, not over sequences
            ch = level[parents[level] == p_]
            toks[:, torch.as_tensor(ch, device=prefix.device)] = kids[:, j, : len(ch)]
        if q is not None:
            q_all[:, torch.as_tensor(par + 1, device=prefix.device)] = q.view(B, len(par), V)
    return toks, q_all


class Drafter(Protocol):
    """What speculative decoding needs from a drafter, and the roofline drafter that prices it.

    ``propose`` drafts a chain; drafters that can draft trees also have ``propose_tree``
    and ``commit_tree``. ``observe`` sees the tokens each round emitted (prompt lookup
    extends its history with them). ``cost_model`` returns the
    :mod:`roofline.speculation.speculative` drafter that prices exactly what this one runs.
    """

    name: str

    def start(self, prompts: Sequence[Sequence[int]], extra: int) -> None: ...

    def propose(
        self,
        last2: torch.Tensor,
        committed: np.ndarray,
        gamma: int,
        sp: SamplingParams,
        gen: torch.Generator | None,
        stop_below: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def observe(self, emitted: list[list[int]]) -> None: ...

    def cost_model(self) -> Any: ...


class _ModelDrafter:
    """A drafter that runs a model on a cache: ``keep`` committed tokens are re-fed each round.

    Chains and trees share the rollback and the feed; subclasses say which model, how
    many tokens it re-feeds and how many of its layers run.
    """

    model: Transformer
    keep: int
    n_layers: int | None = None

    def propose(
        self,
        last2: torch.Tensor,
        committed: np.ndarray,
        gamma: int,
        sp: SamplingParams,
        gen: torch.Generator | None,
        stop_below: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.cache.rollback(committed - self.keep)  # type: ignore[union-attr]
        feed = last2[:, 2 - self.keep :]
        runner = self.model.runner
        if runner is not None and stop_below is None:  # the whole chain as one graph (a confidence stop is not static)
            return runner.draft_chain(feed, gamma, sp, gen, self.n_layers)  # type: ignore[no-any-return]
        return _draft_steps(self.model, feed, gamma, sp, gen, n_layers=self.n_layers, stop_below=stop_below)

    def propose_tree(
        self,
        last2: torch.Tensor,
        committed: np.ndarray,
        tree: Tree,
        sp: SamplingParams,
        gen: torch.Generator | None,
        variant: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.cache.rollback(committed - self.keep)  # type: ignore[union-attr]
        prefix = last2[:, 2 - self.keep :]
        runner = self.model.runner
        if runner is not None:  # every level in one graph
            return runner.draft_tree(prefix, tree, sp, gen, variant, self.n_layers)  # type: ignore[no-any-return]
        return _draft_tree(self.model, prefix, tree, sp, gen, variant, n_layers=self.n_layers)

    def observe(self, emitted: list[list[int]]) -> None:
        pass  # a model drafter keeps its state in its KV cache


class DraftModelDrafter(_ModelDrafter):
    """A separate small model with its own cache (re-fed the last two committed tokens each round)."""

    keep = 2

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.name = f"draft {model.spec.name}"

    def start(self, prompts: Sequence[Sequence[int]], extra: int) -> None:
        _prepare(self.model, prompts, extra)

    def cost_model(self) -> Any:
        return cost_model_of(self.model)

    def commit_tree(self, committed: np.ndarray, path: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """Keep the draft KV of the accepted nodes but the last (it is re-fed next round as ``prev``)."""
        cache = self.model.cache
        assert cache is not None
        cache.rollback(committed)
        cache.commit_paths(path, (n_accepted - 1).clamp(min=0))


class EarlyExitDrafter(_ModelDrafter):
    """Self-speculation: the target's first ``layers`` layers plus its norm and head, on the target's cache."""

    keep = 1

    def __init__(self, target: Transformer, layers: int) -> None:
        if not 1 <= layers < target.spec.n_layers:
            raise SpecroofError(f"early-exit layers must lie in [1, {target.spec.n_layers - 1}] (got {layers})")
        self.model, self.n_layers = target, layers
        self.name = f"early exit @{layers}"

    def start(self, prompts: Sequence[Sequence[int]], extra: int) -> None:
        pass  # shares the target's cache

    def cost_model(self) -> Any:
        return cost_model_of(int(self.n_layers or 1))

    def commit_tree(self, committed: np.ndarray, path: torch.Tensor, n_accepted: torch.Tensor) -> None:
        pass  # the target's commit moves the shared cache


class PromptLookupDrafter:
    """n-gram prompt lookup: propose what followed the last match of the latest ``ngram`` tokens."""

    def __init__(self, vocab_size: int, ngram: int = 3) -> None:
        self.vocab, self.ngram = vocab_size, ngram
        self.name = f"prompt lookup n={ngram}"
        self.history: list[list[int]] = []

    def start(self, prompts: Sequence[Sequence[int]], extra: int) -> None:
        self.history = [list(p) for p in prompts]

    def propose(
        self,
        last2: torch.Tensor,
        committed: np.ndarray,
        gamma: int,
        sp: SamplingParams,
        gen: torch.Generator | None,
        stop_below: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        props = []
        for h in self.history:  # host-side search: the only per-sequence loop of a round
            prop: list[int] = []
            for n in range(self.ngram, 0, -1):
                key = h[-n:]
                for start in range(len(h) - n - 1, -1, -1):
                    if h[start : start + n] == key:
                        prop = h[start + n : start + n + gamma]
                        break
                if prop:
                    break
            prop = (prop + [h[-1]] * gamma)[:gamma]
            props.append(prop)
        x = torch.as_tensor(props, device=last2.device)
        # a deterministic proposal has q = one-hot: acceptance is p(x), still lossless
        q = torch.nn.functional.one_hot(x, self.vocab).double()
        return x, q

    def observe(self, emitted: list[list[int]]) -> None:
        for h, e in zip(self.history, emitted, strict=True):
            h.extend(e)

    def cost_model(self) -> Any:
        return cost_model_of("prompt-lookup")


def cost_model_of(drafter: Any) -> Any:
    """The :mod:`roofline.speculation.speculative` drafter that prices what ``drafter`` runs in :func:`speculative_generate`.

    ``drafter`` as that function takes it: a draft :class:`Transformer`, an early-exit
    layer count, ``"prompt-lookup"`` or a :class:`Drafter` (which says itself).
    """
    if isinstance(drafter, Transformer):
        # its first step re-feeds the committed tokens it keeps (as_drafter runs it as a DraftModelDrafter)
        return DraftModel(drafter.spec, first_pass_tokens=DraftModelDrafter.keep)
    if isinstance(drafter, (int, np.integer)) and not isinstance(drafter, bool):
        # this implementation's verify pass recomputes every layer: price exactly that
        return EarlyExit(int(drafter), reuse_kv=False)
    if drafter == "prompt-lookup":
        return PromptLookup()
    if hasattr(drafter, "cost_model"):
        return drafter.cost_model()
    raise SpecroofError(f"no cost model for the drafter {drafter!r}: give it a cost_model() method")


def as_drafter(drafter: Any, target: Transformer) -> Drafter:
    """A :class:`Drafter` from a draft :class:`Transformer`, an early-exit layer count, ``"prompt-lookup"`` or itself."""
    if isinstance(drafter, Transformer):
        if drafter.spec.vocab_size != target.spec.vocab_size:
            raise SpecroofError("draft and target must share a vocabulary")
        return DraftModelDrafter(drafter)
    if isinstance(drafter, (int, np.integer)) and not isinstance(drafter, bool):
        return EarlyExitDrafter(target, int(drafter))
    if drafter == "prompt-lookup":
        return PromptLookupDrafter(target.spec.vocab_size)
    if hasattr(drafter, "propose") and hasattr(drafter, "start"):
        return drafter  # type: ignore[no-any-return]
    raise SpecroofError(
        f"cannot draft with {drafter!r}: give a draft Transformer, an early-exit layer count, 'prompt-lookup' "
        "or a Drafter object"
    )


def speculative_generate(
    target: Transformer,
    drafter: Any,
    prompts: Sequence[Sequence[int]],
    gamma: int | Tree | GammaPolicy,
    max_new_tokens: int,
    sampling: SamplingParams | None = None,
    *,
    eos: int | None = None,
    seed: int = 0,
    tree_variant: str = "sequoia",
) -> GenerationResult:
    """Speculative decoding for a batch, chain or tree: lossless (rejection sampling) or greedy (temperature 0).

    ``gamma``: the chain length, a :class:`roofline.speculation.gamma_policies.GammaPolicy` (the
    length changes from round to round: Hugging Face's heuristic schedule, its
    confidence threshold, a batch-size schedule), or a :class:`roofline.speculation.trees.Tree` (its nodes are the
    draft slots; a node's rank among its siblings is the rank of its token in the
    draft's distribution when greedy, its draw order when sampled). ``drafter``: a
    :class:`Transformer` (a separate draft model), an int (early exit after that many
    target layers), ``"prompt-lookup"`` (chains only), or a drafter object.
    ``tree_variant``: ``"sequoia"`` (siblings drawn without replacement) or
    ``"specinfer"`` (with replacement), each with its own verification rule.
    Returns the tokens and a per-round DataFrame (accepted and emitted per sequence,
    draft / verify / accept / commit seconds, the round's wall seconds ``t_round_s`` and its
    host seconds ``t_host_s``: wall less the draft and verify passes' device time, which
    CUDA events measure on a GPU; for trees also the sibling rank of each accepted node and
    the number of children tried where the walk stopped). With a runner attached to the
    models (:func:`measure.graphs.attach`) every pass, the draft's whole chain and a tree
    draft's levels run as captured graphs (static shapes on the CPU).
    """
    # level by level drafting needs every level's parents first in the buffer (BFS numbering)
    tree = gamma.breadth_first() if isinstance(gamma, Tree) else None
    policy: GammaPolicy | None = gamma if isinstance(gamma, GammaPolicy) else None
    if tree is None and policy is None and (not isinstance(gamma, (int, np.integer)) or gamma < 1):
        raise SpecroofError(f"gamma must be >= 1, a Tree or a GammaPolicy (got {gamma})")
    if policy is None and tree is None:
        policy = StaticGamma(int(gamma))  # type: ignore[arg-type]
    if tree is not None and tree.n_nodes < 1:
        raise SpecroofError("the draft tree needs at least one node")
    if tree_variant not in ("sequoia", "specinfer"):
        raise SpecroofError(f"tree_variant must be 'sequoia' or 'specinfer' (got {tree_variant!r})")
    sp = sampling or SamplingParams(temperature=0.0)
    d: Any = as_drafter(drafter, target)
    if tree is not None and not hasattr(d, "propose_tree"):
        raise SpecroofError(f"the drafter {getattr(d, 'name', d)!r} drafts chains only")
    # the most drafts a round can propose: the tree's nodes, or the policy's longest gamma
    reach = max(1, _policy_reach(policy)) if policy is not None else 0
    n_draft = tree.n_nodes if tree is not None else reach
    dev = target.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    t0 = time.perf_counter()
    # the last round may overshoot by a full draft and the drafts run that many slots ahead
    headroom = max_new_tokens + 2 * n_draft + 4
    pending, lens = _prepare(target, prompts, headroom)
    d.start(prompts, headroom)
    synchronize(dev)
    t_cap = time.perf_counter()
    # a round starts with the longest row's committed tokens in max(lens) .. max(lens) + max_new_tokens + depth
    depth = tree.depth if tree is not None else reach
    hi = int(lens.max()) + max_new_tokens + depth
    cap = precapture_run(target, d, len(prompts), int(lens.max()), hi, policy, tree, sp, tree_variant)
    t1 = time.perf_counter()
    st = _Decoding(
        pending=pending,
        prev=torch.as_tensor([p[-2] for p in prompts], device=dev),
        committed=lens.copy(),
        emitted=[[] for _ in prompts],
        active=np.ones(len(prompts), dtype=bool),
        g_next=policy.start(len(prompts)) if policy is not None else 0,
    )
    shape = _TreeShape.of(tree) if tree is not None else None
    timer = PassTimer(dev)
    with torch.inference_mode():
        while st.active.any():
            # The draft and verify passes are timed on the device (CUDA events; perf_counter on the CPU, where a
            # pass is synchronous) and nothing waits between them: the acceptance reads the accepted counts, the
            # round's one sync. The round's host time is its wall time less its passes' device time.
            ta = time.perf_counter()
            with timer.span("draft"):
                x, q = _draft(d, st, shape, policy, sp, gen, tree_variant)
            with timer.span("verify"):
                logits = _verify(target, st, x, shape)
            tc = time.perf_counter()
            res, n_acc = _accept(logits, q, x, st, shape, sp, gen, tree_variant)
            td = time.perf_counter()
            was_active = _commit(target, d, st, x, res, n_acc, shape, max_new_tokens, eos)
            if policy is not None:
                st.g_next = policy.next(int(x.shape[1]), n_acc[was_active], len(prompts))
            te = time.perf_counter()  # commit includes the host bookkeeping of the round
            dt = timer.read()
            t_dev = dt.get("draft", 0.0) + dt.get("verify", 0.0)
            times = {
                "t_draft_s": dt.get("draft", 0.0),
                "t_verify_s": dt.get("verify", 0.0),
                # on a GPU the acceptance also waits for the passes it reads (host and device overlap there)
                "t_accept_s": td - tc,
                "t_commit_s": te - td,
                "t_round_s": te - ta,
                "t_host_s": max(0.0, te - ta - t_dev),
            }
            _account(st, x, res, n_acc, was_active, times, shape)
    synchronize(dev)
    t2 = time.perf_counter()
    depth = shape.tree.depth if shape is not None else max(st.gammas_used, default=0)
    n_draft = shape.tree.n_nodes if shape is not None else depth
    result_tree = shape.tree if shape is not None else None
    res = GenerationResult(
        _trim(st.emitted, eos, max_new_tokens), t2 - t1, t_cap - t0, pd.DataFrame(st.stats), depth, n_draft, result_tree
    )
    res.captures, res.capture_s = int(cap["graphs"]), (t1 - t_cap if cap["graphs"] else 0.0)
    return res


# -- the steps of a round: draft, verify, accept, commit, account ---------------------------


@dataclass
class _Decoding:
    """What a speculative run carries from round to round (per sequence of the batch)."""

    pending: torch.Tensor  # (B,) the token to feed next: the last emitted one, not yet in the target cache
    prev: torch.Tensor  # (B,) the token before it (a separate draft model re-feeds both)
    committed: np.ndarray  # (B,) tokens in each sequence's target cache (prompt + emitted)
    emitted: list[list[int]]
    active: np.ndarray  # (B,) bool: still generating
    g_next: int  # the chain length the policy asks for next round
    rnd: int = 0
    stats: list[dict[str, Any]] = field(default_factory=list)
    gammas_used: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _TreeShape:
    """A draft tree as the round's steps use it (breadth-first numbering: every level's parents come first)."""

    tree: Tree
    verify_tree: Tree  # the pending token as the root, the draft nodes below it
    parents: list[int]
    n_children: np.ndarray  # children per node, index 0 the root

    @classmethod
    def of(cls, tree: Tree) -> _TreeShape:
        verify_tree = Tree(np.concatenate([[-1], np.where(tree.parents < 0, 0, tree.parents + 1)]))
        return cls(tree, verify_tree, tree.parents.tolist(), np.bincount(tree.parents + 1, minlength=tree.n_nodes + 1))


def _draft(
    d: Any,
    st: _Decoding,
    shape: _TreeShape | None,
    policy: GammaPolicy | None,
    sp: SamplingParams,
    gen: torch.Generator,
    tree_variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The drafter proposes this round's tokens (B, g) or tree nodes (B, n) and their q."""
    last2 = torch.stack([st.prev, st.pending], 1)
    if shape is not None:
        return d.propose_tree(last2, st.committed, shape.tree, sp, gen, tree_variant)  # type: ignore[no-any-return]
    assert policy is not None
    stop = policy.confidence_threshold
    if not st.g_next:
        x, q = _no_drafts(len(st.emitted), st.pending.device)
    elif stop is None:  # drafter objects written before policies take five arguments
        x, q = d.propose(last2, st.committed, st.g_next, sp, gen)
    else:
        x, q = d.propose(last2, st.committed, st.g_next, sp, gen, stop)
    st.gammas_used.append(int(x.shape[1]))
    return x, q


def _verify(target: Transformer, st: _Decoding, x: torch.Tensor, shape: _TreeShape | None) -> torch.Tensor:
    """One target pass over the pending token and the drafts (tree-masked for a tree): the logits."""
    target.cache.rollback(st.committed - 1)  # type: ignore[union-attr]
    feed = torch.cat([st.pending.view(-1, 1), x], 1)
    return target(feed, shape.verify_tree if shape is not None else None)


def _accept(
    logits: torch.Tensor,
    q: torch.Tensor,
    x: torch.Tensor,
    st: _Decoding,
    shape: _TreeShape | None,
    sp: SamplingParams,
    gen: torch.Generator,
    tree_variant: str,
) -> tuple[Any, np.ndarray]:
    """The acceptance rule: how many drafts each sequence keeps, and its correction or bonus token."""
    if shape is not None:
        if sp.greedy:
            res: Any = ts.verify_tree_greedy(logits.argmax(-1), shape.parents, x)
        else:
            res = ts.verify_tree(_probs(logits, sp), q, shape.parents, x, variant=tree_variant, generator=gen)
    elif sp.greedy:  # argmax of the logits: no distributions needed
        res = ts.verify_greedy(logits, x)
    else:
        res = ts.verify_chain(_probs(logits, sp), q, x, generator=gen, validate=False)
    # finished sequences still ride along in the batch but stay frozen
    n_acc = np.where(st.active, res.n_accepted.cpu().numpy(), 0)
    return res, n_acc


def _commit(
    target: Transformer,
    d: Any,
    st: _Decoding,
    x: torch.Tensor,
    res: Any,
    n_acc: np.ndarray,
    shape: _TreeShape | None,
    max_new_tokens: int,
    eos: int | None,
) -> np.ndarray:
    """The pending token and the accepted drafts enter the target cache; emitted tokens are recorded.

    Returns the indices of the sequences that were active this round.
    """
    B, dev = len(st.emitted), st.pending.device
    idx = torch.as_tensor(n_acc, device=dev)
    cache = target.cache
    assert cache is not None
    if shape is None:
        cache.rollback(st.committed + n_acc)
        if x.shape[1] == 0:  # a round without drafts: the pending token is the last committed one
            new_prev = st.pending
        else:
            new_prev = torch.where(idx > 0, x.gather(1, (idx - 1).clamp(min=0).view(B, 1)).view(B), st.pending)
    else:
        cache.rollback(st.committed)
        cache.commit_paths(res.path, idx)
        d.commit_tree(st.committed, res.path, idx)
        last_node = res.path.gather(1, (idx - 1).clamp(min=0).view(B, 1)).view(B).clamp(min=0)
        new_prev = torch.where(idx > 0, x.gather(1, last_node.view(B, 1)).view(B), st.pending)
    toks = res.tokens.cpu().numpy()
    new = [toks[b, : n_acc[b] + 1].tolist() for b in range(B)]
    if hasattr(d, "observe"):  # drafter objects written before observe() have none
        d.observe([nw if a else [] for nw, a in zip(new, st.active, strict=True)])
    for b in np.nonzero(st.active)[0]:
        st.emitted[b].extend(new[b])
    st.committed = st.committed + np.where(st.active, n_acc + 1, 0)
    live = torch.as_tensor(st.active, device=dev)
    new_pending = res.tokens.gather(1, idx.view(B, 1)).view(B).to(dev)
    st.prev = torch.where(live, new_prev, st.prev)
    st.pending = torch.where(live, new_pending, st.pending)
    was_active = np.nonzero(st.active)[0]
    for b in was_active:
        if len(st.emitted[b]) >= max_new_tokens or (eos is not None and eos in st.emitted[b]):
            st.active[b] = False
    return was_active


def _account(
    st: _Decoding,
    x: torch.Tensor,
    res: Any,
    n_acc: np.ndarray,
    was_active: np.ndarray,
    times: dict[str, float],
    shape: _TreeShape | None,
) -> None:
    """One row per sequence of the round: accepted and emitted tokens, the phases' seconds (and tree ranks)."""
    nodes = res.path.cpu().numpy() if shape is not None else None
    for b in was_active:
        row = {"round": st.rnd, "seq": int(b), "accepted": int(n_acc[b]), "emitted": int(n_acc[b] + 1), **times}
        row["drafted"] = int(x.shape[1])
        if shape is not None and nodes is not None:
            acc_nodes = nodes[b, : n_acc[b]]
            row["ranks"] = shape.tree.ranks[acc_nodes].tolist()
            row["stop_children"] = int(shape.n_children[(acc_nodes[-1] + 1) if n_acc[b] else 0])
        st.stats.append(row)
    st.rnd += 1


def _policy_gammas(policy: GammaPolicy | None) -> list[int]:
    """Every chain length a policy can ask for (0: a round without drafts, which a batch schedule may ask for)."""
    if policy is None:
        return []
    if isinstance(policy, StaticGamma):
        return [int(policy.gamma)]
    if isinstance(policy, BatchSchedule):
        return sorted({int(g) for g in policy.schedule.values()})
    # a heuristic schedule or a confidence stop drafts 1 .. its most (only a batch schedule turns drafting off)
    return list(range(1, _policy_reach(policy) + 1))


def drafter_kind(d: Any) -> tuple[str, int | None]:
    """How a drafter runs, for planning its graphs: ``("draft" | "early exit" | "lookup", early-exit layers)``."""
    if isinstance(d, EarlyExitDrafter):
        return "early exit", d.n_layers
    if isinstance(d, DraftModelDrafter):
        return "draft", None
    return "lookup", None


def run_shapes(
    target: Transformer,
    d: Any,
    batches: Sequence[int],
    need_lo: int,
    need_hi: int,
    policy: GammaPolicy | None = None,
    tree: Tree | None = None,
    sp: SamplingParams | None = None,
    variant: str = "sequoia",
) -> dict[str, list[Any]]:
    """The shapes a decoding of ``target`` drafted by ``d`` (None: plain steps) reaches, by runner
    (:func:`measure.graphs.decode_shapes`), the longest row's committed tokens in ``need_lo .. need_hi``."""
    from measure.graphs import decode_shapes

    c = target.cache
    if c is None:
        raise SpecroofError("call setup_cache(max_batch, max_seq) before planning a run's graphs")
    kind, layers = ("plain", None) if d is None else drafter_kind(d)
    shapes = decode_shapes(
        batches=batches,
        max_batch=c.max_batch,
        max_seq=c.max_seq,
        need_lo=need_lo,
        need_hi=need_hi,
        gammas=_policy_gammas(policy),
        tree=tree,
        drafter=kind,
        n_layers=layers,
        sampling=sp,
        variant=variant,
    )
    if policy is not None and policy.confidence_threshold is not None:
        shapes["draft"] = [s for s in shapes["draft"] if s.kind != "chain"]  # a confidence stop drafts eagerly
        shapes["target"] = [s for s in shapes["target"] if s.kind != "chain"]
    return shapes


def precapture_run(
    target: Transformer,
    d: Any,
    batch: int | Sequence[int],
    need_lo: int,
    need_hi: int,
    policy: GammaPolicy | None = None,
    tree: Tree | None = None,
    sp: SamplingParams | None = None,
    variant: str = "sequoia",
) -> dict[str, float]:
    """Capture, before a decoding is timed, every shape it can reach (:func:`run_shapes`) at each of ``batch``
    (one batch, or every batch a server runs), largest first; the graphs captured, the seconds and how many
    shapes were planned (nothing where no runner is attached: the eager path)."""
    total = {"graphs": 0.0, "seconds": 0.0, "planned": 0.0}
    runners = {"target": target.runner, "draft": getattr(getattr(d, "model", None), "runner", None)}
    if d is not None and drafter_kind(d)[0] != "draft":
        runners["draft"] = None
    if not any(r is not None for r in runners.values()):
        return total
    batches = [batch] if isinstance(batch, (int, np.integer)) else list(batch)
    shapes = run_shapes(target, d, batches, need_lo, need_hi, policy, tree, sp, variant)
    for name, r in runners.items():
        if r is not None:
            got = r.precapture(shapes[name])
            for k in total:
                total[k] += got[k]
    return total


def _policy_reach(policy: GammaPolicy) -> int:
    """The longest gamma a policy can ask for (caches are sized for it)."""
    if isinstance(policy, StaticGamma):
        return int(policy.gamma)
    if isinstance(policy, BatchSchedule):
        return max(policy.schedule.values())
    return int(getattr(policy, "max_gamma", 0)) or 64


def _no_drafts(batch: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A round without drafts (a schedule turned speculation off): the verify pass is a plain decode step."""
    return torch.zeros(batch, 0, dtype=torch.long, device=dev), torch.zeros(batch, 0, 1, device=dev)
