"""Draft trees: structure, the seeds' mask and numbers, acceptance models, optimal trees, tree size for a GPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import ModelSpec, SpecroofError, load_hardware, pass_time
from roofline.deploy.tree_sizing import best_tree_size
from roofline.speculation.trees import (
    ChainCurveAcceptance,
    DepthRankAcceptance,
    IIDAcceptance,
    SiblingRankAcceptance,
    Tree,
    eagle2_tree,
    optimal_tree,
    sequoia_dp_reference,
)

SEED_MASK = np.array(
    [
        [1, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 0, 0, 1, 0, 0],
        [0, 1, 0, 0, 1, 0],
        [0, 1, 0, 0, 0, 1],
    ]
)


def test_seed_six_node_mask_and_depths():
    t = Tree([-1, -1, 0, 0, 1, 1])  # A, B, A1, A2, B1, B2
    np.testing.assert_array_equal(t.attention_mask().astype(int), SEED_MASK)
    assert t.depths.tolist() == [1, 1, 2, 2, 2, 2]
    with_prefix = t.attention_mask(prefix_len=1)
    assert with_prefix.shape == (6, 7) and with_prefix[:, 0].all()
    n = 37
    assert t.position_ids(n).tolist() == [n, n, n + 1, n + 1, n + 1, n + 1]


def test_branching_factor_one_is_the_causal_mask():
    t = Tree.chain(3)
    np.testing.assert_array_equal(t.attention_mask(), np.tril(np.ones((3, 3), dtype=bool)))
    assert Tree.kary(1, 3) == t


def test_structure_accessors_and_round_trips():
    t = Tree.kary(2, 2)
    assert t.n_nodes == 6 and t.depth == 2 and t.widths.tolist() == [2, 4]
    assert t.paths() == [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    assert t.ranks.tolist() == [0, 1, 0, 1, 0, 1]
    assert Tree.from_paths(t.paths()) == t
    assert Tree.from_paths([(0,), (0, 0), (1,), (0, 1)]).parents.tolist() == [-1, -1, 0, 0]
    assert Tree.from_json(t.to_json()) == t
    labelled = Tree([-1, 0], tokens=[5, 9])
    assert Tree.from_json(labelled.to_json()).tokens.tolist() == [5, 9]
    assert t.node_paths()[5] == [1, 5]


def test_from_sequoia_growmap():
    growmap = {"roots": [[0], [1, 2]], "branches": [[2], [2, 1]], "Successors": [[1, 2], [3, 4], [5], [], [], []]}
    t = Tree.from_sequoia(growmap)
    assert t.parents.tolist() == [-1, -1, 0, 0, 1]
    acc = SiblingRankAcceptance.from_sequoia([0.0, 0.5, 0.2, 0.3])
    np.testing.assert_allclose(acc.p, [0.5, 0.2])


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        ([-1, 2, 1], "cycle"),
        ([-1, 5], "orphan"),
        ([-1, -2], "orphan"),
        ([1, -1], "comes after it"),
        ([[0]], "1-D list of integers"),
        ([0.5], "1-D list of integers"),
    ],
)
def test_malformed_parent_arrays(parents, message):
    with pytest.raises(SpecroofError, match=message):
        Tree(parents)


# -- the seeds' numbers ------------------------------------------------------------------------


def test_seed_chain_vs_tree_at_p_06_and_08():
    tree, chain = Tree.kary(2, 3), Tree.chain(3)
    assert tree.n_nodes == 14
    m = IIDAcceptance(0.6)
    assert 1 - (1 - 0.6) ** 2 == pytest.approx(0.84)
    assert tree.expected_tokens(m) == pytest.approx(1 + 0.84 + 0.7056 + 0.592704)
    assert tree.expected_tokens(m) - 1 == pytest.approx(2.138, abs=5e-4)
    assert chain.expected_tokens(m) == pytest.approx(2.176)
    assert tree.expected_tokens(m) / chain.expected_tokens(m) == pytest.approx(1.44, abs=0.005)
    m8 = IIDAcceptance(0.8)
    assert tree.expected_tokens(m8) == pytest.approx(3.766, abs=5e-4)
    assert chain.expected_tokens(m8) == pytest.approx(2.952)
    assert tree.expected_tokens(m8) / chain.expected_tokens(m8) == pytest.approx(1.276, abs=5e-4)


def test_seed_tree_on_a100_and_h100_exercise():
    m13 = ModelSpec.from_params(13e9)
    a100 = load_hardware("a100-sxm-80gb")
    h = load_hardware("h100-sxm-80gb")
    h100 = h.replace(peak_flop_per_s={**h.peak_flop_per_s, "fp16": 312e12})
    tree, chain = Tree.kary(2, 3), Tree.chain(3)
    e_tree, e_chain = tree.expected_tokens(IIDAcceptance(0.6)), chain.expected_tokens(IIDAcceptance(0.6))
    st14 = pass_time(m13, a100, 1, None, 0, "fp16", tree=tree)
    assert float(st14.t_compute_s) == pytest.approx(1.17e-3, abs=5e-6)
    assert float(st14.t_step_s) == pytest.approx(12.75e-3, abs=5e-6)  # still the memory floor
    t_tree = float(st14.t_step_s)
    t_chain = float(pass_time(m13, a100, 1, None, 0, "fp16", tree=chain).t_step_s)
    assert e_tree / t_tree == pytest.approx(246, abs=0.5)
    assert e_chain / t_chain == pytest.approx(171, abs=0.5)
    th = float(pass_time(m13, h100, 1, None, 0, "fp16", tree=tree).t_step_s)
    tc = float(pass_time(m13, h100, 1, None, 0, "fp16", tree=chain).t_step_s)
    assert e_tree / th == pytest.approx(404, abs=0.5)
    assert e_chain / tc == pytest.approx(280, abs=0.5)
    # tree over chain is unchanged by bandwidth while both stay memory bound
    assert (e_tree / th) / (e_chain / tc) == pytest.approx((e_tree / t_tree) / (e_chain / t_chain), rel=1e-12)


# -- acceptance models ---------------------------------------------------------------------------


def test_models_agree_where_they_should():
    t = Tree.kary(3, 3)
    iid = IIDAcceptance(0.5)
    assert t.expected_tokens(iid) == pytest.approx(t.expected_tokens(iid.as_sibling_rank(3)))
    curve = [0.9, 0.7, 0.4]
    chain = Tree.chain(3)
    assert chain.expected_tokens(ChainCurveAcceptance(curve)) == pytest.approx(1 + 0.9 + 0.63 + 0.252)
    assert t.expected_tokens(ChainCurveAcceptance(curve)) == pytest.approx(
        chain.expected_tokens(ChainCurveAcceptance(curve))
    )
    table = np.array([[0.6, 0.2], [0.5, 0.1]])
    t2 = Tree.kary(2, 2)
    want = 1 + 0.6 + 0.2 + 0.6 * (0.5 + 0.1) + 0.2 * (0.5 + 0.1)
    assert t2.expected_tokens(DepthRankAcceptance(table)) == pytest.approx(want)
    assert Tree([]).expected_tokens(iid) == 1.0  # root only: the bonus token


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SiblingRankAcceptance([0.7, 0.5]), "sum to at most 1"),
        (lambda: SiblingRankAcceptance([-0.1]), "must lie in"),
        (lambda: IIDAcceptance(1.5), "p must lie in"),
        (lambda: DepthRankAcceptance([[0.9, 0.3]]), "sum to at most 1"),
        (lambda: optimal_tree([0.5, 0.2], -1, 3), "n_nodes must be >= 0"),
        (lambda: optimal_tree([0.5, 0.2], 8, 0), "max_depth must be >= 1"),
        (lambda: SiblingRankAcceptance.from_sequoia([0.5]), "element 0 unused"),
    ],
)
def test_bad_acceptance_and_budgets(make, message):
    with pytest.raises(SpecroofError, match=message):
        make()


# -- optimal trees ---------------------------------------------------------------------------------


def all_trees(n: int, max_depth: int, max_rank: int = 99) -> list[Tree]:
    """Every rank-contiguous tree with exactly n nodes, at most max_depth levels and max_rank children (brute force)."""
    frontier = {frozenset()}
    for _ in range(n):
        nxt = set()
        for paths in frontier:
            for parent in [(), *paths]:
                if len(parent) >= max_depth:
                    continue
                k = sum(1 for p in paths if len(p) == len(parent) + 1 and p[:-1] == parent)
                if k >= max_rank:
                    continue
                nxt.add(paths | {(*parent, k)})
        frontier = nxt
    return [Tree.from_paths(sorted(p)) for p in frontier]


def brute_best(model, n, d):
    trees = all_trees(n, d, model.max_rank or 99) if n else [Tree([])]
    return max(t.expected_tokens(model) for t in trees) if trees else float("nan")


@pytest.mark.parametrize("seed", range(4))
def test_dp_matches_brute_force_and_the_triple_loop(seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(4))[:3]  # not sorted: the DP must not assume monotone ranks
    opt = optimal_tree(p, 6, 3)
    model = SiblingRankAcceptance(p)
    for n in range(0, 7):
        for d in range(1, 4):
            want = brute_best(model, n, d)
            if np.isnan(want):  # more nodes than 3 ranks x d levels can hold
                assert np.isnan(opt.table[n, d])
                continue
            assert opt.table[n, d] == pytest.approx(want, rel=1e-12)
            tr = opt.tree_for(n, d)
            assert tr.n_nodes == n and tr.depth <= d
            assert tr.expected_tokens(model) == pytest.approx(opt.table[n, d], rel=1e-12)
    assert np.isnan(opt.table[3, 0]) and opt.table[0, 0] == 1.0
    ref = np.array(sequoia_dp_reference(list(p), 21, 6))[1:, 1:]
    ref[~np.isfinite(ref)] = np.nan
    big = optimal_tree(p, 20, 5).table
    np.testing.assert_array_equal(big, ref)  # identical values, not just close


@pytest.mark.parametrize(
    "model", [IIDAcceptance(0.55), DepthRankAcceptance([[0.5, 0.3, 0.1], [0.4, 0.2, 0.1], [0.3, 0.2, 0.1]])]
)
def test_best_first_matches_brute_force(model):
    opt = optimal_tree(model, 6, 3)
    for n in range(1, 7):
        for d in (1, 2, 3):
            want = brute_best(model, n, d)
            assert opt.table[n, d] == pytest.approx(want, rel=1e-12, nan_ok=True)


def test_best_first_equals_dp_for_monotone_vectors():
    p = np.array([0.5, 0.2, 0.1, 0.05])
    dp = optimal_tree(SiblingRankAcceptance(p), 30, 6).table
    # the same model as a depth-independent depth x rank table goes best-first
    bf = optimal_tree(DepthRankAcceptance(np.tile(p, (6, 1))), 30, 6).table
    np.testing.assert_allclose(dp[:, 1:], bf[:, 1:], rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=2, max_size=5), st.integers(1, 5), st.integers(1, 3))
def test_optimal_never_worse_than_chain_or_kary(weights, depth, b):
    w = np.array(weights)
    p = w / w.sum() * 0.95
    model = SiblingRankAcceptance(p)
    for t in (Tree.chain(depth), Tree.kary(b, depth)):
        if t.n_nodes <= 60 and (b <= p.size or t.depth == 0 or t.n_nodes == depth):
            opt = optimal_tree(model, t.n_nodes, t.depth)
            assert opt.table[t.n_nodes, t.depth] >= t.expected_tokens(model) - 1e-12


def test_eagle2_dynamic_tree():
    probs = {(): [0.6, 0.3, 0.1], (0,): [0.9, 0.05], (1,): [0.5, 0.5], (0, 0): [0.8, 0.1]}

    def propose(path):
        return probs.get(path, [0.5, 0.25])

    tree, p = eagle2_tree(propose, depth=3, top_k=2, n_keep=5)
    assert tree.n_nodes == 5
    assert np.all(np.diff(p[np.argsort(tree.depths, kind="stable")]) <= 1) and p.max() == pytest.approx(0.6)
    # the most likely path 0 -> 0 -> 0 (0.6 x 0.9 x 0.8) is kept whole
    paths = set(tree.paths())
    assert {(0,), (0, 0), (0, 0, 0)} <= paths


def test_best_tree_size_on_a_gpu():
    acc = SiblingRankAcceptance([0.6, 0.15, 0.08, 0.04])
    choice = best_tree_size("a100-sxm-80gb", "llama-2-13b", "llama-68m", acc, budgets=[1, 4, 16, 64], max_depth=6)
    t = choice.table
    assert {"n_nodes", "depth", "expected_tokens", "t_verify_s", "speedup"} <= set(t.columns)
    assert choice.best["speedup"] == t["speedup"].max() and choice.best["speedup"] > 1.5
    assert choice.tree.n_nodes == choice.best["n_nodes"]
    # a measured latency table that punishes big trees moves the choice to a smaller tree
    lat = {n: 0.02 * (1 + n / 4) for n in range(1, 66)}
    small = best_tree_size(
        "a100-sxm-80gb", "llama-2-13b", "llama-68m", acc, budgets=[1, 4, 16, 64], max_depth=6, verify_latency=lat
    )
    assert small.best["n_nodes"] < choice.best["n_nodes"]


def test_tree_draw_returns_a_figure():
    t = Tree.kary(2, 2)
    from roofline.plot import tree_chart

    fig = tree_chart(t, values=t.path_probabilities(IIDAcceptance(0.6)))
    assert fig.axes


def test_json_is_plain():
    assert json.loads(Tree.chain(2).to_json()) == {"parents": [-1, 0]}


def test_breadth_first_keeps_the_tree():
    t = Tree([-1, 0, 1, 0, -1])
    b = t.breadth_first()
    assert b.parents.tolist() == [-1, -1, 0, 0, 2]
    assert sorted(b.paths()) == sorted(t.paths())


# -- the tree DP at deployment budgets: pruned search against the dense recurrence ------------------------------


def dense_dp(p, m_max, l_max):
    """The dense max-plus recurrence the DP used before it learnt to skip (every size, split, rank and level)."""
    K = min(p.size, max(1, m_max - 1))
    p = p[:K]
    T = np.full((m_max + 1, l_max + 1, K + 1), -np.inf)
    T[1, 1:, 0] = 1.0
    F = np.full((m_max + 1, l_max + 1), -np.inf)
    F[1, 1:] = 1.0
    for level in range(2, l_max + 1):
        sub = F[:, level - 1]
        rows = np.arange(2, m_max + 1)
        cols = np.arange(m_max)
        rest = rows[:, None] - cols[None, :]
        child = np.where((cols[None, :] >= 1) & (rest >= 1), sub[np.clip(rest, 0, m_max)], -np.inf)
        zero = np.where(np.isfinite(child), 0.0, -np.inf)
        Tl = T[:, level, :]
        Tl[2:, 1] = 1.0 + (child[:, 1] * p[0] if p[0] > 0 else zero[:, 1])
        for b in range(2, K + 1):
            cand = (child * p[b - 1] if p[b - 1] > 0 else zero) + Tl[None, :m_max, b - 1]
            Tl[2:, b] = cand.max(axis=1)
        T[1, level, 0] = 1.0
        F[:, level] = Tl.max(axis=1)
    return F


def sequoia_like(n_ranks=64, zeros=()):
    """A strong first rank and a decaying tail summing to < 1, as Sequoia's measured vectors."""
    p = np.array([0.60, 0.14, 0.06, 0.04, 0.03] + [0.03 * 0.8**k for k in range(1, n_ranks - 4)])[:n_ranks]
    p[list(zeros)] = 0.0
    return p


def thin(n_ranks=64, seed=0):
    """Low acceptance spread over many ranks: wide, shallow trees."""
    return np.sort(np.random.default_rng(seed).dirichlet(np.ones(n_ranks + 6))[:n_ranks])[::-1]


def _count_prunes(monkeypatch):
    from roofline.speculation import trees

    hits = {"levels": 0, "ranks": 0, "windows": 0}
    depth, ranks, rank = trees._depth_cannot_pay, trees._later_ranks_cannot_win, trees._dp_rank

    def count_depth(*a):
        out = depth(*a)
        hits["levels"] += out
        return out

    def count_ranks(*a):
        out = ranks(*a)
        hits["ranks"] += out
        return out

    def count_windows(out, left, child, pb, sub_top, dmax, lo, hi, b, pad, buf):
        hits["windows"] += (hi - lo + 1) * min(dmax, hi - b) > trees._DP_SMALL
        return rank(out, left, child, pb, sub_top, dmax, lo, hi, b, pad, buf)

    monkeypatch.setattr(trees, "_depth_cannot_pay", count_depth)
    monkeypatch.setattr(trees, "_later_ranks_cannot_win", count_ranks)
    monkeypatch.setattr(trees, "_dp_rank", count_windows)
    return hits


@pytest.mark.parametrize(
    "p, m_max, l_max",
    [
        (sequoia_like(), 301, 13),
        (sequoia_like(zeros=(5, 17, 40)), 301, 13),
        (0.6 * 0.38 ** np.arange(64), 260, 17),
        (thin(), 301, 9),
        (thin(seed=3)[::-1].copy(), 200, 6),  # increasing ranks: nothing is monotone the easy way
    ],
    ids=["sequoia-like", "sequoia-like-zeros", "geometric", "thin", "increasing"],
)
def test_pruned_dp_equals_the_dense_recurrence(p, m_max, l_max, monkeypatch):
    from roofline.speculation.trees import sequoia_dp

    hits = _count_prunes(monkeypatch)
    T, B, F = sequoia_dp(p, m_max, l_max)
    want = dense_dp(p, m_max, l_max)
    np.testing.assert_array_equal(F, want)  # bit for bit: every kept candidate is computed as the dense one
    np.testing.assert_array_equal(T.max(axis=2), F)
    assert (np.take_along_axis(T, B[..., None], axis=2)[..., 0] == F).all()
    assert hits["windows"] > 0  # the split search really was narrowed somewhere


def test_every_pruning_rule_fires_and_keeps_the_values(monkeypatch):
    from roofline.speculation.trees import sequoia_dp

    hits = _count_prunes(monkeypatch)
    p = 0.6 * 0.38 ** np.arange(64)  # deep trees of few ranks: ranks stop mattering
    np.testing.assert_array_equal(sequoia_dp(p, 301, 11)[2], dense_dp(p, 301, 11))
    assert hits["ranks"] > 0 and hits["windows"] > 0
    q = thin()  # shallow trees: a fourth level cannot pay, proven without computing it
    np.testing.assert_array_equal(sequoia_dp(q, 301, 12)[2], dense_dp(q, 301, 12))
    assert hits["levels"] > 0


@pytest.mark.parametrize("seed", range(12))
def test_pruned_dp_on_random_vectors(seed):
    from roofline.speculation.trees import sequoia_dp

    rng = np.random.default_rng(100 + seed)
    k = int(rng.integers(1, 40))
    p = rng.dirichlet(np.ones(k + 1) * rng.uniform(0.2, 3))[:k]  # unsorted
    if seed % 3 == 0:
        p[rng.integers(0, k, size=max(1, k // 4))] = 0.0  # never-accepted ranks in the middle
    m_max, l_max = int(rng.integers(2, 220)), int(rng.integers(2, 12))
    F = sequoia_dp(p, m_max, l_max)[2]
    np.testing.assert_array_equal(F, dense_dp(p, m_max, l_max))


@pytest.mark.parametrize("p", [sequoia_like(zeros=(5, 17, 40)), thin()], ids=["sequoia-like", "thin"])
def test_trees_from_the_pruned_dp_reach_their_table_values(p):
    opt = optimal_tree(p, 256, 12)
    model = SiblingRankAcceptance(p)
    for n, d in [(256, 12), (255, 3), (100, 12), (17, 2), (256, 1), (64, 1), (1, 5)]:
        if np.isnan(opt.table[n, d]):
            assert n > 64 and d == 1  # 64 ranks hold at most 64 nodes on one level
            continue
        tr = opt.tree_for(n, d)
        assert tr.n_nodes == n and tr.depth <= d
        assert tr.expected_tokens(model) == pytest.approx(opt.table[n, d], abs=1e-9)
