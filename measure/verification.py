"""Verification rules in torch, batched, mirroring ``roofline.speculation.verification`` exactly.

Same semantics and the same uniforms give the same tokens as the numpy rules.
No Python loop over the batch; chain verification is a fixed number of tensor
ops whatever gamma is; tree verification loops over the tree's levels and
sibling ranks only. With ``validate=False`` nothing synchronises with the host;
``validate=True`` (the default) adds one sync to check that every proposed token
had q > 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from roofline.core.errors import SpecroofError
from roofline.speculation.trees import Tree
from roofline.speculation.verification import SamplingParams


@dataclass(frozen=True)
class ChainResultT:
    """Per sequence: accepted count and emitted tokens (accepted drafts, then correction/bonus; -1 padded)."""

    n_accepted: torch.Tensor
    tokens: torch.Tensor
    lossy: bool = False


@dataclass(frozen=True)
class TreeResultT:
    """Per sequence: accepted count, accepted node path and emitted tokens (-1 padded)."""

    n_accepted: torch.Tensor
    path: torch.Tensor
    tokens: torch.Tensor
    lossy: bool = False


def process_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    check: bool = True,
) -> torch.Tensor:
    """Temperature (0 = greedy one-hot), top-k, top-p, min-p, as ``roofline.speculation.verification.process_logits``.

    ``check=False`` skips the NaN / +inf check, which reads a device value on the host: inside a captured
    CUDA graph (measure.graphs) nothing may.
    """
    if check and (torch.isnan(logits).any() or torch.isposinf(logits).any()):
        raise SpecroofError("logits contain NaN or +inf")
    x = logits.double()
    if temperature == 0.0:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).double()
    x = x / temperature
    V = x.shape[-1]
    if 0 < top_k < V:
        kth = torch.sort(x, dim=-1).values[..., V - top_k].unsqueeze(-1)
        x = torch.where(x < kth, torch.full_like(x, -torch.inf), x)
    p = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(p, dim=-1, descending=True, stable=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep = torch.zeros_like(p, dtype=torch.bool).scatter(-1, order, before < top_p)
        p = torch.where(keep, p, torch.zeros_like(p))
        p = p / p.sum(-1, keepdim=True)
    if min_p > 0.0:
        p = torch.where(p >= min_p * p.amax(-1, keepdim=True), p, torch.zeros_like(p))
        p = p / p.sum(-1, keepdim=True)
    return p


def process_pair(
    target_logits: torch.Tensor, draft_logits: torch.Tensor, params: SamplingParams | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q under the same processors, from logits (see ``roofline.speculation.verification.process_pair``)."""
    sp = params or SamplingParams()
    knobs = (sp.temperature, sp.top_k, sp.top_p, sp.min_p)
    return process_logits(target_logits, *knobs), process_logits(draft_logits, *knobs)


def verify_chain_logits(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    params: SamplingParams | None = None,
    **kw: Any,
) -> ChainResultT:
    """:func:`verify_chain` from raw logits on both sides, under the same processors."""
    p, q = process_pair(target_logits, draft_logits, params)
    return verify_chain(p, q, draft_tokens, **kw)


def verify_tree_logits(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    parents: list[int],
    node_tokens: torch.Tensor,
    params: SamplingParams | None = None,
    **kw: Any,
) -> TreeResultT:
    """:func:`verify_tree` from raw logits on both sides, under the same processors."""
    p, q = process_pair(target_logits, draft_logits, params)
    return verify_tree(p, q, parents, node_tokens, **kw)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling, one index per row (the same arithmetic as the numpy version)."""
    cdf = torch.cumsum(probs, dim=-1)
    target = (u.to(cdf.dtype).unsqueeze(-1) * cdf[..., -1:]).contiguous()
    # searchsorted(right=True) counts the cdf entries <= target, like the numpy rule
    idx = torch.searchsorted(cdf.contiguous(), target, right=True).squeeze(-1)
    return idx.clamp(max=probs.shape[-1] - 1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(p - q, 0)), falling back to p where they agree to rounding."""
    r = (p - q).clamp(min=0.0)
    z = r.sum(-1, keepdim=True)
    return torch.where(z > 1e-12, r / torch.where(z > 0, z, torch.ones_like(z)), p)


def accept_probability(px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x))."""
    return torch.clamp(px / torch.where(qx > 0, qx, torch.ones_like(qx)), max=1.0)


def verify_chain(
    p: torch.Tensor,
    q: torch.Tensor,
    draft_tokens: torch.Tensor,
    *,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> ChainResultT:
    """Chain speculative sampling for a batch: p (B, g+1, V), q (B, g, V), draft_tokens (B, g)."""
    B, g = draft_tokens.shape
    if uniforms is None:
        ua = torch.rand(B, g, generator=generator, dtype=torch.float64, device=p.device)
        us = torch.rand(B, generator=generator, dtype=torch.float64, device=p.device)
    else:
        ua, us = uniforms
    x = draft_tokens.long()
    px = p[:, :g].gather(-1, x.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    if validate and bool((qx <= 0).any()):
        raise SpecroofError("a draft token has q = 0: the draft could not have proposed it")
    accept = ua < accept_probability(px, qx)
    n = torch.cumprod(accept.long(), dim=1).sum(1)
    V = p.shape[-1]
    p_n = p.gather(1, n.view(B, 1, 1).expand(B, 1, V)).squeeze(1)
    if g:
        q_n = q.gather(1, n.clamp(max=g - 1).view(B, 1, 1).expand(B, 1, V)).squeeze(1)
        final_dist = correction_or_bonus(p_n, q_n, n == g)
    else:
        final_dist = p_n
    return ChainResultT(n, emit_tokens(x, n, sample_from(final_dist, us)))


def correction_or_bonus(p_n: torch.Tensor, q_n: torch.Tensor, all_accepted: torch.Tensor) -> torch.Tensor:
    """The round's last token's distribution: the bonus p_gamma after all-accepted, else norm(max(p_n - q_n, 0))."""
    return torch.where(all_accepted.unsqueeze(-1), p_n, residual(p_n, q_n))


def emit_tokens(x: torch.Tensor, n: torch.Tensor, final: torch.Tensor) -> torch.Tensor:
    """The n accepted drafts, then the final token, -1 padded: (batch, gamma + 1)."""
    B, g = x.shape
    pos = torch.arange(g + 1, device=x.device).unsqueeze(0)
    padded = torch.cat([x, torch.full((B, 1), -1, dtype=torch.long, device=x.device)], dim=1)
    tokens = torch.where(pos < n.unsqueeze(1), padded, torch.full_like(padded, -1))
    return tokens.scatter(1, n.unsqueeze(1), final.unsqueeze(1))


def verify_greedy(p: torch.Tensor, draft_tokens: torch.Tensor) -> ChainResultT:
    """Greedy verification for a batch (no randomness, no host sync)."""
    B, g = draft_tokens.shape
    best = p.argmax(-1)
    n = torch.cumprod((best[:, :g] == draft_tokens).long(), dim=1).sum(1)
    pos = torch.arange(g + 1, device=p.device).unsqueeze(0)
    tokens = torch.where(pos <= n.unsqueeze(1), best, torch.full_like(best, -1))
    return ChainResultT(n, tokens)


def _children_table(parents: list[int], device: torch.device) -> torch.Tensor:
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, par in enumerate(parents):
        kids[par + 1].append(i)
    width = max(1, max(len(k) for k in kids))
    table = torch.full((len(kids), width), -1, dtype=torch.long)
    for r, k in enumerate(kids):
        if k:
            table[r, : len(k)] = torch.tensor(k)
    return table.to(device)


def without_token(Q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Q with token x removed and renormalised, per row (siblings drawn without replacement)."""
    Qr = Q.scatter(1, x.unsqueeze(1), 0.0)
    z = Qr.sum(-1, keepdim=True)
    return Qr / torch.where(z > 0, z, torch.ones_like(z))


def verify_tree(
    p: torch.Tensor,
    q: torch.Tensor,
    parents: list[int],
    node_tokens: torch.Tensor,
    *,
    variant: str = "sequoia",
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> TreeResultT:
    """Multi-candidate tree verification for a batch; see ``roofline.speculation.verification.verify_tree``.

    p, q: (B, n + 1, V); node_tokens: (B, n); ``parents`` the tree's parent array.
    """
    if variant not in ("sequoia", "specinfer"):
        raise SpecroofError(f"unknown tree variant {variant!r}; choose 'sequoia' or 'specinfer'")
    B, n = node_tokens.shape
    dev = p.device
    max_depth = Tree(parents).depth
    if uniforms is None:
        ua = torch.rand(B, n, generator=generator, dtype=torch.float64, device=dev)
        us = torch.rand(B, generator=generator, dtype=torch.float64, device=dev)
    else:
        ua, us = uniforms
    kids = _children_table(parents, dev)
    rows = torch.arange(B, device=dev)
    tok = node_tokens.long()
    cur = torch.full((B,), -1, dtype=torch.long, device=dev)
    P, Q = p[:, 0].clone(), q[:, 0].clone()
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    path = torch.full((B, max_depth + 1), -1, dtype=torch.long, device=dev)
    reached = torch.zeros(B, dtype=torch.long, device=dev)
    bad = torch.zeros((), dtype=torch.bool, device=dev)
    for _ in range(max_depth + 1):
        moved = torch.zeros(B, dtype=torch.bool, device=dev)
        for k in range(kids.shape[1]):
            child = kids[cur + 1, k]
            act = ~done & ~moved & (child >= 0)
            c = torch.where(act, child, torch.zeros_like(child))
            x = tok[rows, c]
            px, qx = P[rows, x], Q[rows, x]
            bad = bad | (act & (qx <= 0)).any()
            acc = act & (ua[rows, c] < accept_probability(px, qx))
            rej = (act & ~acc).unsqueeze(-1)
            P = torch.where(rej, residual(P, Q), P)
            if variant == "sequoia":
                Q = torch.where(rej, without_token(Q, x), Q)
            moved = moved | acc
            path[rows, reached] = torch.where(acc, c, path[rows, reached])
            reached = reached + acc.long()
            cur = torch.where(acc, c, cur)
        done = done | ~moved
        nxt = torch.where(moved, cur + 1, torch.zeros_like(cur))
        P = torch.where(moved.unsqueeze(-1), p[rows, nxt], P)
        Q = torch.where(moved.unsqueeze(-1), q[rows, nxt], Q)
    if validate and bool(bad):
        raise SpecroofError("a tree node's token has q = 0: the draft could not have proposed it")
    final = sample_from(P, us)
    tokens = torch.where(path >= 0, tok.gather(1, path.clamp(min=0)), torch.full_like(path, -1))
    tokens = tokens.scatter(1, reached.unsqueeze(1), final.unsqueeze(1))
    return TreeResultT(reached, path[:, :max_depth], tokens)


def verify_tree_greedy(target_argmax: torch.Tensor, parents: list[int], node_tokens: torch.Tensor) -> TreeResultT:
    """Greedy tree verification: from the root, follow the child whose token is the target's argmax.

    target_argmax: (B, n + 1) the target's argmax after the root (index 0) and after
    each node (index i + 1); node_tokens: (B, n). The emitted tokens are the accepted
    path's tokens, then the target's argmax after its last node. Exactly the tokens
    greedy decoding emits, whatever the tree.
    """
    B, n = node_tokens.shape
    dev = node_tokens.device
    max_depth = Tree(parents).depth
    kids = _children_table(parents, dev)
    rows = torch.arange(B, device=dev)
    tok = node_tokens.long()
    cur = torch.full((B,), -1, dtype=torch.long, device=dev)
    path = torch.full((B, max_depth + 1), -1, dtype=torch.long, device=dev)
    reached = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    for _ in range(max_depth):
        want = target_argmax[rows, cur + 1]
        cand = kids[cur + 1]  # (B, width) children of the current node, -1 padded
        hit = (cand >= 0) & (tok.gather(1, cand.clamp(min=0)) == want.unsqueeze(1)) & ~done.unsqueeze(1)
        moved = hit.any(1)
        child = cand.gather(1, hit.long().argmax(1, keepdim=True)).squeeze(1)  # siblings carry distinct tokens
        path[rows, reached] = torch.where(moved, child, path[rows, reached])
        reached = reached + moved.long()
        cur = torch.where(moved, child, cur)
        done = done | ~moved
    final = target_argmax[rows, cur + 1]
    tokens = torch.where(path >= 0, tok.gather(1, path.clamp(min=0)), torch.full_like(path, -1))
    tokens = tokens.scatter(1, reached.unsqueeze(1), final.unsqueeze(1))
    return TreeResultT(reached, path[:, :max_depth], tokens)
