"""Verification rules of speculative decoding, in numpy (for the simulator, the tests and teaching).

Lossless rules keep the target's distribution exactly: chain speculative
sampling (accept x with probability min(1, p(x)/q(x)), else sample the correction
from norm(max(p - q, 0)), a bonus token from the target when all are accepted),
multi-candidate tree verification (SpecInfer: q kept; Sequoia: the rejected token
removed from q), and greedy verification. Medusa's typical acceptance is offered
and labelled lossy. ``measure.verification`` mirrors these rules in torch with the
same semantics: given the same uniforms both return the same tokens.

Shapes: a leading batch axis is optional everywhere. ``p`` holds target
distributions, ``q`` draft distributions, over a vocabulary of size V on the last axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError, as_array, check_min, check_range

Array = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# -- logit processors ------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """Logit processing applied identically to target and draft before any test.

    ``temperature`` 0 means greedy (a one-hot at the argmax); ``top_k`` 0 and
    ``top_p`` 1 and ``min_p`` 0 switch those filters off. Filters compose in the
    order temperature, top-k, top-p, min-p (as in Hugging Face and vLLM).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        check_min("temperature", self.temperature, 0.0)
        check_min("top_k", self.top_k, 0, integer=True)
        check_range("top_p", self.top_p, 0.0, 1.0)
        check_range("min_p", self.min_p, 0.0, 1.0)
        if self.top_p == 0.0:
            raise SpecroofError("top_p must be > 0 (1 switches the filter off)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: Any) -> Array:
        """Probabilities after every filter, over the last axis."""
        return process_logits(logits, self)


def check_logits(logits: Any, name: str = "logits") -> Array:
    """Logits as float64, rejecting NaN and +inf (-inf masks a token) and rows with nothing finite."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise SpecroofError(f"{name} need a vocabulary axis of size >= 1")
    if np.isnan(x).any():
        raise SpecroofError(f"{name} contain NaN")
    if np.isposinf(x).any():
        raise SpecroofError(f"{name} contain +inf")
    if (~np.isfinite(x)).all(axis=-1).any():
        raise SpecroofError(f"{name} have a row where every token is -inf")
    return x


def process_logits(logits: Any, params: SamplingParams | None = None) -> Array:
    """Apply temperature, top-k, top-p and min-p; return normalised probabilities."""
    sp = params or SamplingParams()
    x = check_logits(logits)
    if sp.greedy:
        out = np.zeros_like(x)
        np.put_along_axis(out, np.argmax(x, axis=-1)[..., None], 1.0, axis=-1)
        return out
    x = x / sp.temperature
    V = x.shape[-1]
    if 0 < sp.top_k < V:
        kth = np.sort(x, axis=-1)[..., V - sp.top_k][..., None]
        x = np.where(x < kth, -np.inf, x)
    p = _softmax(x)
    if sp.top_p < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=-1)
        before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < sp.top_p  # the smallest prefix whose mass reaches top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p = p / p.sum(axis=-1, keepdims=True)
    if sp.min_p > 0.0:
        p = np.where(p >= sp.min_p * p.max(axis=-1, keepdims=True), p, 0.0)
        p = p / p.sum(axis=-1, keepdims=True)
    return p


def process_pair(target_logits: Any, draft_logits: Any, params: SamplingParams | None = None) -> tuple[Array, Array]:
    """The target's p and the draft's q under the same processors, from their logits.

    Lossless verification needs q to be exactly the distribution the draft sampled
    from and p the distribution the output must follow: both pass through the same
    temperature, top-k, top-p and min-p, applied to logits (never to probabilities).
    """
    return process_logits(target_logits, params), process_logits(draft_logits, params)


def verify_chain_logits(
    target_logits: Any,
    draft_logits: Any,
    draft_tokens: Any,
    params: SamplingParams | None = None,
    rng: np.random.Generator | None = None,
    *,
    uniforms: tuple[Any, Any] | None = None,
) -> ChainResult:
    """:func:`verify_chain` from raw logits: (gamma + 1, V) target, (gamma, V) draft; ``draft_tokens`` drawn
    from the draft's processed distribution. Output follows the target's processed distribution."""
    p, q = process_pair(target_logits, draft_logits, params)
    return verify_chain(p, q, draft_tokens, rng, uniforms=uniforms)


def verify_tree_logits(
    target_logits: Any,
    draft_logits: Any,
    tree: Any,
    node_tokens: Any,
    params: SamplingParams | None = None,
    rng: np.random.Generator | None = None,
    *,
    variant: str = "sequoia",
    uniforms: tuple[Any, Any] | None = None,
) -> TreeResult:
    """:func:`verify_tree` from raw logits (n_nodes + 1, V) on both sides, under the same processors."""
    p, q = process_pair(target_logits, draft_logits, params)
    return verify_tree(p, q, tree, node_tokens, rng, variant=variant, uniforms=uniforms)


def _softmax(x: Array) -> Array:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def sample_from(probs: Array, u: Array) -> IntArray:
    """Inverse-CDF sampling: one index per row of ``probs`` from uniforms ``u`` in [0, 1)."""
    cdf = np.cumsum(probs, axis=-1)
    target = u[..., None] * cdf[..., -1:]
    idx = (cdf <= target).sum(axis=-1)
    return np.minimum(idx, probs.shape[-1] - 1).astype(np.int64)


def residual(p: Array, q: Array) -> Array:
    """norm(max(p - q, 0)); falls back to p where p and q agree to rounding (rejection cannot happen there)."""
    r = np.maximum(p - q, 0.0)
    z = r.sum(axis=-1, keepdims=True)
    return np.where(z > 1e-12, r / np.where(z > 0, z, 1.0), p)


def accept_probability(px: Array, qx: Array) -> Array:
    """min(1, p(x) / q(x)): the chance of keeping a draft token (q(x) > 0 is checked by callers)."""
    return np.minimum(1.0, px / np.where(qx > 0, qx, 1.0))


def _check_dist(name: str, d: Array) -> None:
    if np.isnan(d).any() or (d < 0).any():
        raise SpecroofError(f"{name} must be probabilities (non-negative, no NaN)")
    sums = d.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-6):
        raise SpecroofError(f"{name} must sum to 1 over the vocabulary (found sums like {float(sums.flat[0]):.6g})")


# -- chain ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainResult:
    """Outcome of chain verification for each sequence of a batch.

    ``tokens[..., :n_accepted + 1]`` are the emitted tokens (accepted drafts, then the
    correction or bonus token); the rest is padded with -1. ``lossy`` is True only for
    typical acceptance.
    """

    n_accepted: IntArray
    tokens: IntArray
    lossy: bool = False

    @property
    def n_emitted(self) -> IntArray:
        return self.n_accepted + 1

    def emitted(self, i: int | None = None) -> IntArray:
        """The emitted tokens of sequence ``i`` (or of the only sequence) without padding."""
        toks, n = (self.tokens, int(self.n_accepted)) if i is None else (self.tokens[i], int(self.n_accepted[i]))
        return toks[: n + 1]


def _prepare_chain(p: Any, q: Any, draft_tokens: Any) -> tuple[Array, Array, IntArray, bool]:
    pp, qq = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    x = np.asarray(draft_tokens)
    single = x.ndim == 1
    if single:
        pp, qq, x = pp[None], qq[None], x[None]
    if x.ndim != 2 or pp.ndim != 3 or qq.ndim != 3:
        raise SpecroofError("expected p (gamma+1, V), q (gamma, V), draft_tokens (gamma,), with an optional batch axis")
    B, g = x.shape
    V = pp.shape[-1]
    if pp.shape != (B, g + 1, V) or qq.shape != (B, g, V):
        raise SpecroofError(
            f"shape mismatch: draft_tokens {x.shape[1:]} needs p of shape ({g + 1}, {V}) and q of shape ({g}, {V}); "
            f"got p {pp.shape[1:]} and q {qq.shape[1:]}"
        )
    if g and (not np.issubdtype(x.dtype, np.integer) or (x < 0).any() or (x >= V).any()):
        raise SpecroofError(f"draft_tokens must be integers in [0, {V})")
    _check_dist("p", pp)
    if g:
        _check_dist("q", qq)
    return pp, qq, x.astype(np.int64), single


def _with_batch(p: Any, x: Any) -> tuple[Array, npt.NDArray[Any], bool]:
    """(p, x) with a leading batch axis, and whether the caller passed a single sequence."""
    pp, xx = np.asarray(p, dtype=np.float64), np.asarray(x)
    single = xx.ndim == 1
    return (pp[None], xx[None], True) if single else (pp, xx, False)


def _sample_uniforms(rng: np.random.Generator | None, uniforms: Any, b: int) -> Array:
    """One uniform per sequence for the final (correction/bonus) draw: given, or from ``rng``."""
    if uniforms is not None:
        return np.asarray(uniforms, dtype=np.float64).reshape(b)
    if rng is None:
        raise SpecroofError("pass rng (a numpy Generator) or uniforms")
    return np.asarray(rng.random(b), dtype=np.float64)


def _uniforms(
    rng: np.random.Generator | None, uniforms: tuple[Any, Any] | None, shape: tuple[int, ...], n: int
) -> tuple[Array, Array]:
    if uniforms is not None:
        ua, us = (np.asarray(u, dtype=np.float64) for u in uniforms)
        return ua.reshape(shape[0], n), us.reshape(shape[0])
    if rng is None:
        raise SpecroofError("pass rng (a numpy Generator) or uniforms")
    return rng.random((shape[0], n)), rng.random(shape[0])


def verify_chain(
    p: Any,
    q: Any,
    draft_tokens: Any,
    rng: np.random.Generator | None = None,
    *,
    uniforms: tuple[Any, Any] | None = None,
) -> ChainResult:
    """Chain speculative sampling (Leviathan / Chen): lossless.

    ``p``: (gamma+1, V) target distributions at each draft position plus the bonus
    position; ``q``: (gamma, V) draft distributions; ``draft_tokens``: (gamma,). A
    leading batch axis is accepted; each sequence gets its own accepted count.
    ``uniforms`` = (accept uniforms (batch, gamma), sampling uniforms (batch,))
    replaces ``rng`` to reproduce a run exactly (the torch mirror takes the same).
    """
    pp, qq, x, single = _prepare_chain(p, q, draft_tokens)
    B, g = x.shape
    ua, us = _uniforms(rng, uniforms, (B,), g)
    rows = np.arange(B)[:, None]
    pos = np.arange(g)[None, :]
    px = pp[rows, pos, x]
    qx = qq[rows, pos, x]
    if (qx <= 0).any():
        b, i = np.argwhere(qx <= 0)[0]
        raise SpecroofError(
            f"draft token {int(x[b, i])} at position {int(i)} has q = 0: the draft could not have proposed it"
        )
    accept = ua < accept_probability(px, qx)
    n = np.cumprod(accept, axis=1).sum(axis=1).astype(np.int64)
    p_n = pp[np.arange(B), n]
    final_dist = correction_or_bonus(p_n, qq[np.arange(B), np.minimum(n, g - 1)], n == g) if g else p_n
    tokens = emit_tokens(x, n, sample_from(final_dist, us))
    return ChainResult(n[0] if single else n, tokens[0] if single else tokens)


def correction_or_bonus(p_n: Array, q_n: Array, all_accepted: npt.NDArray[np.bool_]) -> Array:
    """The distribution of a round's last token, per sequence.

    After a rejection at position n: the correction norm(max(p_n - q_n, 0)). After every
    draft was accepted: the bonus, drawn from the target's distribution p_gamma itself
    (there is no draft to subtract there).
    """
    return np.where(all_accepted[:, None], p_n, residual(p_n, q_n))


def emit_tokens(x: IntArray, n: IntArray, final: IntArray) -> IntArray:
    """The round's tokens per sequence: the n accepted drafts, then the final token; -1 pads (batch, gamma + 1)."""
    B, g = x.shape
    tokens = np.full((B, g + 1), -1, dtype=np.int64)
    tokens[:, :g] = np.where(np.arange(g)[None, :] < n[:, None], x, -1)
    tokens[np.arange(B), n] = final
    return tokens


def verify_greedy(p: Any, draft_tokens: Any) -> ChainResult:
    """Greedy verification: accept while the draft equals the target's argmax; emit the target's token."""
    pp, x, single = _with_batch(p, draft_tokens)
    B, g = x.shape
    if pp.shape[:2] != (B, g + 1):
        raise SpecroofError(f"p must have shape ({g + 1}, V) for {g} draft tokens (got {pp.shape[1:]})")
    best = np.argmax(pp, axis=-1)
    match = best[:, :g] == x
    n = np.cumprod(match, axis=1).sum(axis=1).astype(np.int64)
    tokens = np.where(np.arange(g + 1)[None, :] <= n[:, None], best, -1)
    return ChainResult(n[0] if single else n, tokens[0] if single else tokens)


def typical_threshold(p: Array, eps: float = 0.09, delta: float = 0.3) -> Array:
    """Medusa's threshold min(eps, delta exp(-H(p))) per distribution."""
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)
    return np.minimum(eps, delta * np.exp(-h))


def verify_typical(
    p: Any,
    draft_tokens: Any,
    rng: np.random.Generator | None = None,
    *,
    eps: float = 0.09,
    delta: float = 0.3,
    uniforms: Any = None,
) -> ChainResult:
    """Medusa's typical acceptance. LOSSY: the output is not distributed as the target's.

    Accept draft token x while p(x) > min(eps, delta exp(-H(p))); at the first
    rejection (or after the last draft) emit a token sampled from the target's p.
    The result has ``lossy=True``.
    """
    pp, x, single = _with_batch(p, draft_tokens)
    B, g = x.shape
    _check_dist("p", pp)
    us = _sample_uniforms(rng, uniforms, B)
    px = np.take_along_axis(pp[:, :g], x[..., None], axis=-1)[..., 0]
    ok = px > typical_threshold(pp[:, :g], eps, delta)
    n = np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)
    final = sample_from(pp[np.arange(B), n], us)
    tokens = np.where(np.arange(g)[None, :] < n[:, None], x, -1)
    tokens = np.concatenate([tokens, np.full((B, 1), -1)], axis=1)
    tokens[np.arange(B), n] = final
    return ChainResult(n[0] if single else n, tokens[0] if single else tokens, lossy=True)


# -- trees ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeResult:
    """Outcome of tree verification per sequence: the accepted path and the emitted tokens.

    ``path[..., :n_accepted]`` are node indices of the accepted path (root side first),
    ``tokens[..., :n_accepted + 1]`` the emitted tokens; padding is -1.
    """

    n_accepted: IntArray
    path: IntArray
    tokens: IntArray
    lossy: bool = False


def _nonempty_tree(tree: Any) -> Any:
    """``tree`` as a Tree with at least one node: a tree of no drafts has nothing to verify."""
    from roofline.speculation.trees import Tree

    t = tree if isinstance(tree, Tree) else Tree(tree)
    if t.n_nodes == 0:
        raise SpecroofError(
            "the tree is empty: verification needs at least one draft node (with no drafts the round is a plain "
            "decoding step: take the target's token from p[0])"
        )
    return t


def _check_tokens(tok: npt.NDArray[Any], V: int) -> None:
    """Draft tokens are vocabulary indices: whole numbers in [0, V)."""
    if tok.size and (not np.issubdtype(tok.dtype, np.integer) or (tok < 0).any() or (tok >= V).any()):
        raise SpecroofError(f"node_tokens must be integers in [0, {V}) (the vocabulary of p)")


def _children_table(parents: IntArray) -> IntArray:
    """(n_nodes + 1, max children) table of child indices per node (row 0 = prefix), -1 padded."""
    n = parents.size
    kids: list[list[int]] = [[] for _ in range(n + 1)]
    for i, par in enumerate(parents.tolist()):
        kids[par + 1].append(i)
    width = max((len(k) for k in kids), default=0)
    table = np.full((n + 1, max(width, 1)), -1, dtype=np.int64)
    for r, k in enumerate(kids):
        table[r, : len(k)] = k
    return table


def without_token(Q: Array, x: IntArray) -> Array:
    """Q with token x removed and renormalised, per row: siblings drawn without replacement never repeat x."""
    Qr = Q.copy()
    Qr[np.arange(Q.shape[0]), x] = 0.0
    z = Qr.sum(axis=-1, keepdims=True)
    return Qr / np.where(z > 0, z, 1.0)


def verify_tree(
    p: Any,
    q: Any,
    tree: Any,
    node_tokens: Any,
    rng: np.random.Generator | None = None,
    *,
    variant: str = "sequoia",
    uniforms: tuple[Any, Any] | None = None,
) -> TreeResult:
    """Multi-candidate tree verification, lossless.

    ``p``: (n_nodes + 1, V): the target's distribution at the prefix (row 0) and after
    each node (row i + 1). ``q``: (n_nodes + 1, V): the draft distribution each node's
    children were drawn from. ``node_tokens``: (n_nodes,). Children are tried in
    sibling order; a child x is accepted with probability min(1, P(x)/Q(x)); on
    rejection P <- norm(max(P - Q, 0)) and, for ``variant='sequoia'``, x is removed
    from Q (children drawn without replacement); ``'specinfer'`` keeps Q (children
    drawn with replacement). When no child is accepted the correction is sampled from
    P; below an accepted leaf the bonus comes from the target. A batch axis is accepted.
    """

    if variant not in ("sequoia", "specinfer"):
        raise SpecroofError(f"unknown tree variant {variant!r}; choose 'sequoia' or 'specinfer'")
    t = _nonempty_tree(tree)
    pp, qq = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    tok = np.asarray(node_tokens)
    single = tok.ndim == 1
    if single:
        pp, qq, tok = pp[None], qq[None], tok[None]
    if tok.ndim != 2 or pp.ndim != 3 or qq.ndim != 3:
        raise SpecroofError("expected p and q (n_nodes + 1, V), node_tokens (n_nodes,), with an optional batch axis")
    B, n = tok.shape
    V = pp.shape[-1]
    if n != t.n_nodes or pp.shape != (B, n + 1, V) or qq.shape != (B, n + 1, V):
        raise SpecroofError(
            f"a {t.n_nodes}-node tree needs node_tokens ({t.n_nodes},), p and q of shape ({t.n_nodes + 1}, V); "
            f"got {tok.shape[1:]}, {pp.shape[1:]}, {qq.shape[1:]}"
        )
    _check_tokens(tok, V)
    _check_dist("p", pp)
    _check_dist("q", qq)
    ua, us = _uniforms(rng, uniforms, (B,), n)
    kids = _children_table(t.parents)
    rows = np.arange(B)
    cur = np.full(B, -1, dtype=np.int64)  # -1: the prefix
    P = pp[:, 0].copy()
    Q = qq[:, 0].copy()
    done = np.zeros(B, dtype=bool)
    path = np.full((B, t.depth + 1), -1, dtype=np.int64)
    depth_reached = np.zeros(B, dtype=np.int64)
    for _ in range(t.depth + 1):
        moved = np.zeros(B, dtype=bool)
        for k in range(kids.shape[1]):
            child = kids[cur + 1, k]
            act = ~done & ~moved & (child >= 0)
            if not act.any():
                continue
            c = np.where(act, child, 0)
            x = tok[rows, c]
            px, qx = P[rows, x], Q[rows, x]
            if (act & (qx <= 0)).any():
                b = int(np.argmax(act & (qx <= 0)))
                raise SpecroofError(
                    f"node {int(c[b])}'s token {int(x[b])} has q = 0: the draft could not have proposed it"
                )
            acc = act & (ua[rows, c] < accept_probability(px, qx))
            rej = act & ~acc
            P = np.where(rej[:, None], residual(P, Q), P)
            if variant == "sequoia":
                Q = np.where(rej[:, None], without_token(Q, x), Q)
            moved |= acc
            path[rows[acc], depth_reached[acc]] = c[acc]
            depth_reached[acc] += 1
            cur = np.where(acc, c, cur)
        # sequences that rejected every child stop here; the others move down a level
        stop = ~done & ~moved
        done |= stop
        nxt = np.where(moved, cur + 1, 0)
        P = np.where(moved[:, None], pp[rows, nxt], P)
        Q = np.where(moved[:, None], qq[rows, nxt], Q)
        if done.all():
            break
    final = sample_from(P, us)
    tokens = np.where(path >= 0, tok[rows[:, None], np.maximum(path, 0)], -1)
    tokens[rows, depth_reached] = final
    res = TreeResult(depth_reached, path[:, :-1] if t.depth else path[:, :0], tokens)
    if single:
        return TreeResult(res.n_accepted[0], res.path[0], res.tokens[0])
    return res


def verify_tree_greedy(p: Any, tree: Any, node_tokens: Any) -> TreeResult:
    """Greedy tree verification: follow the child whose token is the target's argmax; emit the argmax."""

    t = _nonempty_tree(tree)
    pp = as_array("p", p)
    tok = np.asarray(node_tokens)
    single = tok.ndim == 1
    if single:
        pp, tok = pp[None], tok[None]
    if tok.ndim != 2 or pp.ndim != 3:
        raise SpecroofError("expected p (n_nodes + 1, V) and node_tokens (n_nodes,), with an optional batch axis")
    B, n = tok.shape
    V = pp.shape[-1]
    if n != t.n_nodes or pp.shape != (B, n + 1, V):
        raise SpecroofError(
            f"a {t.n_nodes}-node tree needs node_tokens ({t.n_nodes},) and p of shape ({t.n_nodes + 1}, V); "
            f"got {tok.shape[1:]} and {pp.shape[1:]}"
        )
    _check_tokens(tok, V)
    best = np.argmax(pp, axis=-1)  # (B, n + 1)
    kids = _children_table(t.parents)
    rows = np.arange(B)
    cur = np.full(B, -1, dtype=np.int64)
    alive = np.ones(B, dtype=bool)
    path = np.full((B, t.depth + 1), -1, dtype=np.int64)
    depth = np.zeros(B, dtype=np.int64)
    for _ in range(t.depth):
        want = best[rows, cur + 1]
        found = np.zeros(B, dtype=bool)
        nxt = cur.copy()
        for k in range(kids.shape[1]):
            child = kids[cur + 1, k]
            hit = alive & ~found & (child >= 0) & (tok[rows, np.maximum(child, 0)] == want)
            nxt = np.where(hit, child, nxt)
            found |= hit
        path[rows[found], depth[found]] = nxt[found]
        depth += found
        alive &= found
        cur = nxt
    tokens = np.where(path >= 0, tok[rows[:, None], np.maximum(path, 0)], -1)
    tokens[rows, depth] = best[rows, cur + 1]
    res = TreeResult(depth, path[:, :-1] if t.depth else path[:, :0], tokens)
    if single:
        return TreeResult(res.n_accepted[0], res.path[0], res.tokens[0])
    return res


# -- the one-token accept-or-correct demo ---------------------------------------------------------------------


@dataclass(frozen=True)
class OneTokenVerdict:
    """Accept or correct one draft token: the acceptance probability and the residual."""

    vocab: tuple[str, ...]
    p: Array
    q: Array
    token: int
    accept_probability: float
    residual: Array

    def __str__(self) -> str:
        name = self.vocab[self.token]
        lines = [
            f"draft proposed {name!r}: q = {self.q[self.token]:.2f}, p = {self.p[self.token]:.2f}",
            f"accept with probability min(1, p/q) = {self.accept_probability:.2f}",
            "on rejection sample from norm(max(p - q, 0)): "
            + ", ".join(f"{v} {r:.2f}" for v, r in zip(self.vocab, self.residual, strict=True)),
        ]
        return "\n".join(lines)


def accept_or_correct(p: Any, q: Any, token: int, vocab: Any = None) -> OneTokenVerdict:
    """The accept-or-correct demo: one draft token, its acceptance probability and the correction distribution.

    ``accept_or_correct([.5, .3, .2], [.2, .7, .1], 1, ["hi", "hello", "hey"])`` gives
    0.3 / 0.7 = 0.43 and the residual [0.75, 0, 0.25] ("likely hi").
    """
    pp, qq = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    _check_dist("p", pp)
    _check_dist("q", qq)
    if pp.shape != qq.shape or pp.ndim != 1:
        raise SpecroofError("p and q must be 1-D distributions over the same vocabulary")
    if not 0 <= token < pp.size:
        raise SpecroofError(f"token must lie in [0, {pp.size})")
    if qq[token] <= 0:
        raise SpecroofError("the draft gives this token q = 0: it could not have proposed it")
    names = tuple(vocab) if vocab is not None else tuple(str(i) for i in range(pp.size))
    return OneTokenVerdict(names, pp, qq, token, float(min(1.0, pp[token] / qq[token])), residual(pp, qq))
