"""Verification rules: the statistical proof that they keep the target's distribution, on both backends.

A small Markov "language" (next-token tables P for the target and Q for the draft,
indexed by the previous token) gives every position a consistent conditional
distribution, so the first emitted token must follow P[start] and the first two
jointly P[start][a] P[a][b]. Each case draws 2e5 seeded rounds in one batched call
and runs a chi-square test; the same test must reject deliberately broken rules.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import roofline.speculation.verification as ns
from roofline import SpecroofError
from roofline.speculation.speculative import acceptance_rate, expected_tokens
from roofline.speculation.trees import Tree
from roofline.speculation.verification import SamplingParams, accept_or_correct, process_logits

N = 200_000
V = 6
START = V  # the row of the tables used as the prompt's last token
PASS_P = 1e-3  # correct rules: p-values above this (fixed seeds: the suite is deterministic)
FAIL_P = 1e-8  # broken rules: p-values below this


# -- backends ------------------------------------------------------------------------------------


class NumpyBackend:
    name = "numpy"
    module = ns

    def chain(self, p, q, x, ua, us):
        r = ns.verify_chain(p, q, x, uniforms=(ua, us))
        return r.n_accepted, r.tokens

    def tree(self, p, q, tree, tok, variant, ua, us):
        r = ns.verify_tree(p, q, tree, tok, variant=variant, uniforms=(ua, us))
        return r.n_accepted, r.tokens

    def greedy(self, p, x):
        r = ns.verify_greedy(p, x)
        return r.n_accepted, r.tokens


class TorchBackend:
    name = "torch"

    def __init__(self):
        import torch

        import measure.verification as ts

        self.torch, self.module = torch, ts

    def _t(self, a):
        return self.torch.as_tensor(np.ascontiguousarray(a))

    def chain(self, p, q, x, ua, us):
        r = self.module.verify_chain(self._t(p), self._t(q), self._t(x), uniforms=(self._t(ua), self._t(us)))
        return r.n_accepted.numpy(), r.tokens.numpy()

    def tree(self, p, q, tree, tok, variant, ua, us):
        r = self.module.verify_tree(
            self._t(p),
            self._t(q),
            tree.parents.tolist(),
            self._t(tok),
            variant=variant,
            uniforms=(self._t(ua), self._t(us)),
        )
        return r.n_accepted.numpy(), r.tokens.numpy()

    def greedy(self, p, x):
        r = self.module.verify_greedy(self._t(p), self._t(x))
        return r.n_accepted.numpy(), r.tokens.numpy()


def _backends():
    out = [pytest.param(NumpyBackend, id="numpy")]
    try:
        import torch  # noqa: F401

        out.append(pytest.param(TorchBackend, id="torch"))
    except ImportError:
        out.append(pytest.param(TorchBackend, id="torch", marks=pytest.mark.skip(reason="torch not installed")))
    return out


@pytest.fixture(params=_backends())
def backend(request):
    return request.param()


# -- the Markov language and rounds ----------------------------------------------------------------------


def tables(seed: int, params: SamplingParams | None = None):
    """Target and draft next-token tables, (V + 1, V); the draft is a noisy copy of the target."""
    rng = np.random.default_rng(seed)
    logits_p = rng.normal(0, 1.2, (V + 1, V))
    logits_q = logits_p + rng.normal(0, 0.9, (V + 1, V))
    return process_logits(logits_p, params), process_logits(logits_q, params)


def sample_rows(dist, rng):
    return ns.sample_from(dist, rng.random(dist.shape[0]))


def chain_round(backend, P, Q, ctx, gamma, rng):
    """One chain round for every context in ``ctx``: draft gamma tokens from Q, verify against P."""
    xs, prev = [], ctx
    for _ in range(gamma):
        prev = sample_rows(Q[prev], rng)
        xs.append(prev)
    x = np.stack(xs, axis=1)
    p = np.stack([P[ctx], *[P[x[:, i]] for i in range(gamma)]], axis=1)
    q = np.stack([Q[ctx], *[Q[x[:, i]] for i in range(gamma - 1)]], axis=1)
    return backend.chain(p, q, x, rng.random((ctx.size, gamma)), rng.random(ctx.size))


def draw_children(qrows, k, rng, replacement):
    """k children per row of qrows: i.i.d. (SpecInfer) or without replacement (Sequoia, Gumbel top-k)."""
    if replacement:
        return np.stack([sample_rows(qrows, rng) for _ in range(k)], axis=1)
    with np.errstate(divide="ignore"):
        keys = np.log(qrows) + rng.gumbel(size=qrows.shape)
    return np.argsort(-keys, axis=1)[:, :k]


TREE = Tree([-1, -1, -1, 0, 0, 1])  # three candidates at depth 1, three at depth 2


def tree_round(backend, P, Q, ctx, variant, rng, tree=TREE):
    n = tree.n_nodes
    tok = np.zeros((ctx.size, n), dtype=np.int64)
    for parent in [-1, *range(n)]:
        kids = tree.children(parent)
        if kids.size == 0:
            continue
        prev = ctx if parent < 0 else tok[:, parent]
        tok[:, kids] = draw_children(Q[prev], kids.size, rng, replacement=(variant == "specinfer"))
    p = np.stack([P[ctx], *[P[tok[:, i]] for i in range(n)]], axis=1)
    q = np.stack([Q[ctx], *[Q[tok[:, i]] for i in range(n)]], axis=1)
    return backend.tree(p, q, tree, tok, variant, rng.random((ctx.size, n)), rng.random(ctx.size))


def run_round(backend, rule, P, Q, ctx, rng):
    if rule == "chain":
        return chain_round(backend, P, Q, ctx, 3, rng)
    return tree_round(backend, P, Q, ctx, rule.split("-")[1], rng)


def chi2_p(samples, probs):
    counts = np.bincount(samples, minlength=probs.size).astype(float)
    support = probs > 0
    assert counts[~support].sum() == 0, "emitted a token the target gives probability 0"
    return stats.chisquare(counts[support], probs[support] * counts.sum()).pvalue


def first_two(backend, rule, P, Q, rng):
    ctx = np.full(N, START)
    n, tokens = run_round(backend, rule, P, Q, ctx, rng)
    first = tokens[:, 0]
    second = tokens[:, 1].copy()
    again = n == 0  # the round emitted one token: the next round produces the second
    _, t2 = run_round(backend, rule, P, Q, first[again], rng)
    second[again] = t2[:, 0]
    return first, second


RULES = ["chain", "tree-sequoia", "tree-specinfer"]
PROCESSORS = {
    "plain": None,
    "temp0.7-topk4-topp0.9": SamplingParams(temperature=0.7, top_k=4, top_p=0.9),
    "temp1.3-minp0.05": SamplingParams(temperature=1.3, min_p=0.05),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("proc", list(PROCESSORS))
def test_first_token_follows_the_target(backend, rule, proc):
    P, Q = tables(11, PROCESSORS[proc])
    rng = np.random.default_rng(5)
    n, tokens = run_round(backend, rule, P, Q, np.full(N, START), rng)
    assert chi2_p(tokens[:, 0], P[START]) > PASS_P
    assert 0 < n.mean() < 3  # drafts really were accepted and rejected


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("proc", ["plain", "temp0.7-topk4-topp0.9"])
def test_first_two_tokens_jointly_follow_the_target(backend, rule, proc):
    P, Q = tables(23, PROCESSORS[proc])
    a, b = first_two(backend, rule, P, Q, np.random.default_rng(9))
    joint = (P[START][:, None] * P[:V]).ravel()  # P(a) P(b | a)
    assert chi2_p(a * V + b, joint) > PASS_P


@pytest.mark.parametrize("rule", ["chain", "tree-sequoia", "tree-specinfer"])
@pytest.mark.parametrize("broken", ["correction-from-p", "accept-q-over-p"])
def test_the_same_statistic_catches_broken_rules(backend, rule, broken, monkeypatch):
    mod = backend.module
    if broken == "correction-from-p":
        monkeypatch.setattr(mod, "residual", lambda p, q: p)
    else:
        real = mod.accept_probability
        monkeypatch.setattr(mod, "accept_probability", lambda px, qx: real(qx, px))
    P, Q = tables(11)
    n, tokens = run_round(backend, rule, P, Q, np.full(N, START), np.random.default_rng(5))
    assert chi2_p(tokens[:, 0], P[START]) < FAIL_P


def test_numpy_and_torch_agree_on_the_same_uniforms():
    pytest.importorskip("torch")
    nb, tb = NumpyBackend(), TorchBackend()
    P, Q = tables(3, SamplingParams(temperature=0.8, top_k=5))
    for rule in RULES:
        ra, rb = np.random.default_rng(1), np.random.default_rng(1)
        ctx = np.full(5000, START)
        na, ta = run_round(nb, rule, P, Q, ctx, ra)
        nb_, tb_ = run_round(tb, rule, P, Q, ctx, rb)
        np.testing.assert_array_equal(na, nb_)
        np.testing.assert_array_equal(ta, tb_)
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(V), size=(100, 5))
    x = rng.integers(0, V, (100, 4))
    for got, want in zip(nb.greedy(p, x), tb.greedy(p, x), strict=True):
        np.testing.assert_array_equal(got, want)


# -- Monte-Carlo of whole rounds against the closed forms -------------------------------------------------


def test_chain_rounds_match_expected_tokens(backend):
    rng = np.random.default_rng(4)
    p1, q1 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    g = 4
    x = np.stack([sample_rows(np.broadcast_to(q1, (N, V)), rng) for _ in range(g)], axis=1)
    p = np.broadcast_to(p1, (N, g + 1, V))
    q = np.broadcast_to(q1, (N, g, V))
    n, _ = backend.chain(p, q, x, rng.random((N, g)), rng.random(N))
    alpha = float(acceptance_rate(p1, q1))
    emitted = n + 1
    assert abs(emitted.mean() - float(expected_tokens(alpha, g))) < 4 * emitted.std() / np.sqrt(N)


def test_two_candidate_tree_matches_its_closed_form(backend):
    # SpecInfer with two i.i.d. leaf candidates: E = 1 + a1 + (1 - a1) a2, a2 against the residual
    rng = np.random.default_rng(8)
    p0, q0 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    tree = Tree([-1, -1])
    tok = np.stack([sample_rows(np.broadcast_to(q0, (N, V)), rng) for _ in range(2)], axis=1)
    p = np.broadcast_to(np.stack([p0, p0, p0]), (N, 3, V))
    q = np.broadcast_to(np.stack([q0, q0, q0]), (N, 3, V))
    n, _ = backend.tree(p, q, tree, tok, "specinfer", rng.random((N, 2)), rng.random(N))
    a1 = float(acceptance_rate(p0, q0))
    a2 = float(np.minimum(ns.residual(p0, q0), q0).sum())
    want = 1 + a1 + (1 - a1) * a2
    assert abs((n + 1).mean() - want) < 4 * (n + 1).std() / np.sqrt(N)


# -- rules in detail and edge cases --------------------------------------------------------------------------


def test_seed_hi_hello_hey():
    v = accept_or_correct([0.5, 0.3, 0.2], [0.2, 0.7, 0.1], 1, ["hi", "hello", "hey"])
    assert v.accept_probability == pytest.approx(0.3 / 0.7) and round(v.accept_probability, 2) == 0.43
    np.testing.assert_allclose(v.residual, [0.75, 0.0, 0.25])
    assert "likely" not in str(v) and "hi 0.75" in str(v)
    from roofline.plot import verdict_chart

    assert verdict_chart(v).axes


def test_all_accepted_emits_the_bonus_from_the_last_position():
    p = np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float)
    q = np.array([[0, 1, 0], [0, 0, 1]], dtype=float)
    r = ns.verify_chain(p, q, [1, 2], np.random.default_rng(0))
    assert int(r.n_accepted) == 2 and r.emitted().tolist() == [1, 2, 0]


def test_p_zero_is_never_accepted_and_q_zero_is_an_error():
    p = np.array([[1.0, 0.0], [0.5, 0.5]])
    q = np.array([[0.0, 1.0]])
    r = ns.verify_chain(p, q, [1], np.random.default_rng(0))
    assert int(r.n_accepted) == 0 and r.emitted().tolist() == [0]
    with pytest.raises(SpecroofError, match="q = 0: the draft could not have proposed it"):
        ns.verify_chain(p, np.array([[1.0, 0.0]]), [1], np.random.default_rng(0))


def test_gamma_zero_and_vocab_of_one():
    r = ns.verify_chain(np.array([[0.2, 0.8]]), np.zeros((0, 2)), np.zeros(0, dtype=int), np.random.default_rng(0))
    assert int(r.n_accepted) == 0 and r.tokens.shape == (1,)
    r = ns.verify_chain(np.ones((3, 1)), np.ones((2, 1)), [0, 0], np.random.default_rng(0))
    assert r.emitted().tolist() == [0, 0, 0]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_logits_are_clear_errors(bad):
    logits = np.array([0.1, bad, 0.3])
    with pytest.raises(SpecroofError, match="logits contain"):
        process_logits(logits)


def test_shape_errors_name_the_shapes():
    with pytest.raises(SpecroofError, match="shape mismatch"):
        ns.verify_chain(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3, [0, 1], np.random.default_rng(0))
    with pytest.raises(SpecroofError, match="must sum to 1"):
        ns.verify_chain(np.ones((2, 3)), np.ones((1, 3)) / 3, [0], np.random.default_rng(0))


def test_greedy_chain_and_tree():
    p = np.eye(4)[[2, 3, 1, 0]]  # argmax: 2, 3, 1, 0
    r = ns.verify_greedy(p, [2, 3, 0])
    assert int(r.n_accepted) == 2 and r.emitted().tolist() == [2, 3, 1]
    tree = Tree([-1, -1, 1])  # node 1 (token 2) has child 2 (token 3)
    pt = np.eye(4)[[2, 0, 3, 1]]  # prefix -> 2, after node 1 -> 3, after node 2 -> 1
    res = ns.verify_tree_greedy(pt, tree, [0, 2, 3])
    assert int(res.n_accepted) == 2 and res.path.tolist() == [1, 2] and res.tokens.tolist() == [2, 3, 1]


def test_logit_processors():
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.1]))
    np.testing.assert_array_equal(SamplingParams(temperature=0).probs(logits), [1, 0, 0, 0])
    assert np.count_nonzero(SamplingParams(top_k=2).probs(logits)) == 2
    np.testing.assert_allclose(SamplingParams(top_p=0.7).probs(logits), [2 / 3, 1 / 3, 0, 0])
    np.testing.assert_allclose(SamplingParams(min_p=0.4).probs(logits), [2 / 3, 1 / 3, 0, 0])
    hot = SamplingParams(temperature=2.0).probs(logits)
    assert hot[0] < 0.5 and hot.sum() == pytest.approx(1)
    with pytest.raises(SpecroofError, match="top_p must lie in"):
        SamplingParams(top_p=1.5)
    with pytest.raises(SpecroofError, match="temperature must be >= 0"):
        SamplingParams(temperature=-1)


def test_processors_match_between_backends():
    torch = pytest.importorskip("torch")
    import measure.verification as ts

    logits = np.random.default_rng(0).normal(size=(50, 12))
    for sp in (
        SamplingParams(),
        SamplingParams(temperature=0.6, top_k=5, top_p=0.8),
        SamplingParams(min_p=0.1),
        SamplingParams(temperature=0),
    ):
        want = sp.probs(logits)
        got = ts.process_logits(torch.tensor(logits), sp.temperature, sp.top_k, sp.top_p, sp.min_p).numpy()
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_typical_acceptance_is_labelled_lossy():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    r = ns.verify_typical(p, [1, 2], np.random.default_rng(0))
    assert r.lossy and "LOSSY" in ns.verify_typical.__doc__
    # threshold min(0.09, 0.3 exp(-H)): token 1 (0.2) passes, token 2 (0.8) passes
    assert int(r.n_accepted) == 2
    assert not ns.verify_chain(p, np.array([[0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]), [1, 2], np.random.default_rng(0)).lossy


# -- every emitted token of a round, the bonus included, and a table of broken rules ------------------------------


def first_k(backend, P, Q, gamma, k, rng):
    """The first k tokens of each stream (N streams), produced by as many chain rounds as it takes."""
    out = np.full((N, k), -1)
    have = np.zeros(N, dtype=int)
    prev = np.full(N, START)
    while (have < k).any():
        live = np.nonzero(have < k)[0]
        n, tokens = chain_round(backend, P, Q, prev[live], gamma, rng)
        for j in range(gamma + 1):
            emitted = (j <= n) & (have[live] < k)
            rows = live[emitted]
            out[rows, have[rows]] = tokens[emitted, j]
            have[rows] += 1
        prev = np.where(have > 0, out[np.arange(N), np.maximum(have - 1, 0)], START)
    return out


def stream_p(backend, gamma, k, P, Q, seed=3):
    """p-value of the chi-square test that the first k tokens follow the target's chain P."""
    toks = first_k(backend, P, Q, gamma, k, np.random.default_rng(seed))
    probs = P[START].copy()
    for _ in range(k - 1):
        last = np.arange(probs.size) % V  # the last token of each joint outcome so far
        probs = (probs[:, None] * P[last]).ravel()  # P(a) P(b | a) P(c | b) ... over V**k outcomes
    return chi2_p(np.ravel_multi_index(toks.T, (V,) * k), probs)


def mutated(backend, name, monkeypatch):
    """Apply one deliberately broken verification rule to ``backend``'s module."""
    mod = backend.module
    xp = np if backend.name == "numpy" else backend.torch

    def where(c, a, b):
        return np.where(c, a, b) if xp is np else xp.where(c, a, b)

    if name == "residual-not-normalised":
        monkeypatch.setattr(mod, "residual", lambda p, q: (p - q).clip(0) if xp is np else (p - q).clamp(min=0))
    elif name == "bonus-from-q":
        # the bonus drawn from the last draft distribution instead of the target's
        monkeypatch.setattr(mod, "correction_or_bonus", lambda p, q, a: where(a[:, None], q, mod.residual(p, q)))
    elif name == "bonus-from-residual":
        # the all-accepted case forgotten: the bonus drawn from norm(max(p_gamma - q_(gamma-1), 0))
        monkeypatch.setattr(mod, "correction_or_bonus", lambda p, q, a: mod.residual(p, q))
    elif name == "rejected-token-kept":
        real = mod.emit_tokens

        def keep_rejected(x, n, final):
            g = x.shape[1]
            idx = n.clip(0, g - 1) if xp is np else n.clamp(max=g - 1)
            kept = x[np.arange(x.shape[0]), idx] if xp is np else x.gather(1, idx.view(-1, 1)).view(-1)
            return real(x, n, where(n < g, kept, final))

        monkeypatch.setattr(mod, "emit_tokens", keep_rejected)
    elif name == "sequoia-keeps-rejected":
        monkeypatch.setattr(mod, "without_token", lambda Q, x: Q)
    else:
        raise AssertionError(name)


@pytest.mark.parametrize("gamma, k", [(1, 2), (2, 3)])
def test_every_emitted_token_of_a_round_follows_the_target(backend, gamma, k):
    """Joint test over a whole round, all-accepted bonus included (gamma 1: the second token is often the bonus)."""
    P, Q = tables(31)
    assert stream_p(backend, gamma, k, P, Q) > PASS_P


#: each broken rule, and the statistic that must reject it
MUTATIONS = [
    ("bonus-from-q", "chain"),
    ("bonus-from-residual", "chain"),
    ("rejected-token-kept", "chain"),
    ("residual-not-normalised", "tree-specinfer"),
    ("sequoia-keeps-rejected", "tree-sequoia"),
]


@pytest.mark.parametrize("name, rule", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutation_table_is_rejected(backend, name, rule, monkeypatch):
    mutated(backend, name, monkeypatch)
    P, Q = tables(31)
    if rule == "chain":
        assert stream_p(backend, 1, 2, P, Q) < FAIL_P
    else:
        tree = Tree([-1, -1, -1])  # three siblings: two rejections before the last one is tried
        n, tokens = tree_round(backend, P, Q, np.full(N, START), rule.split("-")[1], np.random.default_rng(5), tree)
        assert chi2_p(tokens[:, 0], P[START]) < FAIL_P


# -- processors applied to both sides, from logits: temperature 0.5 and 1.5, top-k, top-p ---------------------------
#
# The tables above are processed before any rule sees them, so a rule that processes one side differently
# cannot show there. Here each rule takes raw logits (``verify_*_logits``) and applies the processors
# itself; the draft proposes from its correctly processed distribution, the output must follow the
# target's. At temperature 1 without filters "temperature on p only" is the correct rule: hence 0.5 and 1.5.

SAMPLED = {
    "temp0.5-topk4": SamplingParams(temperature=0.5, top_k=4),
    "temp1.5-topp0.8": SamplingParams(temperature=1.5, top_p=0.8),
}


#: rounds per case here: the lossless checks, and the mutation checks (each rejected at p < 1e-80 already at
#: 20,000 rounds; 1e-8 is asked for)
N_LOGITS = 100_000
N_MUTANT = 20_000


def logit_tables(seed: int):
    """Raw next-token logits (V + 1, V) of the target and of a noisy draft."""
    rng = np.random.default_rng(seed)
    lp = rng.normal(0, 1.2, (V + 1, V))
    return lp, lp + rng.normal(0, 0.9, (V + 1, V))


def _proc(backend, logits, sp):
    """The backend's own (unpatched) processors on one side."""
    if backend.name == "numpy":
        return ns.process_logits(logits, sp)
    return backend.module.process_logits(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p)


def _softmax_any(backend, logits):
    if backend.name == "numpy":
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)
    return backend.torch.softmax(logits.double(), dim=-1)


def logit_round(backend, rule, LP, LQ, sp, ctx, rng, tree=TREE, gamma=3):
    """One round from logits: proposals from the draft's processed distribution, the rule processes both sides."""
    Q = process_logits(LQ, sp)  # what the drafter samples from
    if rule == "chain":
        xs, prev = [], ctx
        for _ in range(gamma):
            prev = sample_rows(Q[prev], rng)
            xs.append(prev)
        x = np.stack(xs, axis=1)
        lp = np.stack([LP[ctx], *[LP[x[:, i]] for i in range(gamma)]], axis=1)
        lq = np.stack([LQ[ctx], *[LQ[x[:, i]] for i in range(gamma - 1)]], axis=1)
        ua, us = rng.random((ctx.size, gamma)), rng.random(ctx.size)
        if backend.name == "numpy":
            r = ns.verify_chain_logits(lp, lq, x, sp, uniforms=(ua, us))
            return r.n_accepted, r.tokens
        t = backend._t
        r = backend.module.verify_chain_logits(t(lp), t(lq), t(x), sp, uniforms=(t(ua), t(us)))
        return r.n_accepted.numpy(), r.tokens.numpy()
    variant = rule.split("-")[1]
    n = tree.n_nodes
    tok = np.zeros((ctx.size, n), dtype=np.int64)
    for parent in [-1, *range(n)]:
        kids = tree.children(parent)
        if kids.size:
            prev = ctx if parent < 0 else tok[:, parent]
            tok[:, kids] = draw_children(Q[prev], kids.size, rng, replacement=(variant == "specinfer"))
    lp = np.stack([LP[ctx], *[LP[tok[:, i]] for i in range(n)]], axis=1)
    lq = np.stack([LQ[ctx], *[LQ[tok[:, i]] for i in range(n)]], axis=1)
    ua, us = rng.random((ctx.size, n)), rng.random(ctx.size)
    if backend.name == "numpy":
        r = ns.verify_tree_logits(lp, lq, tree, tok, sp, variant=variant, uniforms=(ua, us))
        return r.n_accepted, r.tokens
    t = backend._t
    r = backend.module.verify_tree_logits(
        t(lp), t(lq), tree.parents.tolist(), t(tok), sp, variant=variant, uniforms=(t(ua), t(us))
    )
    return r.n_accepted.numpy(), r.tokens.numpy()


def chi2_or_zero(samples, probs):
    """chi2_p, but a token the target gives probability 0 is a certain rejection (p = 0), not an assertion."""
    counts = np.bincount(samples, minlength=probs.size)
    if counts[probs <= 0].sum():
        return 0.0
    return chi2_p(samples, probs)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("proc", list(SAMPLED))
def test_rules_from_logits_follow_the_processed_target(backend, rule, proc):
    sp = SAMPLED[proc]
    LP, LQ = logit_tables(11)
    P = process_logits(LP, sp)
    rng = np.random.default_rng(5)
    n, tokens = logit_round(backend, rule, LP, LQ, sp, np.full(N_LOGITS, START), rng)
    assert chi2_p(tokens[:, 0], P[START]) > PASS_P
    assert 0 < n.mean() < 3
    # the second token: the next draft in the round when the first was accepted, else the next round's first
    second = tokens[:, 1].copy()
    again = n == 0
    _, t2 = logit_round(backend, rule, LP, LQ, sp, tokens[again, 0], rng)
    second[again] = t2[:, 0]
    joint = (P[START][:, None] * P[:V]).ravel()
    assert chi2_p(tokens[:, 0] * V + second, joint) > PASS_P


def _mutate_processors(backend, name, monkeypatch):
    """One side processed differently from the other: each breaks losslessness away from temperature 1."""
    from dataclasses import replace

    mod = backend.module
    if name == "temperature-on-p-only":  # the draft's q seen untempered although the draft sampled tempered

        def pair(lp, lq, sp):
            return _proc(backend, lp, sp), _proc(backend, lq, replace(sp, temperature=1.0))
    elif name == "top-p-on-q-only":  # the target's nucleus forgotten: p keeps its tail

        def pair(lp, lq, sp):
            return _proc(backend, lp, replace(sp, top_p=1.0)), _proc(backend, lq, sp)
    elif name == "processors-after-normalisation":  # the draft side's processors fed probabilities, not logits

        def pair(lp, lq, sp):
            return _proc(backend, lp, sp), _proc(backend, _softmax_any(backend, lq), sp)
    else:
        raise AssertionError(name)
    monkeypatch.setattr(mod, "process_pair", pair)


#: each one-sided processor bug, the sampling it shows at, and the rules it is tried on
PROCESSOR_MUTATIONS = [
    ("temperature-on-p-only", SamplingParams(temperature=0.5)),
    ("temperature-on-p-only", SamplingParams(temperature=1.5)),
    ("top-p-on-q-only", SamplingParams(temperature=1.5, top_p=0.8)),
    ("processors-after-normalisation", SamplingParams(temperature=0.5, top_k=4)),
]


@pytest.mark.parametrize("rule", ["chain", "tree-specinfer"])
@pytest.mark.parametrize(
    "name, sp", PROCESSOR_MUTATIONS, ids=[f"{m}-T{s.temperature:g}" for m, s in PROCESSOR_MUTATIONS]
)
def test_one_sided_processors_are_rejected(backend, rule, name, sp, monkeypatch):
    LP, LQ = logit_tables(11)
    P = process_logits(LP, sp)
    # the correct rule passes on these very draws, so the rejection below is the mutation's
    n, tokens = logit_round(backend, rule, LP, LQ, sp, np.full(N_MUTANT, START), np.random.default_rng(7))
    assert chi2_p(tokens[:, 0], P[START]) > PASS_P
    _mutate_processors(backend, name, monkeypatch)
    n, tokens = logit_round(backend, rule, LP, LQ, sp, np.full(N_MUTANT, START), np.random.default_rng(7))
    assert chi2_or_zero(tokens[:, 0], P[START]) < FAIL_P


def test_temperature_on_p_only_is_the_correct_rule_at_temperature_1(backend, monkeypatch):
    """Why the suite needs temperatures other than 1: there the mutation is not a mutation at all."""
    LP, LQ = logit_tables(11)
    sp = SamplingParams()
    _mutate_processors(backend, "temperature-on-p-only", monkeypatch)
    _, tokens = logit_round(backend, "chain", LP, LQ, sp, np.full(N_LOGITS, START), np.random.default_rng(7))
    assert chi2_p(tokens[:, 0], process_logits(LP, sp)[START]) > PASS_P


# -- real decoding: a target and a draft Transformer, sampled at temperatures 0.5 and 1.5 -----------------------------


def _tiny_pair():
    import torch

    from measure.models import Transformer
    from roofline.passes.model import ModelSpec

    spec = ModelSpec("lossless-tiny", 1, 16, 2, 2, 8, 32, V, max_context=64)
    torch.manual_seed(0)
    target = Transformer(spec, dtype="fp32", device="cpu", init_std=0.6)
    torch.manual_seed(1)
    draft = Transformer(spec, dtype="fp32", device="cpu", init_std=0.6)
    return target, draft


def _next_token_probs(model, prompt, sp):
    import torch

    model.setup_cache(1, len(prompt) + 2)
    with torch.no_grad():
        logits = model(torch.as_tensor([prompt]))[0, -1].double().numpy()
    return process_logits(logits, sp)


@pytest.mark.parametrize("gamma", [2, Tree([-1, -1, 0])], ids=["chain", "tree"])  # a chain; a two-candidate tree
@pytest.mark.parametrize("proc", ["temp0.5-topk4", "temp1.5-topp0.8"])
def test_real_speculative_decoding_is_lossless_when_sampled(gamma, proc):
    pytest.importorskip("torch")
    from measure.decode import speculative_generate

    sp = SAMPLED[proc]
    target, draft = _tiny_pair()
    prompt = [1, 3, 2]
    p0 = _next_token_probs(target, prompt, sp)
    q0 = _next_token_probs(draft, prompt, sp)
    assert np.abs(p0 - q0).sum() > 0.2  # the draft really differs: rejections happen
    n = 20_000
    res = speculative_generate(target, draft, [prompt] * n, gamma, 1, sp, seed=3)
    first = np.array([t[0] for t in res.tokens])
    assert chi2_p(first, p0) > PASS_P
    assert 0 < res.rounds["accepted"].mean() < (gamma if isinstance(gamma, int) else gamma.depth)
